"""train.py's defaults for a training set with few examples per label (at most ``FEW_EXAMPLES_PER_LABEL`` rows per
label: the few-shot settings of bench/labels.py, which measured each; docs/label-text.md, "Defaults"): enough epochs
for the head to leave its random start, a higher learning rate, and label text in the input for single-label runs; and, for any multi-label run
that nothing tunes, a decision threshold that suits the asymmetric loss."""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import TYPE_CHECKING

from huggingface_hub.errors import StrictDataclassError

from ..modeling.configuration_pooled import PooledConfig
from ..modeling.problem_types import SINGLE_LABEL
from .arguments.defaults import ASYMMETRIC_UNTUNED_THRESHOLD, FEW_EXAMPLES_PER_LABEL, FEW_EXAMPLES_POOLING
from .arguments.training import (
    FEW_EXAMPLES_LEARNING_RATE,
    MAX_DEFAULT_EPOCHS,
    MIN_TRAIN_STEPS,
    NUM_TRAIN_EPOCHS,
)

if TYPE_CHECKING:  # annotations only
    from .data import TaskData
    from .evaluation import ThresholdPlan

__all__ = [
    "default_epochs",
    "default_learning_rate",
    "default_untuned_threshold",
    "default_pooling",
]

logger = logging.getLogger("pooled_models.train")


def rows_per_label(task: TaskData) -> float | None:
    """The task's training rows per label (rows / labels; None without training data)."""
    if "train" not in task.splits:
        return None
    return len(task.splits["train"].dataset) / max(getattr(task.labels, "num_labels", 1), 1)


def has_few_examples(task: TaskData) -> bool:
    per_label = rows_per_label(task)
    return per_label is not None and per_label <= FEW_EXAMPLES_PER_LABEL


def default_epochs(training_args, tasks: dict[str, TaskData]) -> float | None:
    """The number of epochs of a run that chose none and has few examples per label in every task: enough passes
    for ``MIN_TRAIN_STEPS`` optimisation steps (at most ``MAX_DEFAULT_EPOCHS``); None when the default stands."""
    chosen = getattr(training_args, "epochs_chosen", True) or training_args.max_steps > 0
    if chosen or not training_args.do_train or not all(has_few_examples(task) for task in tasks.values()):
        return None
    rows = sum(len(task.splits["train"].dataset) for task in tasks.values())
    batch = (
        training_args.per_device_train_batch_size
        * max(training_args.world_size, 1)
        * training_args.gradient_accumulation_steps
    )
    steps_per_epoch = max(math.ceil(rows / batch), 1)
    epochs = min(max(NUM_TRAIN_EPOCHS, math.ceil(MIN_TRAIN_STEPS / steps_per_epoch)), MAX_DEFAULT_EPOCHS)
    if epochs == NUM_TRAIN_EPOCHS:
        return None
    logger.info(
        "%d epochs (train.py's default for at most %d training rows per label: at least %d optimisation steps; "
        "--num_train_epochs sets another).",
        epochs,
        FEW_EXAMPLES_PER_LABEL,
        MIN_TRAIN_STEPS,
    )
    return float(epochs)


def default_learning_rate(training_args, tasks: dict[str, TaskData]) -> float | None:
    """The backbone's learning rate of a run that chose none and has few examples per label in every task:
    ``FEW_EXAMPLES_LEARNING_RATE``; None when the default stands."""
    if getattr(training_args, "learning_rate_chosen", True) or not training_args.do_train:
        return None
    if not all(has_few_examples(task) for task in tasks.values()):
        return None
    logger.info(
        "Learning rate %g (train.py's default for at most %d training rows per label; --learning_rate sets another).",
        FEW_EXAMPLES_LEARNING_RATE,
        FEW_EXAMPLES_PER_LABEL,
    )
    return FEW_EXAMPLES_LEARNING_RATE


def default_untuned_threshold(settings: dict, thresholds: ThresholdPlan) -> ThresholdPlan:
    """A new asymmetric-loss head whose threshold is neither set nor tuned gets ``ASYMMETRIC_UNTUNED_THRESHOLD``."""
    if settings.get("multi_label_loss") != "asymmetric":
        return thresholds
    settings["decision_threshold"] = ASYMMETRIC_UNTUNED_THRESHOLD
    logger.info(
        "Decision threshold: %g (train.py's default for the asymmetric loss when nothing tunes it; "
        "--decision_threshold sets another, validation data lets --tune_thresholds choose it).",
        ASYMMETRIC_UNTUNED_THRESHOLD,
    )
    return dataclasses.replace(thresholds, origin="asymmetric default")


def default_pooling(settings: dict, task: TaskData, backbone_config) -> None:
    """A new single-label head that names no pooling, trained on few examples per label of labels named in words,
    reads its labels as text (``FEW_EXAMPLES_POOLING``), unless the user's other settings rule label text out; any
    other keeps mean pooling."""
    if settings.get("pooling") is not None:
        return
    labels = task.labels
    named = bool(labels.names) and any(any(char.isalpha() for char in str(name)) for name in labels.names)
    if labels.problem_type != SINGLE_LABEL or not named or not has_few_examples(task):
        return
    chosen = {key: value for key, value in FEW_EXAMPLES_POOLING.items() if settings.get(key) is None}
    refusal = _label_text_refusal({**settings, **chosen}, labels.num_labels, backbone_config)
    if refusal:
        logger.info(
            "Pooling: mean (label text, the default for few examples per label, cannot: %s).", refusal
        )
        return
    settings.update(chosen)
    logger.info(
        "Pooling: %s with the %s scorer (train.py's default for a single-label run with at most %d training rows per "
        "label; --pooling mean for mean pooling).",
        FEW_EXAMPLES_POOLING["pooling"],
        FEW_EXAMPLES_POOLING["label_text_scorer"],
        FEW_EXAMPLES_PER_LABEL,
    )


def _label_text_refusal(settings: dict, num_labels: int, backbone_config) -> str | None:
    """Why a config with these settings cannot be built (a setting the user chose that label text cannot take)."""
    try:
        PooledConfig(backbone_config=backbone_config, num_labels=num_labels, **settings)
    except (ValueError, TypeError, StrictDataclassError) as error:
        return str(error).split("\n")[0]
    return None
