"""The pieces of a run of tasks (pipeline.TaskRun): each task's data, checked; one model with a head per task (or a
saved token classifier as a one-task model); frozen heads; the decision thresholds of multi-label tasks.

A token-classification run from flags (``--tags_column``) is a run of one token task whose published model is that
head alone: a ``PooledForTokenClassification`` (``model.export_head``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from transformers import AutoConfig

from ..modeling.configuration_multitask import SEQUENCE, TOKEN, PooledMultiTaskConfig
from ..modeling.configuration_pooled import PooledConfig
from ..modeling.modeling_multitask import PooledForMultiTask
from ..modeling.modeling_token import PooledForTokenClassification
from ..modeling.problem_types import MULTI_LABEL
from ..thresholds import positive_weights, tune_thresholds
from .arguments import FROM_TRAINING_DATA, pooled_config_kwargs
from .data import Split, prepare_splits
from .errors import DataError, UsageError
from .label_space import Labels
from .metrics import logits_of, probabilities
from .model_setup import (
    MULTI_LABEL_DEFAULT_LOSS,
    default_label_token_settings,
    leaves_label_token_defaults_unset,
)
from .multitask_data import TaskRows
from .task_specs import TaskSpec
from .token_data import TokenLabels, prepare_token_splits

__all__ = ["TaskData", "prepare_task", "build_task_model", "freeze_heads", "tune_task_thresholds"]

logger = logging.getLogger("pooled_models.train")


@dataclass
class TaskData:
    """One task of the run: its settings, its checked splits and its label space."""

    spec: TaskSpec
    splits: dict[str, Split]
    labels: Labels | TokenLabels
    columns: tuple[str, str] | None = None  # a token task's (words, tags) columns
    max_length: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.spec.kind


# ----------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------


def prepare_task(spec: TaskSpec, roles: list[str], saved, single: bool, cache_dir) -> TaskData:
    saved_labels = _saved_labels(spec, saved, single)
    try:
        if spec.kind == TOKEN:
            splits, labels, columns = prepare_token_splits(
                spec.data, roles, saved_labels, cache_dir=cache_dir
            )
            return TaskData(spec, splits, labels, columns)
        splits, labels = prepare_splits(spec.data, roles, saved_labels, cache_dir=cache_dir)
        return TaskData(spec, splits, labels)
    except DataError as error:
        if single:
            raise
        raise DataError(f"task {spec.name!r}: {error}") from error


def _saved_labels(spec: TaskSpec, saved, single: bool):
    """The label space of the model the run starts from, for this task (None when it starts from a backbone)."""
    if saved is None:
        return None
    if isinstance(saved, PooledConfig):  # a token classifier saved by a token-classification run
        if not single:
            raise UsageError(
                "A multi-task run starts from a backbone or from a multi-task model saved by train.py; this model is a "
                "single-task one. Start from its backbone."
            )
        return TokenLabels.from_config(saved.id2label)
    if spec.name not in saved.tasks or saved.kind(spec.name) != spec.kind:
        raise UsageError(
            f"The multi-task model has no {spec.kind} task {spec.name!r}; its tasks are: "
            f"{', '.join(f'{name} ({saved.kind(name)})' for name in saved.tasks)}."
        )
    config = saved.task_config(spec.name)
    if spec.kind == TOKEN:
        return TokenLabels.from_config(config.id2label)
    return Labels.from_config(config)


# ----------------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------------


def _task_settings(task: TaskData) -> dict[str, Any]:
    """The task's entry in the model config: kind, labels and head settings (multi-label defaults filled in)."""
    labels = task.labels
    settings = {"kind": task.kind, **task.spec.model}
    if labels.num_labels and getattr(labels, "names", None):
        settings["id2label"] = labels.id2label
    else:
        settings["num_labels"] = labels.num_labels
    settings["problem_type"] = labels.problem_type
    if task.kind == SEQUENCE and labels.problem_type == MULTI_LABEL:
        settings.setdefault("multi_label_loss", MULTI_LABEL_DEFAULT_LOSS)
        if settings.get("pos_weight") == FROM_TRAINING_DATA:
            if "train" not in task.splits:
                raise UsageError(
                    f"task {task.spec.name!r}: pos_weight auto is computed from the training split."
                )
            settings["pos_weight"] = positive_weights(task.splits["train"].targets)
    elif settings.get("pos_weight") is not None:
        raise UsageError(
            f"task {task.spec.name!r}: pos_weight weights the positive labels of a multi-label loss; this task is "
            f"{labels.problem_type}."
        )
    return settings


def build_task_model(
    model_args, tasks: dict[str, TaskData], saved, single: bool, tokenizer
) -> PooledForMultiTask:
    """The model of a run of tasks: a saved multi-task model, a saved token classifier, or built on a backbone. The
    run's packed_batches is a setting of the whole model (the backbone is shared), set once it is built."""
    model = _task_model(model_args, tasks, saved, single, tokenizer)
    packed_batches = pooled_config_kwargs(model_args).get("packed_batches")
    if packed_batches is not None:
        _set_packed_batches(model, packed_batches)
    return model


def _task_model(model_args, tasks: dict[str, TaskData], saved, single: bool, tokenizer) -> PooledForMultiTask:
    path = model_args.model_name_or_path
    hub = {"revision": model_args.model_revision, "cache_dir": model_args.cache_dir}
    try:
        if isinstance(saved, PooledMultiTaskConfig):
            changed = [name for name, task in tasks.items() if task.spec.model]
            if changed:
                raise UsageError(
                    f"{path} is a trained multi-task model; the head settings of its tasks cannot change (task "
                    f"{changed[0]!r} sets {', '.join(tasks[changed[0]].spec.model)}). Start from its backbone instead."
                )
            model = PooledForMultiTask.from_pretrained(
                path, use_safetensors=True, trust_remote_code=False, **hub
            )
        elif isinstance(saved, PooledConfig):
            model = _from_token_classifier(
                PooledForTokenClassification.from_pretrained(path, trust_remote_code=False, **hub),
                next(iter(tasks)),
            )
        else:
            backbone_kwargs = {key: value for key, value in hub.items() if value}
            settings = {name: _task_settings(task) for name, task in tasks.items()}
            if any(leaves_label_token_defaults_unset(task) for task in settings.values()):
                # train.py's label-token defaults, as a single-task run gets them (they depend on the backbone)
                backbone_config = AutoConfig.from_pretrained(path, trust_remote_code=False, **backbone_kwargs)
                for task in settings.values():
                    default_label_token_settings(task, backbone_config)
            model = PooledForMultiTask.from_backbone(
                path,
                tasks=settings,
                backbone_kwargs=backbone_kwargs,
                tokenizer=tokenizer,
            )
    except ValueError as error:  # a task setting the config refuses, a pooling the backbone cannot take...
        raise UsageError(str(error)) from error
    except OSError as error:
        raise UsageError(f"Cannot load the model {path!r}: {error}") from error
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def _set_packed_batches(model: PooledForMultiTask, packed: bool) -> None:
    try:
        model.config.packed_batches = packed
        model.config.ensure_valid()
        if packed:
            model.check_packable()
    except ValueError as error:  # position_ids_from_mask=False, a backbone that cannot run packed rows
        raise UsageError(str(error)) from error


def _from_token_classifier(token: PooledForTokenClassification, name: str) -> PooledForMultiTask:
    """A one-task multi-task model holding a saved token classifier's backbone and head, to train or evaluate."""
    config = token.config
    settings = {
        key: getattr(config, key)
        for key in ("classifier_head", "classifier_dropout", "classifier_dropout_samples")
    }
    for key in ("classifier_hidden_size", "classifier_activation"):
        if getattr(config, key, None) is not None:
            settings[key] = getattr(config, key)
    multitask_config = PooledMultiTaskConfig(
        backbone_config=config.backbone_config,
        tasks={name: {"kind": TOKEN, "id2label": dict(config.id2label), **settings}},
        position_ids_from_mask=config.position_ids_from_mask,
        packed_batches=config.packed_batches,
        initializer_range=config.initializer_range,
    )
    model = PooledForMultiTask(multitask_config, backbone=token.backbone)
    model.classifier.heads[name].load_state_dict(token.classifier.state_dict())
    return model


def freeze_heads(model: PooledForMultiTask, specs: list[TaskSpec]) -> None:
    """Freeze the heads of the tasks whose settings say ``freeze_head``."""
    for spec in specs:
        if spec.freeze_head:
            frozen = 0
            for parameter in model.head_parameters(spec.name):
                parameter.requires_grad_(False)
                frozen += parameter.numel()
            logger.info("Head of task %r frozen: %d parameters will not be trained.", spec.name, frozen)


def tune_task_thresholds(trainer, tasks: dict[str, TaskData]) -> None:
    """Each multi-label task's decision threshold, tuned on its validation split for ``threshold_average``-F1 (one
    for every label, or one per label with ``--tune_thresholds per_label``; not with ``none``)."""
    args = trainer.args
    if args.tune_thresholds == "none":
        return
    model = trainer.model
    for name, task in tasks.items():
        config = model.task_configs[name]
        if task.kind != SEQUENCE or config.problem_type != MULTI_LABEL or "validation" not in task.splits:
            continue
        if config.decision_threshold is not None and task.spec.model.get("decision_threshold") is not None:
            continue  # given in the config file
        prediction = trainer.predict_task(name, TaskRows(name, task.splits["validation"].encoded), "eval")
        thresholds = tune_thresholds(
            probabilities(logits_of(prediction.predictions), MULTI_LABEL),
            prediction.label_ids,
            per_label=args.tune_thresholds == "per_label",
            average=args.threshold_average,
        )
        model.update_task(name, decision_threshold=thresholds)
        task.extra["threshold"] = thresholds
        logger.info(
            "Task %r: decision threshold tuned on validation for %s-F1: %s",
            name,
            args.threshold_average,
            thresholds,
        )
