"""Task sampling for multi-task training: which task each batch of an epoch comes from, and which of its rows.

Every batch holds rows of one task (its head and its loss), drawn by one of three strategies over the tasks that
are active in that epoch:

* ``proportional``: each task gets batches in proportion to its size; with every task active, an epoch is exactly one
  pass over every task's rows.
* ``temperature``: task t gets batches in proportion to size_t ** alpha (``sampling_alpha``): 1 is proportional, 0
  is uniform, values between lift small tasks without drowning the large ones (0.5 is a common choice).
* ``round_robin``: the tasks take turns, batch by batch: every task gets the same number of batches.

An epoch always has the same number of batches (the batches one pass over every task takes), so Trainer's schedule,
its step counts and resuming hold. A curriculum (``start_epoch`` per task) keeps a task out of the epochs before its
start: the tasks that start first fill those epochs, and see their rows more often.

A task whose share is larger than its rows repeats them (a fresh order each time); one whose share is smaller sees a
different part of its rows each epoch. Given the rows' token counts (``lengths``), each pass groups rows of similar
length into batches as single-task training does (``batching.length_grouped_batches``), so a batch carries little
padding; without them, batches are random. The plan of an epoch depends only on the seed and the epoch, so a resumed run
draws the batches an uninterrupted one would. Under ``accelerate launch`` with N processes, batches come in groups of
N of the same task: Accelerate hands the i-th batch of each group to process i, so every process trains the same
task's head in a step.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence

from .batching import length_grouped_batches

__all__ = ["SAMPLING_STRATEGIES", "TaskBatchSampler", "task_shares", "describe_counts"]

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
