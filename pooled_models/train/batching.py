"""Batches with little padding: length-grouped training batches, length-sorted evaluation and prediction batches,
and the predictions put back in input order.

A padded position costs the backbone as much as a real token. Texts in random order (the Trainer's default) make
every batch as long as its longest text; on real text of mixed length most computed positions are then padding.
Training keeps its randomness: rows are shuffled, cut in groups of 50 batches, sorted by length within each group
(transformers' ``LengthGroupedSampler`` does the same with groups of at most a quarter of the data, which on a few
hundred rows leaves a fifth of the computed positions padding), and the batches of an epoch are shuffled; evaluation and prediction need no randomness, so their batches are fully sorted, longest first (a batch that does
not fit in memory fails at once, not at the end), and the outputs are restored to the dataset's order.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler

__all__ = [
    "token_lengths",
    "LengthSortedSampler",
    "LengthGroupedRowSampler",
    "length_grouped_batches",
    "restore_input_order",
]

# Rows are sorted by length within groups of this many batches.
BATCHES_PER_LENGTH_GROUP = 50


def token_lengths(dataset, column: str = "input_ids") -> list[int]:
    """The number of tokens of every row, read column-wise (one Arrow read, not one Python row at a time)."""
    column_names = getattr(dataset, "column_names", None)
    if column_names is not None and column not in column_names:
        raise ValueError(
            f"Cannot sort by length: the dataset has no {column!r} column (columns: {column_names})."
        )
    if column_names is not None:
        return [len(ids) for ids in dataset[column]]
    return [len(row[column]) for row in dataset]


class LengthSortedSampler(Sampler[int]):
    """Every index once, longest row first; ties keep the dataset's order (a stable sort), so the order is the same
    on every process and in every run."""

    def __init__(self, lengths: Sequence[int]):
        self.order = sorted(range(len(lengths)), key=lambda index: -lengths[index])

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self) -> Iterator[int]:
        return iter(self.order)


def length_grouped_batches(
    rows: Sequence[int], lengths: Sequence[int], batch_size: int, rng: random.Random
) -> list[list[int]]:
    """``rows`` (already shuffled) in batches of rows of similar length: groups of ``BATCHES_PER_LENGTH_GROUP`` batches
    sorted longest first, cut into batches, and the full batches shuffled with ``rng``, the longest one first (a batch
    that does not fit in memory fails at once). The one smaller batch, if any, comes last, so every other batch is
    exactly ``batch_size`` rows wherever a DataLoader cuts the stream."""
    size = BATCHES_PER_LENGTH_GROUP * batch_size
    ordered: list[int] = []
    for start in range(0, len(rows), size):
        ordered += sorted(rows[start : start + size], key=lambda row: -lengths[row])
    batches = [ordered[start : start + batch_size] for start in range(0, len(ordered), batch_size)]
    partial = [batches.pop()] if batches and len(batches[-1]) < batch_size else []
    if batches:
        longest = max(range(len(batches)), key=lambda index: lengths[batches[index][0]])
        first = batches.pop(longest)
        rng.shuffle(batches)
        batches.insert(0, first)
    return batches + partial


class LengthGroupedRowSampler(Sampler[int]):
    """Training rows in an order whose every ``batch_size`` consecutive rows have similar length (see
    :func:`length_grouped_batches`), drawn afresh each epoch from torch's global generator, which Trainer seeds: every
    process of a distributed run draws the same order."""

    def __init__(self, lengths: Sequence[int], batch_size: int):
        self.lengths = list(lengths)
        self.batch_size = batch_size

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        seed = int(torch.randint(0, 2**62, (1,)).item())
        rng = random.Random(seed)
        rows = list(range(len(self.lengths)))
        rng.shuffle(rows)
        for batch in length_grouped_batches(rows, self.lengths, self.batch_size, rng):
            yield from batch


def restore_input_order(outputs, order: Sequence[int]):
    """``outputs`` (an array, a tensor, or a tuple/list/dict of them, rows in ``order``) with its rows back in input
    order: row ``order[i]`` of the dataset was computed ``i``-th."""
    if outputs is None:
        return None
    if isinstance(outputs, dict):
        return type(outputs)({key: restore_input_order(value, order) for key, value in outputs.items()})
    if isinstance(outputs, (tuple, list)):
        return type(outputs)(restore_input_order(value, order) for value in outputs)
    if len(outputs) != len(order):
        raise ValueError(
            f"{len(outputs)} output rows for {len(order)} input rows: cannot restore the input order."
        )
    inverse = np.empty(len(order), dtype=np.int64)
    inverse[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    if isinstance(outputs, torch.Tensor):
        return outputs[torch.from_numpy(inverse)]
    return np.asarray(outputs)[inverse]
