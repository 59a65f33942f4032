"""Settings that take effect only together with another one: none is dropped without a word.

Before transformers' ``TrainingArguments`` are built, the settings the user gave (a config file's keys, the flags on
the command line) are found, and a file named for evaluation or prediction turns that phase on: a
``--validation_file`` means "evaluate on it", a ``--test_file`` "predict it" (``IMPLIED_PHASES``). Both only read; a
training file never starts training unasked. Once the arguments are parsed, every other setting the user gave whose
partner is missing is refused by name, with what it needs (``DEPENDENCIES``): ``--max_eval_samples`` without
evaluation, a Hub split name without ``--dataset_name``, ``--words_column`` outside a token-classification run,
``--learning_rate`` in a run that does not train...

Settings of the model's parts (a pooling's, a head's, a loss's) are PooledConfig's to refuse (it names the part
that reads them); those that depend on the data (``tune_thresholds`` on single-label data, ``pos_weight auto``
without training) are the plan's; the label descriptions' (``label_description_column`` without training or in a
token task) are data/descriptions.py's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import UsageError

__all__ = [
    "Needs",
    "SEQUENCE_DATA",
    "DEPENDENCIES",
    "TASK_DEPENDENCIES",
    "IMPLIED_PHASES",
    "given_on_command_line",
    "implied_phases",
    "check_dependencies",
    "implied_phase_lines",
]


@dataclass(frozen=True)
class Needs:
    """What a setting needs to take effect: ``what`` as a message says it, ``holds(model, data, training)``."""

    what: str
    holds: Callable[[Any, Any, Any], bool]


TRAINING = Needs("--do_train", lambda model, data, training: bool(training.do_train))
EVALUATION = Needs("--do_eval", lambda model, data, training: bool(training.do_eval))
PREDICTION = Needs("--do_predict", lambda model, data, training: bool(training.do_predict))
EVALUATION_OR_PREDICTION = Needs(
    "--do_eval or --do_predict", lambda model, data, training: bool(training.do_eval or training.do_predict)
)
HUB_DATASET = Needs("--dataset_name (a Hub dataset)", lambda model, data, training: bool(data.dataset_name))
TOKEN_RUN = Needs(
    "--tags_column (a token-classification run)", lambda model, data, training: data.tags_column is not None
)
SEQUENCE_RUN = Needs(
    "a sequence-classification run (it does not apply with --tags_column)",
    lambda model, data, training: data.tags_column is None,
)
SINGLE_SEQUENCE_RUN = Needs(
    "a run of one sequence-classification task (not --tags_column, not a config file's tasks)",
    lambda model, data, training: data.tags_column is None and data.tasks is None,
)
ZERO_SHOT_RUN = Needs("--zero_shot_file", lambda model, data, training: bool(data.zero_shot_file))
MULTI_TASK_RUN = Needs(
    "a multi-task run (a config file's tasks)", lambda model, data, training: data.tasks is not None
)
TEMPERATURE_SAMPLING = Needs(
    "--task_sampling temperature", lambda model, data, training: training.task_sampling == "temperature"
)
THRESHOLD_TUNING = Needs(
    "--tune_thresholds auto, global or per_label",
    lambda model, data, training: training.tune_thresholds != "none",
)
EVALUATING_BY_STEPS = Needs(
    "--eval_strategy steps", lambda model, data, training: _strategy(training.eval_strategy) == "steps"
)
SAVING_BY_STEPS = Needs(
    "--save_strategy steps", lambda model, data, training: _strategy(training.save_strategy) == "steps"
)
PUSHING = Needs("--push_to_hub", lambda model, data, training: bool(training.push_to_hub))
KEEPING_THE_BEST = Needs(
    "--load_best_model_at_end (or --early_stopping_patience) or --save_strategy best",
    lambda model, data, training: (
        bool(training.load_best_model_at_end) or _strategy(training.save_strategy) == "best"
    ),
)


def _strategy(value: Any) -> str:
    return str(getattr(value, "value", value))


# What a run does only when it trains: the optimisation, the training data's own settings, checkpoints.
TRAINING_ONLY = (
    "train_file",
    "max_train_samples",
    "learning_rate",
    "head_learning_rate",
    "label_embedding_learning_rate",
    "label_embedding_weight_decay",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "warmup_steps",
    "weight_decay",
    "lr_scheduler_type",
    "optim",
    "max_grad_norm",
    "train_sampling_strategy",
    "freeze_backbone",
    "layerwise_lr_decay",
    "label_smoothing_factor",
    "early_stopping_patience",
    "resume_from_checkpoint",
    "keep_checkpoints",
    "save_strategy",
    "save_total_limit",
    "eval_strategy",
    "logging_steps",
    "gradient_checkpointing",
    "max_tokens_per_batch",
    "pad_to_buckets",  # the buckets are chosen from the training texts' lengths
    "length_buckets",
    "logging_nan_inf_filter",
    "max_windows_per_document",
    "window_keeping",
    "max_windows_per_batch",
    "document_gate_learning_rate",
)

# What only the final evaluation or prediction reads.
EVALUATION_OR_PREDICTION_ONLY = (
    "skip_unseen_labels",
    "per_device_eval_batch_size",
    "eval_accumulation_steps",
    "length_sorted_eval",
    "eval_max_windows",
)

# The data settings of a sequence task, which a token-classification run does not read (label_description_column,
# one too, is refused by data/descriptions.py with the reason).
SEQUENCE_DATA = (
    "text_column",
    "text_pair_column",
    "label_column",
    "problem_type",
    "label_separator",
    "keep_columns",
)


# setting -> what it needs, each of which must hold. Tests check that every name is one of train.py's settings.
DEPENDENCIES: dict[str, tuple[Needs, ...]] = {
    **{name: (TRAINING,) for name in TRAINING_ONLY},
    **{name: (EVALUATION_OR_PREDICTION,) for name in EVALUATION_OR_PREDICTION_ONLY},
    **{name: (SEQUENCE_RUN,) for name in SEQUENCE_DATA},
    "max_eval_samples": (EVALUATION,),
    "max_predict_samples": (PREDICTION,),
    "keep_columns": (PREDICTION,),
    "dataset_config_name": (HUB_DATASET,),
    "train_split_name": (HUB_DATASET, TRAINING),
    "validation_split_name": (HUB_DATASET,),  # given, it turns evaluation on (IMPLIED_PHASES)
    "test_split_name": (HUB_DATASET,),
    "words_column": (TOKEN_RUN,),
    "label_all_subtokens": (TOKEN_RUN,),
    "zero_shot_file": (SINGLE_SEQUENCE_RUN,),
    "seen_label_margin": (ZERO_SHOT_RUN, TRAINING),  # set on the model this run trains
    "document_mode": (SINGLE_SEQUENCE_RUN,),
    "threshold_average": (EVALUATION, THRESHOLD_TUNING),
    "task_sampling": (MULTI_TASK_RUN, TRAINING),
    "sampling_alpha": (MULTI_TASK_RUN, TRAINING, TEMPERATURE_SAMPLING),
    "eval_steps": (EVALUATING_BY_STEPS,),
    "save_steps": (SAVING_BY_STEPS,),
    "hub_model_id": (PUSHING,),
    "hub_strategy": (PUSHING,),
    "hub_private_repo": (PUSHING,),
    "metric_for_best_model": (KEEPING_THE_BEST,),
    "greater_is_better": (KEEPING_THE_BEST,),
}


# A task's own settings (a config file's tasks) that need a phase of the run. The settings that depend on the task's
# kind are checked with the task (tasks.py); its validation and test files and split names turn their phase on.
TASK_DEPENDENCIES: dict[str, tuple[Needs, ...]] = {
    "train_file": (TRAINING,),
    "max_train_samples": (TRAINING,),
    "max_eval_samples": (EVALUATION,),
    "max_predict_samples": (PREDICTION,),
    "keep_columns": (PREDICTION,),
    "skip_unseen_labels": (EVALUATION_OR_PREDICTION,),
    "train_split_name": (TRAINING,),
}


# A data source named for a phase that only reads turns the phase on. What the user means by it; its absence would
# otherwise drop the file without a word.
IMPLIED_PHASES = {
    "validation_file": "do_eval",
    "validation_split_name": "do_eval",
    "test_file": "do_predict",
    "test_split_name": "do_predict",
}


_UNSET = object()


def given_on_command_line(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    """The settings ``argv`` gives and their values, as argparse reads them (``--flag value``, ``--flag=value``,
    ``--flag-name``, ``--no_flag``): every destination starts unset, and argparse writes the ones it meets."""
    unset = argparse.Namespace(**{action.dest: _UNSET for action in parser._actions if action.dest != "help"})
    namespace, _ = parser.parse_known_args(argv, namespace=unset)
    return {name: value for name, value in vars(namespace).items() if value is not _UNSET}


def implied_phases(values: Mapping[str, Any]) -> dict[str, str]:
    """``{phase flag: the setting that turns it on}`` for the phases the named files turn on: ``values`` holds the
    settings as given (a config file's and the command line's), ``tasks`` included. A phase the user set false while
    naming its file is refused: the two contradict each other."""
    implied: dict[str, str] = {}
    for setting, source in _named_sources(values):
        phase = IMPLIED_PHASES[setting]
        if phase not in values:
            implied.setdefault(phase, source)
        elif not _true(values.get(phase)):
            raise UsageError(
                f"{source} is set, but {phase} is false, so it would not be read: leave {source} out, or set "
                f"{phase} true."
            )
    return implied


def _named_sources(values: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    for setting in IMPLIED_PHASES:
        if values.get(setting) not in (None, ""):
            yield setting, setting
    tasks = values.get("tasks")
    if isinstance(tasks, dict):
        for name, settings in tasks.items():
            for setting in IMPLIED_PHASES:
                if isinstance(settings, dict) and settings.get(setting) not in (None, ""):
                    yield setting, f"tasks[{name!r}].{setting}"


def _true(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1", "y", "t")
    return bool(value)


def check_dependencies(arguments, given: set[str]) -> None:
    """Refuse the first setting in ``given`` that would not take effect with the others (``DEPENDENCIES``), and the
    first such setting of a config file's task (``TASK_DEPENDENCIES``)."""
    model, data, training = arguments
    for setting in sorted(given):
        for needs in DEPENDENCIES.get(setting, ()):
            if not needs.holds(model, data, training):
                raise UsageError(
                    f"{setting} is set, but it takes effect only with {needs.what}, which this run does not have: "
                    f"set that too, or leave {setting} out."
                )
    tasks = data.tasks if isinstance(data.tasks, dict) else {}
    for name, settings in tasks.items():
        for setting in sorted(settings) if isinstance(settings, dict) else ():
            for needs in TASK_DEPENDENCIES.get(setting, ()):
                if not needs.holds(model, data, training):
                    raise UsageError(
                        f"tasks[{name!r}]: {setting} is set, but it takes effect only with {needs.what}, which this "
                        f"run does not have: set that too, or leave {setting} out."
                    )


# What a run does in the phase a file turned on, as its log line says it.
PHASE_WORDS = {"do_eval": "evaluates on it", "do_predict": "predicts it"}


def implied_phase_lines(implied: Mapping[str, str]) -> list[str]:
    """The lines that tell the user which phases their files turned on."""
    return [
        f"{source} is given, so the run {PHASE_WORDS[phase]} (--{phase} is implied)."
        for phase, source in implied.items()
    ]
