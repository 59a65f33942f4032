"""The data of a run, task by task: a task spec (what the command line or a config file's ``tasks`` says) ->
its splits read and checked, and its label space (sequence.py for sequence tasks, token.py for token tasks; batching.py
makes batches of them)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ...errors import DataError, UsageError
from ...modeling.configuration_multitask import TOKEN
from ...modeling.configuration_pooled import PooledConfig
from .sequence import Labels, Split, prepare_splits
from .token import TokenLabels, prepare_token_splits

__all__ = ["TaskSpec", "TaskData", "prepare_task"]


@dataclass
class TaskSpec:
    name: str
    kind: str
    data: Any  # the task's data settings (cli.DataArguments), as a single run's
    model: dict[str, Any] = field(default_factory=dict)  # PooledConfig settings of its head
    loss_weight: float = 1.0
    head_learning_rate: float | None = None
    start_epoch: int = 0
    freeze_head: bool = False


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
