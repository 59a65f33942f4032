"""How rows become batches: length-grouped training batches and length-sorted evaluation batches (little
padding), putting sorted outputs back in input order, and the fingerprint that lets tokenized datasets be cached.
Several tasks' batches: multitask.py."""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from datasets.fingerprint import Hasher
from torch.utils.data import Sampler

__all__ = [
    "token_lengths",
    "LengthSortedSampler",
    "length_sorted_batches",
    "LengthGroupedRowSampler",
    "length_grouped_batches",
    "restore_input_order",
    "tokenized",
    "tokenizing_fingerprint",
]

# Rows are sorted by length within groups of this many batches.
BATCHES_PER_LENGTH_GROUP = 50


# A sorted evaluation batch ends early rather than let padding exceed this share of its positions. With a fixed batch
# size the last batches of a small split span wide length ranges: on fortunes' validation split (336 quotations,
# batches of 8) fully sorted fixed-size batches computed 17% padding (bench/throughput.py).
EVAL_MIN_REAL_FRACTION = 0.95


def token_lengths(dataset, column: str = "input_ids") -> list[int]:
    """The number of tokens of every row, read column-wise (one Arrow read, not one Python row at a time)."""
    column_names = getattr(dataset, "column_names", None)
    if column_names is not None and column not in column_names:
        raise ValueError(
            f"Cannot sort by length: the dataset has no {column!r} column (columns: {column_names})."
        )
    if column_names is not None:
        import pyarrow.compute as pc  # a dependency of datasets

        # The Arrow view follows the dataset's row order (a shuffled or selected dataset's too).
        return pc.list_value_length(dataset.with_format("arrow")[column]).to_pylist()
    return [len(row[column]) for row in dataset]


class LengthSortedSampler(Sampler[int]):
    """Every index once, longest row first; ties keep the dataset's order (a stable sort), so the order is the same
    on every process and in every run."""

    def __init__(self, lengths: Sequence[int]):
        self.lengths = list(lengths)
        self.order = sorted(range(len(lengths)), key=lambda index: -lengths[index])

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self) -> Iterator[int]:
        return iter(self.order)


def length_sorted_batches(
    order: Sequence[int],
    lengths: Sequence[int],
    max_batch_size: int,
    min_real_fraction: float = EVAL_MIN_REAL_FRACTION,
) -> list[list[int]]:
    """``order`` (rows sorted longest first) cut into consecutive batches of at most ``max_batch_size`` rows, a batch
    ending early where the next row would bring its share of real tokens (padded to its first, longest row) below
    ``min_real_fraction``. Consecutive, so the batches read in turn give the rows in ``order``."""
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}.")
    batches: list[list[int]] = []
    batch: list[int] = []
    real = 0
    for row in order:
        length = lengths[row]
        if batch:
            longest = max(lengths[batch[0]], 1)  # an empty row still takes one position
            fits = len(batch) < max_batch_size
            if not fits or real + length < min_real_fraction * longest * (len(batch) + 1):
                batches.append(batch)
                batch, real = [], 0
        batch.append(row)
        real += length
    if batch:
        batches.append(batch)
    return batches


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


def tokenized(
    dataset: Dataset, encode: Callable, tokenizer, description: str, with_indices: bool = False
) -> Dataset:
    """``dataset`` mapped in batches by ``encode``, its columns replaced by what ``encode`` returns, cached under
    :func:`tokenizing_fingerprint` (every split of every task kind is tokenized so)."""
    return dataset.map(
        encode,
        batched=True,
        with_indices=with_indices,
        remove_columns=dataset.column_names,
        desc=description,
        new_fingerprint=tokenizing_fingerprint(dataset, encode, tokenizer),
    )


def tokenizing_fingerprint(dataset: Dataset, function: Callable, tokenizer) -> str | None:
    """The ``new_fingerprint`` for ``dataset.map(function)``, or None (let datasets hash it) when the tokenizer has
    no serialised form (a slow tokenizer) or the dataset no fingerprint."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not getattr(dataset, "_fingerprint", None):
        return None
    closure = {
        name: None if cell.cell_contents is tokenizer else cell.cell_contents
        for name, cell in zip(function.__code__.co_freevars, function.__closure__ or (), strict=True)
    }
    return Hasher.hash(
        [
            dataset._fingerprint,
            function.__qualname__,
            Path(inspect.getfile(function)).read_bytes(),
            backend.to_str(),
            repr(
                tokenizer
            ),  # class, model_max_length, padding and truncation sides, special and added tokens
            closure,
        ]
    )
