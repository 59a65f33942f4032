"""Training batches cut by tokens rather than rows (``--max_tokens_per_batch``): each batch holds as many texts as
fit in the budget, so every step does about the same work whatever the texts' lengths, and memory is bounded by the
budget rather than by the longest text that happens to be drawn.

The batches are drawn once, as fairseq's ``batch_by_size`` draws them: the rows shuffled with the run's seed,
padded batches sorted by length within groups first (little padding), then cut greedily. Every epoch reshuffles
the batches' order from torch's generator (which Trainer seeds), so every process draws the same order, and an
epoch has the same number of steps each time, as Trainer's step count needs."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import torch

__all__ = ["TokenBudgetBatches", "token_budget_batches", "consecutive_budget_batches"]

# Padded batches are sorted by length within groups of this many rows before they are cut.
SORTED_GROUP_ROWS = 2048


def token_budget_batches(
    lengths: Sequence[int], max_tokens: int, padded: bool, rng: random.Random, grouped: bool | None = None
) -> list[list[int]]:
    """Every row once, in batches of at most ``max_tokens`` tokens (``padded``: rows x the batch's longest; else the
    sum of their lengths). A row longer than the budget makes a batch of its own. ``grouped`` (default: ``padded``):
    rows sorted by length within groups first, so a batch holds rows of similar length (document mode's windows:
    documents of similar window counts, whose cross-window layout then pads little)."""
    rows = list(range(len(lengths)))
    rng.shuffle(rows)
    if padded if grouped is None else grouped:
        rows = [
            row
            for start in range(0, len(rows), SORTED_GROUP_ROWS)
            for row in sorted(rows[start : start + SORTED_GROUP_ROWS], key=lambda index: -lengths[index])
        ]
    return _cut_in_turn(rows, lengths, max_tokens, padded)


def _cut_in_turn(rows: Sequence[int], lengths: Sequence[int], budget: int, padded: bool) -> list[list[int]]:
    """``rows`` cut, in their order, into batches that cost at most ``budget`` (``padded``: rows x the batch's
    longest; else the sum of their lengths; a row costs at least 1); a row past the budget makes a batch alone."""
    batches: list[list[int]] = []
    batch: list[int] = []
    used = longest = 0
    for row in rows:
        length = max(lengths[row], 1)
        cost = (len(batch) + 1) * max(longest, length) if padded else used + length
        if batch and cost > budget:
            batches.append(batch)
            batch, used, longest = [], 0, 0
        batch.append(row)
        used += length
        longest = max(longest, length)
    if batch:
        batches.append(batch)
    return batches


class TokenBudgetBatches:
    """A batch sampler (``DataLoader(batch_sampler=...)``) of :func:`token_budget_batches`, reshuffled each epoch."""

    def __init__(
        self, lengths: Sequence[int], max_tokens: int, padded: bool, seed: int, grouped: bool | None = None
    ):
        self.batches = token_budget_batches(lengths, max_tokens, padded, random.Random(seed), grouped)

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.randperm(len(self.batches)).tolist()
        for index in order:
            yield self.batches[index]


def consecutive_budget_batches(order: Sequence[int], sizes: Sequence[int], budget: int) -> list[list[int]]:
    """``order`` cut into consecutive batches whose ``sizes`` sum to at most ``budget`` (a row past it alone):
    document mode's evaluation batches, documents sorted by their windows, each batch up to a number of windows.
    Consecutive, so the batches read in turn give the rows in ``order``."""
    if budget < 1:
        raise ValueError(f"budget must be at least 1, got {budget}.")
    return _cut_in_turn(order, sizes, budget, padded=False)
