"""Label smoothing (``--label_smoothing_factor``, transformers' own argument) done right for every kind of head.

transformers' Trainer smooths with its ``LabelSmoother``: softmax cross-entropy from the logits, right for a
single-label classifier only. Here the smoothed loss follows the batch's problem type: single-label and token
classification use cross-entropy against ``1 - ε`` on the true class plus ``ε`` spread over all classes; multi-label
runs train their multi-label loss on targets ``y (1 - ε) + ε / 2``; regression has nothing to smooth (a regression run
is refused; a multi-task run's regression tasks keep their loss). Only the training loss is smoothed."""

from __future__ import annotations

import logging

import torch
from torch import nn

from ...errors import UsageError
from ...modeling.configuration_multitask import TOKEN
from ...modeling.losses import classification_loss
from ...modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from ...modeling.targets import IGNORE_INDEX, as_label_tensor
from . import TrainingOption, register_option, require_number

# The batch key naming its task: PooledForMultiTask.forward's argument (data/multitask.TASK_KEY, a layer up).
TASK_KEY = "task"

logger = logging.getLogger("pooled_models.train")

__all__ = ["smoothed_loss", "smoothed_tasks", "check_label_smoothing"]


def _problem(model, inputs) -> tuple[str | None, object]:
    """The batch's problem type (``"token"`` for a token task) and the config its loss reads."""
    task = inputs.get(TASK_KEY)
    task_configs = getattr(model, "task_configs", None)
    if task_configs is not None and task is not None:
        name = model._task_name(task)
        config = task_configs[name]
        return (TOKEN if model.config.kind(name) == TOKEN else config.problem_type), config
    return model.config.problem_type, model.config


def smoothed_loss(model, inputs, logits: torch.Tensor, epsilon: float) -> torch.Tensor | None:
    """The batch's training loss with smoothed targets, or None where there is nothing to smooth (regression)."""
    problem_type, config = _problem(model, inputs)
    labels = as_label_tensor(inputs["labels"]).to(logits.device)
    if problem_type in (SINGLE_LABEL, TOKEN):
        return _smoothed_cross_entropy(logits, labels, epsilon)
    if problem_type == MULTI_LABEL:
        targets = labels.float() * (1 - epsilon) + epsilon / 2
        if (
            getattr(config, "multi_label_loss", None) is None
        ):  # a model of transformers' own (the sweep's vanilla)
            return nn.functional.binary_cross_entropy_with_logits(logits.float(), targets)
        return classification_loss(logits, targets, config, MULTI_LABEL)
    return None


def _smoothed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, epsilon: float) -> torch.Tensor:
    # A mean over the labelled rows (tokens), as the models' own losses take it; a batch with none gives 0, not NaN.
    flat_logits = logits.float().reshape(-1, logits.shape[-1])
    flat_labels = labels.long().reshape(-1)
    summed = nn.functional.cross_entropy(
        flat_logits, flat_labels, ignore_index=IGNORE_INDEX, label_smoothing=epsilon, reduction="sum"
    )
    return summed / (flat_labels != IGNORE_INDEX).sum().clamp(min=1)


def smoothed_tasks(model) -> tuple[list[str], list[str]]:
    """A multi-task model's tasks that label smoothing applies to, and its regression tasks, which it leaves alone."""
    smoothed, left = [], []
    for name, config in model.task_configs.items():
        is_regression = model.config.kind(name) != TOKEN and config.problem_type == REGRESSION
        (left if is_regression else smoothed).append(name)
    return smoothed, left


def check_label_smoothing(model, epsilon: float) -> list[str]:
    """Refuse smoothing where nothing would be smoothed; returns the regression tasks of a multi-task model that
    keep their own loss (to say so)."""
    if not epsilon:
        return []
    if getattr(model, "task_configs", None) is not None:
        smoothed, regression = smoothed_tasks(model)
        if smoothed:
            return regression
        problem = "every task of this run is a regression task"
    elif getattr(model.config, "problem_type", None) == REGRESSION:
        problem = "this run's labels are numbers (regression)"
    else:
        return []
    raise UsageError(
        f"label_smoothing_factor={epsilon} smooths class targets, and {problem}. Leave label_smoothing_factor at 0."
    )


@register_option
class LabelSmoothing(TrainingOption):
    """``--label_smoothing_factor`` (transformers' own argument), applied by the batch's problem type."""

    name = "label_smoothing_factor"
    card_label = "label smoothing"

    def is_on(self, args) -> bool:
        return bool(getattr(args, self.name, 0.0))

    def check_arguments(self, args) -> None:
        require_number(self.name, getattr(args, self.name), lambda value: 0 <= value < 1, "in [0, 1)")

    def check_model(self, model, args) -> None:
        unsmoothed = check_label_smoothing(model, getattr(args, self.name, 0.0))
        if unsmoothed:
            logger.info(
                "Label smoothing applies to the classification tasks; the regression tasks (%s) keep their loss.",
                ", ".join(unsmoothed),
            )

    def training_loss(self, model, inputs, outputs, args):
        if not self.is_on(args) or "labels" not in inputs:
            return None
        return smoothed_loss(model, inputs, outputs.logits, getattr(args, self.name))
