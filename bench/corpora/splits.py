"""Cutting a shuffled list of rows into train, validation and test by fractions, for the benchmark corpora."""

from __future__ import annotations

from typing import TypeVar

__all__ = ["SPLITS", "split_by_fractions"]

SPLITS = ("train", "validation", "test")
Row = TypeVar("Row")


def split_by_fractions(rows: list[Row], fractions: tuple[float, float, float]) -> dict[str, list[Row]]:
    """``rows`` in order: the first ``fractions[0]`` to train, the next ``fractions[1]`` to validation, the rest
    to test (so rounding never loses a row)."""
    train_end = round(len(rows) * fractions[0])
    validation_end = train_end + round(len(rows) * fractions[1])
    return {
        "train": rows[:train_end],
        "validation": rows[train_end:validation_end],
        "test": rows[validation_end:],
    }
