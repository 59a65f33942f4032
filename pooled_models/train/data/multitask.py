"""Several tasks' rows in one run: the task's name in every row and batch, the rows of every task one after the
other, the task-homogeneous batch sampler (proportional, temperature, round robin, curriculum), and the collator that
pads a batch as its task's kind needs (a run of one task uses it too: its rows carry no task name)."""

from __future__ import annotations

import copy
import dataclasses
import math
import random
from collections.abc import Iterator, Sequence
from typing import Any

from torch.utils.data import ConcatDataset
from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding

from ...modeling.configuration_multitask import TOKEN
from ..arguments.defaults import SAMPLING_STRATEGIES
from .batching import length_grouped_batches
from .buckets import bucket_for

__all__ = [
    "SAMPLING_STRATEGIES",
    "TaskBatchSampler",
    "task_shares",
    "TASK_KEY",
    "with_task_name",
    "MultiTaskRows",
    "TaskCollator",
]


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


# The key of the task's name in a row and in a batch; PooledForMultiTask's forward takes it (model(**batch)). A
# single-task model's forward does not: Trainer leaves the key out of its batches.
TASK_KEY = "task"


def with_task_name(dataset, task: str):
    """``dataset`` (a tokenized split) with a column naming its task in every row."""
    return dataset.add_column(TASK_KEY, [task] * len(dataset))


class MultiTaskRows(ConcatDataset):
    """Every task's encoded rows, one after the other (in task order): what the task sampler's indices point into."""

    def __init__(self, tasks: dict[str, Any]):
        super().__init__(list(tasks.values()))
        self.tasks = list(tasks)
        self.sizes = {task: len(rows) for task, rows in tasks.items()}
        self.parts = dict(tasks)


def _padding_on_the_right(tokenizer):
    if getattr(tokenizer, "padding_side", "right") == "right":
        return tokenizer
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.padding_side = "right"
    return tokenizer


class TaskCollator:
    """Pads a batch of one task's rows: as ``DataCollatorWithPadding`` for a sequence task, as
    ``DataCollatorForTokenClassification`` (labels padded with -100) for a token task. The batch keeps the task's
    name under ``task`` when its rows carry it (a run of several tasks); a run of one task has rows without it.
    With ``buckets`` (data/buckets.py) a batch is padded to the smallest bucket that holds its longest text (past the
    last, to ``max_length``) instead of to its longest text."""

    def __init__(
        self,
        tokenizer,
        kinds: dict[str, str],
        pad_to_multiple_of: int | None = None,
        buckets: Sequence[int] | None = None,
        max_length: int | None = None,
    ):
        self.kinds = dict(kinds)
        self.sequence = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=pad_to_multiple_of)
        # Token batches are padded on the right whatever the tokenizer says (the model gives the same logits either
        # way), so that a row's predictions start at position 0 when they are read back per word.
        self.token = DataCollatorForTokenClassification(
            _padding_on_the_right(tokenizer), pad_to_multiple_of=pad_to_multiple_of
        )
        if buckets is not None and (pad_to_multiple_of is not None or max_length is None):
            raise ValueError("Bucket padding takes the run's max_length and no pad_to_multiple_of.")
        self.buckets = tuple(buckets) if buckets is not None else None
        self.max_length = max_length
        self._to_length: dict[tuple[str, int], Any] = {}  # (kind, bucket) -> a collator padding to it

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, Any]:
        tasks = {feature.get(TASK_KEY) for feature in features}
        if tasks == {None} and len(self.kinds) == 1:
            (kind,) = self.kinds.values()
            return self._pad(kind, features)
        if len(tasks) != 1 or None in tasks:
            raise ValueError(
                f"A batch holds rows of one task (the task sampler draws them so); this one mixes {sorted(map(str, tasks))}."
            )
        task = tasks.pop()
        rows = [{key: value for key, value in feature.items() if key != TASK_KEY} for feature in features]
        batch = self._pad(self.kinds[task], rows)
        batch[TASK_KEY] = task
        return batch

    def _pad(self, kind: str, rows):
        collator = self.token if kind == TOKEN else self.sequence
        if self.buckets is None:
            return collator(rows)
        longest = max(len(row["input_ids"]) for row in rows)
        key = (kind, bucket_for(longest, self.buckets, self.max_length))
        if key not in self._to_length:
            self._to_length[key] = dataclasses.replace(collator, padding="max_length", max_length=key[1])
        return self._to_length[key](rows)
