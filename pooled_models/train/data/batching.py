"""How rows become batches: length-grouped training batches and length-sorted evaluation batches (little
padding), the fingerprint that lets tokenized datasets be cached, and for runs of tasks the task rows, the
task-homogeneous batch sampler (proportional, temperature, round robin, curriculum) and the collator."""

from __future__ import annotations

import copy
import inspect
import math
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset
from datasets.fingerprint import Hasher
from torch.utils.data import Dataset as TorchDataset
from torch.utils.data import Sampler
from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding

from ...modeling.configuration_multitask import TOKEN

__all__ = [
    "token_lengths",
    "LengthSortedSampler",
    "length_sorted_batches",
    "LengthGroupedRowSampler",
    "length_grouped_batches",
    "restore_input_order",
    "tokenizing_fingerprint",
    "SAMPLING_STRATEGIES",
    "TaskBatchSampler",
    "task_shares",
    "describe_counts",
    "TASK_KEY",
    "TaskRows",
    "MultiTaskRows",
    "MultiTaskCollator",
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
        return [len(ids) for ids in dataset[column]]
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


SAMPLING_STRATEGIES = ("proportional", "temperature", "round_robin")


def task_shares(weights: dict[str, float], total: int, minimum: int = 1) -> dict[str, int]:
    """``total`` split among the tasks in proportion to ``weights`` (largest remainders; ties in task order); a task
    whose share rounds below ``minimum`` gets it from the largest share, when there are enough to go round."""
    names = list(weights)
    if not names:
        return {}
    whole = sum(weights.values())
    exact = {name: total * weights[name] / whole for name in names}
    shares = {name: math.floor(exact[name]) for name in names}
    by_fraction = sorted(names, key=lambda name: (-(exact[name] - shares[name]), names.index(name)))
    for name in by_fraction[: total - sum(shares.values())]:
        shares[name] += 1
    if total >= minimum * len(names):
        for name in names:
            while shares[name] < minimum:
                largest = max(names, key=lambda other: shares[other])
                shares[largest] -= 1
                shares[name] += 1
    return shares


class TaskBatchSampler:
    """A batch sampler (for ``DataLoader(batch_sampler=...)``) over the concatenation of several tasks' rows.

    Args:
        task_sizes: task name -> number of rows, in the order their rows are concatenated.
        batch_size: rows per batch (a task's last batch of a pass may be smaller).
        strategy: one of ``SAMPLING_STRATEGIES``.
        alpha: the exponent of ``temperature`` sampling.
        start_epochs: task -> the first epoch (from 0) it is sampled in; 0 when not given.
        seed: the seed of the orders.
        group: batches of the same task in a row (the number of processes).
        lengths: task -> each row's token count; batches of rows of similar length when given.
    """

    def __init__(
        self,
        task_sizes: dict[str, int],
        batch_size: int,
        strategy: str = "proportional",
        alpha: float = 0.5,
        start_epochs: dict[str, int] | None = None,
        seed: int = 0,
        group: int = 1,
        lengths: dict[str, Sequence[int]] | None = None,
    ):
        if strategy not in SAMPLING_STRATEGIES:
            raise ValueError(
                f"Unknown task_sampling {strategy!r}. Valid choices: {', '.join(SAMPLING_STRATEGIES)}."
            )
        if not task_sizes or any(size < 1 for size in task_sizes.values()):
            raise ValueError(f"Every task needs at least one training row, got {task_sizes}.")
        self.task_sizes = dict(task_sizes)
        # Not named batch_size: Accelerate's sharding takes a batch sampler with a batch_size to yield full batches
        # only, and a task's last batch of a pass may be smaller.
        self.rows_per_batch = batch_size
        self.strategy = strategy
        self.alpha = alpha
        self.start_epochs = {name: (start_epochs or {}).get(name, 0) for name in task_sizes}
        if all(start > 0 for start in self.start_epochs.values()):
            raise ValueError("start_epoch: at least one task must start in the first epoch (start_epoch 0).")
        self.seed = seed
        self.group = group
        self.lengths = {name: list(values) for name, values in (lengths or {}).items()}
        for name, values in self.lengths.items():
            if len(values) != self.task_sizes.get(name, -1):
                raise ValueError(
                    f"lengths[{name!r}] has {len(values)} entries for the task's {self.task_sizes.get(name)} rows."
                )
        self.epoch = 0
        offsets, offset = {}, 0
        for name, size in self.task_sizes.items():
            offsets[name] = offset
            offset += size
        self.offsets = offsets
        self.batches_per_pass = {name: math.ceil(size / batch_size) for name, size in self.task_sizes.items()}
        self.steps = math.ceil(sum(self.batches_per_pass.values()) / group)  # groups of batches per epoch

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.steps * self.group

    def active_tasks(self, epoch: int) -> list[str]:
        return [name for name in self.task_sizes if self.start_epochs[name] <= epoch]

    def counts(self, epoch: int) -> dict[str, int]:
        """Batches per task in ``epoch`` (0 for the tasks that have not started)."""
        active = self.active_tasks(epoch)
        if self.strategy == "round_robin":
            weights = {name: 1.0 for name in active}
        elif self.strategy == "temperature":
            weights = {name: float(self.task_sizes[name]) ** self.alpha for name in active}
        else:
            weights = {name: float(self.batches_per_pass[name]) for name in active}
        steps = task_shares(weights, self.steps)
        return {name: steps.get(name, 0) * self.group for name in self.task_sizes}

    def plan(self, epoch: int) -> list[str]:
        """The task of each batch of ``epoch``, in order."""
        counts = {name: count // self.group for name, count in self.counts(epoch).items() if count}
        if self.strategy == "round_robin":
            order = _round_robin(counts)
        else:
            order = [name for name, count in counts.items() for _ in range(count)]
            random.Random(f"{self.seed}-order-{epoch}").shuffle(order)
        return [name for name in order for _ in range(self.group)]

    def batches(self, epoch: int) -> list[list[int]]:
        """The rows (indices into the concatenated tasks) of each batch of ``epoch``."""
        plan = self.plan(epoch)
        streams = {name: self._stream(name, epoch) for name in set(plan)}
        return [next(streams[name]) for name in plan]

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches(self.epoch)

    def _stream(self, task: str, epoch: int) -> Iterator[list[int]]:
        """The task's batches in ``epoch``: passes over its rows, each in a fresh order, cut into batches (a pass's
        last batch may be smaller), for as long as the epoch asks."""
        size, offset = self.task_sizes[task], self.offsets[task]
        lengths = self.lengths.get(task)
        passes = 0
        while True:
            rows = list(range(size))
            random.Random(f"{self.seed}-{task}-{epoch}-{passes}").shuffle(rows)
            if lengths is not None:
                rng = random.Random(f"{self.seed}-{task}-{epoch}-{passes}-batches")
                batches = length_grouped_batches(rows, lengths, self.rows_per_batch, rng)
            else:
                batches = [
                    rows[start : start + self.rows_per_batch] for start in range(0, size, self.rows_per_batch)
                ]
            for batch in batches:
                yield [offset + row for row in batch]
            passes += 1


def _round_robin(counts: dict[str, int]) -> list[str]:
    """Tasks in turn, in task order, until each has had its count."""
    left = dict(counts)
    order: list[str] = []
    while any(left.values()):
        for name in counts:
            if left[name]:
                order.append(name)
                left[name] -= 1
    return order


def describe_counts(sampler: TaskBatchSampler, epochs: Sequence[int]) -> str:
    """``team 20, entities 5`` per epoch, for the log."""
    lines = []
    for epoch in epochs:
        counts = sampler.counts(epoch)
        lines.append(f"epoch {epoch}: " + ", ".join(f"{name} {count}" for name, count in counts.items()))
    return "; ".join(lines)


# The key of the task's name in a row and in a batch; the model's forward takes it (model(**batch)).
TASK_KEY = "task"


class TaskRows(TorchDataset):
    """One task's encoded rows, each with the task's name."""

    def __init__(self, task: str, rows):
        self.task = task
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {**self.rows[index], TASK_KEY: self.task}


class MultiTaskRows(TorchDataset):
    """Every task's encoded rows, one after the other (in task order): what the task sampler's indices point into."""

    def __init__(self, tasks: dict[str, Any]):
        self.parts = [TaskRows(task, rows) for task, rows in tasks.items()]
        self.sizes = {part.task: len(part) for part in self.parts}
        self.starts = []
        start = 0
        for part in self.parts:
            self.starts.append(start)
            start += len(part)
        self.total = start

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, index: int) -> dict[str, Any]:
        for part, start in zip(reversed(self.parts), reversed(self.starts), strict=True):
            if index >= start:
                return part[index - start]
        raise IndexError(index)


def _padding_on_the_right(tokenizer):
    if getattr(tokenizer, "padding_side", "right") == "right":
        return tokenizer
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.padding_side = "right"
    return tokenizer


class MultiTaskCollator:
    """Pads a batch of one task's rows: as ``DataCollatorWithPadding`` for a sequence task, as
    ``DataCollatorForTokenClassification`` (labels padded with -100) for a token task; the batch keeps the task's
    name under ``task``."""

    def __init__(self, tokenizer, kinds: dict[str, str]):
        self.kinds = dict(kinds)
        self.sequence = DataCollatorWithPadding(tokenizer)
        # Token batches are padded on the right whatever the tokenizer says (the model gives the same logits either
        # way), so that a row's predictions start at position 0 when they are read back per word.
        self.token = DataCollatorForTokenClassification(_padding_on_the_right(tokenizer))

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, Any]:
        tasks = {feature.get(TASK_KEY) for feature in features}
        if len(tasks) != 1 or None in tasks:
            raise ValueError(
                f"A batch holds rows of one task (the task sampler draws them so); this one mixes {sorted(map(str, tasks))}."
            )
        task = tasks.pop()
        rows = [{key: value for key, value in feature.items() if key != TASK_KEY} for feature in features]
        batch = (self.token if self.kinds[task] == TOKEN else self.sequence)(rows)
        batch[TASK_KEY] = task
        return batch
