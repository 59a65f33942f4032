"""The tasks of a run: a run given by flags is one task (a token task with ``--tags_column``, else a sequence task);
a config file's ``tasks`` mapping names several, each with its kind, its own data settings, its head's settings and
its training settings. A :class:`TaskSpec` is checked once, here, and read-only afterwards."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..modeling.configuration_multitask import SEQUENCE, TASK_KINDS, TOKEN
from .arguments.dependencies import SEQUENCE_DATA
from .arguments.model import parse_pos_weight, pooled_config_fields
from .options import refuse_removed_options

if TYPE_CHECKING:  # an annotation only
    from .arguments import DataArguments

__all__ = [
    "TaskSpec",
    "task_specs",
    "SINGLE_TOKEN_TASK",
    "SINGLE_SEQUENCE_TASK",
    "MODEL_WIDE_SETTINGS",
    "TRAINING_SETTINGS",
]


@dataclass(frozen=True)
class TaskSpec:
    """One task: its name, kind (sequence or token), data settings (a DataArguments, as a single run's), the settings
    of its head (PooledConfig settings the user chose) and its training settings."""

    name: str
    kind: str
    data: DataArguments | None
    model: dict[str, Any] = field(default_factory=dict)
    loss_weight: float = 1.0
    head_learning_rate: float | None = None
    start_epoch: int = 0
    freeze_head: bool = False


# A task's training settings and their defaults.
TRAINING_SETTINGS = {"loss_weight": 1.0, "head_learning_rate": None, "start_epoch": 0, "freeze_head": False}


# The data settings of a sequence task (a token task refuses them), and those of a token task.
SEQUENCE_ONLY = (*SEQUENCE_DATA, "label_description_column")


TOKEN_ONLY = ("words_column", "tags_column", "label_all_subtokens")


# The data settings a task has of its own; every other data setting is the run's (max_seq_length...).
TASK_DATA_SETTINGS = (
    "dataset_name",
    "dataset_config_name",
    "train_split_name",
    "validation_split_name",
    "test_split_name",
    "train_file",
    "validation_file",
    "test_file",
    *SEQUENCE_ONLY,
    *TOKEN_ONLY,
    "skip_unseen_labels",
    "max_train_samples",
    "max_eval_samples",
    "max_predict_samples",
)


HEAD_SETTINGS = (
    "classifier_head",
    "classifier_dropout",
    "classifier_hidden_size",
    "classifier_activation",
)


# The name of the task of a token-classification run from flags, and of a sequence-classification run from flags.
SINGLE_TOKEN_TASK = "tokens"


SINGLE_SEQUENCE_TASK = "sequence"


# Settings of the whole model (the backbone is shared), not of a task: the plan gives them to the model it builds.
MODEL_WIDE_SETTINGS = ("packed_batches",)


def _model_setting_names() -> list[str]:
    return [item.name for item in pooled_config_fields()]


def _run_model_settings(chosen: dict[str, Any], kind: str) -> dict[str, Any]:
    """The run's model flags a task takes as defaults: all of them for a sequence task, the head's for a token task."""
    if kind == SEQUENCE:
        return dict(chosen)
    return {name: value for name, value in chosen.items() if name in HEAD_SETTINGS}


def task_specs(data_args, chosen_model_settings: dict[str, Any]) -> list[TaskSpec]:
    """The run's tasks: from ``data_args.tasks``; else the one task a run from flags is, a token task
    (``--tags_column``) or a sequence task."""
    chosen_model_settings = {
        name: value for name, value in chosen_model_settings.items() if name not in MODEL_WIDE_SETTINGS
    }
    if data_args.tasks is None:
        data = dataclasses.replace(data_args, tasks=None)
        if data_args.tags_column is None:
            return [TaskSpec(SINGLE_SEQUENCE_TASK, SEQUENCE, data, dict(chosen_model_settings))]
        _refuse_sequence_settings(chosen_model_settings)
        return [TaskSpec(SINGLE_TOKEN_TASK, TOKEN, data, _run_model_settings(chosen_model_settings, TOKEN))]
    tasks = data_args.tasks
    if not isinstance(tasks, dict) or not tasks:
        raise UsageError(
            f"tasks must map task names to their settings (kind, data files, columns...), got {tasks!r}."
        )
    given = [
        name
        for name in ("train_file", "validation_file", "test_file", "dataset_name")
        if getattr(data_args, name)
    ]
    if given:
        raise UsageError(
            f"A multi-task run reads each task's data from its own settings; {given[0]} is set for the whole run. "
            "Put it under the task it belongs to."
        )
    return [_task_spec(name, settings, data_args, chosen_model_settings) for name, settings in tasks.items()]


def _refuse_sequence_settings(chosen_model_settings: dict[str, Any]) -> None:
    """A token-classification run from flags reads only its head's settings: any other it would drop, so it refuses
    it (a multi-task run's model flags are defaults for its sequence tasks, which read them)."""
    dropped = sorted(set(chosen_model_settings) - set(HEAD_SETTINGS))
    if dropped:
        raise UsageError(
            f"{dropped[0]} does not apply to a token-classification run (--tags_column): its head reads "
            f"{', '.join(HEAD_SETTINGS)} only. Leave {dropped[0]} out."
        )


def _task_spec(name: Any, settings: Any, data_args, chosen_model_settings: dict[str, Any]) -> TaskSpec:
    where = f"tasks[{name!r}]"
    if not isinstance(settings, dict):
        raise UsageError(f"{where} must be a mapping of settings, got {type(settings).__name__}.")
    settings = dict(settings)
    refuse_removed_options(settings, where)
    kind = settings.pop("kind", None)
    if kind not in TASK_KINDS:
        raise UsageError(f"{where} needs a kind: one of {', '.join(map(repr, TASK_KINDS))}; got {kind!r}.")
    not_for_kind = TOKEN_ONLY if kind == SEQUENCE else SEQUENCE_ONLY
    model_names = _model_setting_names() if kind == SEQUENCE else list(HEAD_SETTINGS)
    known = set(TASK_DATA_SETTINGS) - set(not_for_kind) | set(model_names) | set(TRAINING_SETTINGS)
    for key in settings:
        if key not in known:
            if key in not_for_kind or key in _model_setting_names():
                raise UsageError(f"{where}: {key!r} does not apply to a {kind} task.")
            matches = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {matches[0]}?)" if matches else ""
            raise UsageError(
                f"{where}: unknown setting {key!r}{hint}. A {kind} task's settings are: kind, {', '.join(sorted(known))}."
            )
    data_settings = {key: settings[key] for key in TASK_DATA_SETTINGS if key in settings}
    if kind == TOKEN:
        data_settings.setdefault("tags_column", "tags")
    try:
        data = dataclasses.replace(data_args, tasks=None, example_texts=None, **data_settings)
    except UsageError as error:
        raise UsageError(f"{where}: {error}") from error
    if not any(data.files().values()) and not data.dataset_name:
        raise UsageError(f"{where} has no data: give its train_file (and validation_file, test_file).")
    model = {
        **_run_model_settings(chosen_model_settings, kind),
        **{key: settings[key] for key in model_names if key in settings},
    }
    if "pos_weight" in model:
        model["pos_weight"] = parse_pos_weight(model["pos_weight"])
    training = {key: settings.get(key, default) for key, default in TRAINING_SETTINGS.items()}
    _check_training_settings(where, training)
    return TaskSpec(str(name), kind, data, model, **training)


def _number(value: Any) -> Any:
    # YAML reads 1e-3 (no dot) as text; argparse converts the run's own flags, a task's settings are converted here.
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _check_training_settings(where: str, training: dict[str, Any]) -> None:
    training["loss_weight"] = _number(training["loss_weight"])
    training["head_learning_rate"] = _number(training["head_learning_rate"])
    weight = training["loss_weight"]
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
        raise UsageError(f"{where}: loss_weight must be a number >= 0, got {weight!r}.")
    rate = training["head_learning_rate"]
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate < 0):
        raise UsageError(f"{where}: head_learning_rate must be a number >= 0, got {rate!r}.")
    start = training["start_epoch"]
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise UsageError(
            f"{where}: start_epoch must be an integer >= 0 (the first epoch is 0), got {start!r}."
        )
    if not isinstance(training["freeze_head"], bool):
        raise UsageError(f"{where}: freeze_head must be true or false, got {training['freeze_head']!r}.")
