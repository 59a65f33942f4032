"""The NaN guard of train.py's training loss, without a host synchronisation per step.

transformers' Trainer checks every step's loss on the host (``logging_nan_inf_filter``: two synchronisations a step,
which a GPU step then waits for) and, finding it not finite, silently logs the average of the others instead.
train.py turns that filter off (arguments/training.py) and checks the loss where the host reads it anyway: the
logged loss (every ``logging_steps``) and the final ``train_loss``. Each step's loss stays on the device, kept with a
reference to its batch's token ids; only when a logged loss is not finite are they read back, to name the first step
whose loss was not finite and the training rows of its batch. The run then stops with a ``NonFiniteLossError``, and
train.py publishes nothing (the staging folder is abandoned as for any failed run).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..errors import UsageError

__all__ = ["NonFiniteLossError", "LossGuard", "rows_of_batch", "non_finite_message", "KEPT_BATCHES"]

# The batches (their token ids, by reference) kept to name the rows of a step whose loss was not finite: the last
# this many training steps' (a run that logs every logging_steps <= this finds its batch; one that logs less often
# names the step and says its rows are no longer kept).
KEPT_BATCHES = 64
# Steps' losses are stacked into one tensor every this many steps (one small kernel, no synchronisation), so that a
# long run between two logs keeps a few tensors rather than one per step.
STACKED_STEPS = 256


class NonFiniteLossError(UsageError):
    """A training loss that is not finite (nan or inf): the step and the rows of its batch are named (printed as
    one line, as every error the user can act on)."""


class LossGuard:
    """Each training step's loss kept on the device with its batch, until the host reads the loss at logging."""

    def __init__(self, kept_batches: int = KEPT_BATCHES):
        self.steps: list[int] = []  # the optimisation step of each loss kept (micro-batches share their step)
        self.stacked: list[torch.Tensor] = []
        self.pending: list[torch.Tensor] = []
        self.batches: deque = deque(
            maxlen=kept_batches
        )  # (index among the losses kept, input_ids, attention_mask)

    def record(self, step: int, loss: torch.Tensor, inputs: Mapping[str, Any]) -> None:
        """Keep ``loss`` (a device tensor, not read) of optimisation step ``step`` and a reference to its batch."""
        index = len(self.steps)
        self.steps.append(step)
        self.pending.append(loss.detach().float().reshape(()))
        if len(self.pending) == STACKED_STEPS:
            self.stacked.append(torch.stack(self.pending))
            self.pending = []
        # padded batches: the mask says which tokens are real; padding-free ones: the texts' boundaries do
        layout = inputs.get("cu_seq_lens_q", inputs.get("attention_mask"))
        self.batches.append((index, inputs.get("input_ids"), layout))

    def clear(self) -> None:
        """The losses kept so far were logged finite: forget them."""
        self.steps, self.stacked, self.pending = [], [], []
        self.batches.clear()

    def first_non_finite(self) -> tuple[int, float, list[list[int]] | None] | None:
        """``(step, its loss, its batch's texts as token ids without padding, or None where no longer kept)`` of the
        first step whose loss was not finite; None if every loss kept is finite. Reads the losses back (call it
        where a logged loss was not finite)."""
        parts = self.stacked + ([torch.stack(self.pending)] if self.pending else [])
        if not parts:
            return None
        losses = torch.cat(parts).cpu()
        bad = (~torch.isfinite(losses)).nonzero()
        if not len(bad):
            return None
        index = int(bad[0])
        batch = next(((ids, mask) for kept, ids, mask in self.batches if kept == index), None)
        texts = None if batch is None or batch[0] is None else _texts(*batch)
        return self.steps[index], float(losses[index]), texts


def _texts(input_ids: torch.Tensor, layout: torch.Tensor | None) -> list[list[int]]:
    """Each text's token ids: a padded batch's rows without padding (``layout``: the attention mask), or a
    padding-free row cut at its boundaries (``layout``: ``cu_seq_lens_q``)."""
    ids = input_ids.cpu()
    if layout is None:
        return ids.tolist()
    if layout.dim() == 1:
        flat, bounds = ids.reshape(-1).tolist(), layout.tolist()
        return [flat[start:end] for start, end in zip(bounds, bounds[1:], strict=False)]
    mask = layout.cpu().bool()
    return [row[keep].tolist() for row, keep in zip(ids, mask, strict=True)]


def rows_of_batch(texts: Sequence[Sequence[int]], dataset) -> list[int] | None:
    """The indices of the training rows (0-based, in the training data's order) whose token ids are ``texts``: each
    text's first row not taken yet (a text that occurs twice names both rows in turn). None where the training rows
    are not one dataset (several tasks)."""
    if not hasattr(dataset, "with_format"):
        return None
    wanted: dict[tuple[int, ...], int] = {}
    for text in texts:
        wanted[tuple(text)] = wanted.get(tuple(text), 0) + 1
    found: list[int] = []
    for index, ids in enumerate(dataset.with_format(None)["input_ids"]):
        key = tuple(ids)
        if wanted.get(key):
            wanted[key] -= 1
            found.append(index)
    return sorted(found)


def non_finite_message(found: tuple | None, rows: list[int] | None, logged: float) -> str:
    """What the run says when it stops (``found``: LossGuard.first_non_finite's answer; ``rows``: its batch's)."""
    if found is None:
        return (
            f"The training loss is not finite: {logged} logged, though every step's loss since the last log was "
            "finite (their sum overflowed). The run stops and publishes nothing; lower --learning_rate."
        )
    step, loss, texts = found
    value = "nan" if math.isnan(loss) else ("inf" if loss > 0 else "-inf")
    if rows:
        where = (
            f"the batch of training rows {', '.join(map(str, rows))} (0-based, in the training data's order)"
        )
    elif texts is None:
        where = f"a batch no longer kept (the last {KEPT_BATCHES} steps' are)"
    else:
        where = f"a batch of {len(texts)} texts of one of the tasks"
    return (
        f"The training loss is not finite: {value} at step {step}, on {where}; the logged loss was {logged}. "
        "The run stops and publishes nothing. Look at those rows, lower --learning_rate, or train in bf16 rather "
        "than fp16 (fp16 overflows past 65,504)."
    )
