"""LP-FT: a linear probe first, then fine-tuning (``--linear_probe_epochs``; Kumar et al., 2022).

For the first ``linear_probe_epochs`` epochs (a fraction is allowed) only the pooler and head train, on the
pretrained features as they are; then everything trains. A random head fine-tuned together with the backbone from
the first step sends large, noisy gradients into the backbone and distorts the features it was pretrained to give;
a head that has already learned to read them asks the backbone for small corrections only.

How it is done:

* the optimizer holds every parameter from the start, each param group marked with the part it trains (``PART``:
  the head, or the backbone, meaning every trained parameter that is not the pooler's or a head's);
* during the probe the backbone's parameters do not require gradients (``LinearProbe``): the backward pass stops at
  the pooler, which makes probe steps much cheaper, and AdamW skips parameters without a gradient, so neither an
  update nor weight decay touches them and their optimizer state starts when they join;
* the learning-rate schedule (``probe_schedule``): the head follows the run's schedule over every step; the backbone's
  rate is 0 during the probe, then follows the same kind of schedule (with its warm-up share) over the steps that are
  left, so the backbone warms up when it starts training rather than joining at the peak rate.

The probe is part of ``num_train_epochs``, not added to it: the run's budget stays what it says.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import torch
from torch.optim.lr_scheduler import LambdaLR
from transformers import TrainerCallback, get_scheduler

from .errors import UsageError

__all__ = ["PART", "HEAD", "BACKBONE", "probe_steps", "probe_schedule", "LinearProbe"]

logger = logging.getLogger(__name__)

PART = "part"  # the key of a param group naming the part it trains
HEAD = "head"
BACKBONE = "backbone"


def probe_steps(linear_probe_epochs: float, steps_per_epoch: int, max_steps: int) -> int:
    """The number of optimizer steps the probe takes (a started step counts, as Trainer counts a fractional epoch)."""
    steps = math.ceil(linear_probe_epochs * steps_per_epoch)
    if steps >= max_steps:
        raise UsageError(
            f"linear_probe_epochs={linear_probe_epochs} takes {steps} of the run's {max_steps} training steps, "
            "leaving none to fine-tune the backbone: make it smaller than the training's length."
        )
    return steps


def _schedule_of(args, steps: int) -> Callable[[int], float]:
    """The factor the run's scheduler (``lr_scheduler_type``, with its warm-up) gives a learning rate at each of
    ``steps`` steps; read from a scheduler built on a stand-in optimizer, so the real one is not touched."""
    stand_in = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    scheduler = get_scheduler(
        args.lr_scheduler_type,
        optimizer=stand_in,
        num_warmup_steps=args.get_warmup_steps(steps),
        num_training_steps=steps,
        scheduler_specific_kwargs=args.lr_scheduler_kwargs,
    )
    if not isinstance(scheduler, LambdaLR):
        name = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
        raise UsageError(
            f"linear_probe_epochs needs a learning-rate schedule that is a function of the step (linear, cosine, "
            f"polynomial, constant...); lr_scheduler_type {name} is not."
        )
    return scheduler.lr_lambdas[0]


def probe_schedule(args, optimizer, num_training_steps: int, probe: int) -> LambdaLR:
    """The run's schedule for the head's param groups; for the backbone's, 0 during the first ``probe`` steps, then
    the same kind of schedule over the steps that are left."""
    whole_run = _schedule_of(args, num_training_steps)
    after_probe = _schedule_of(args, num_training_steps - probe)

    def backbone(step: int) -> float:
        return 0.0 if step < probe else after_probe(step - probe)

    lambdas = [backbone if group.get(PART) == BACKBONE else whole_run for group in optimizer.param_groups]
    return LambdaLR(optimizer, lambdas)


class LinearProbe(TrainerCallback):
    """Keeps the backbone out of training for the first ``trainer.linear_probe_steps`` optimizer steps: its parameters
    require no gradient then, and do again from the step after (also when a run resumes in or after the probe)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.probing: bool | None = None

    def _backbone_parameters(self) -> list[torch.nn.Parameter]:
        groups = self.trainer.optimizer.param_groups
        return [parameter for group in groups if group.get(PART) == BACKBONE for parameter in group["params"]]

    def _set(self, probing: bool) -> None:
        if probing == self.probing:
            return
        for parameter in self._backbone_parameters():
            parameter.requires_grad_(not probing)
        if self.probing is not None or probing:
            logger.info(
                "Linear probe: %s.",
                f"only the pooler and head train for the first {self.trainer.linear_probe_steps} steps"
                if probing
                else "the backbone trains from now on",
            )
        self.probing = probing

    def on_train_begin(self, args, state, control, **kwargs):
        self._set(state.global_step < self.trainer.linear_probe_steps)

    def on_step_begin(self, args, state, control, **kwargs):
        self._set(state.global_step < self.trainer.linear_probe_steps)

    def on_train_end(self, args, state, control, **kwargs):
        self._set(False)  # a run that ends within the probe leaves no parameter switched off
