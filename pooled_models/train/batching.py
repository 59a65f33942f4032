"""Batches with little padding: length-grouped training batches, length-sorted evaluation and prediction batches,
and the predictions put back in input order.

A padded position costs the backbone as much as a real token. Texts in random order (the Trainer's default) make
every batch as long as its longest text; on real text of mixed length most computed positions are then padding.
Training keeps its randomness between groups of similar length (transformers' ``LengthGroupedSampler``);
evaluation and prediction need no randomness, so their batches are fully sorted, longest first (a batch that does
not fit in memory fails at once, not at the end), and the outputs are restored to the dataset's order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler

__all__ = ["token_lengths", "LengthSortedSampler", "restore_input_order"]


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
