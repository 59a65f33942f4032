"""The command line (``train.py``, ``pooled-train``, ``python -m pooled_models.train``): argv and an optional
YAML/JSON config file -> the run settings (model, data and training arguments) and the list of task specs, handed to
the pipeline; usage, data and disk errors reported in one line.

The model arguments are derived from ``PooledConfig``'s own fields, so a pooling or head setting added to the config
is a flag (and a config-file key) without touching this file; help texts come from its docstring. The options removed
in 0.3 are refused by name (options/). Nothing here makes transformers run code from a checkpoint or a config file:
``trust_remote_code`` and the keys that name code (``auto_map``, ``custom_pipelines``) are refused wherever they
appear. A multi-task config file holds a ``tasks`` mapping (see :func:`task_specs`)."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import errno
import inspect
import json
import os
import re
import sys
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from transformers import HfArgumentParser, TrainerCallback, TrainingArguments

from ..errors import UsageError, program_name
from ..modeling.configuration_multitask import SEQUENCE, TASK_KINDS, TOKEN
from ..modeling.configuration_pooled import PooledConfig
from ..modeling.problem_types import PROBLEM_TYPES
from ..modeling.registry import POOLINGS
from ..thresholds import AVERAGES
from .console import is_verbose, quiet_libraries, set_up_logging
from .data import TaskSpec
from .data.batching import SAMPLING_STRATEGIES
from .model import (
    CLI_MODEL_DEFAULTS,
    _config_default,
    parse_pos_weight,
    pooled_config_fields,
    pooled_config_kwargs,
)
from .options import TRAINING_OPTIONS, refuse_removed_options, require_number
from .pipeline import ModelFactory, RunResult, needed_splits, run_specs

__all__ = [
    "RunResult",
    "run",
    "main",
    "needed_splits",
    "ModelArguments",
    "DataArguments",
    "PooledTrainingArguments",
    "CONFIG_FILE_SUFFIXES",
    "REFUSED_KEYS",
    "model_argument_fields",
    "THRESHOLD_TUNING",
    "read_config_file",
    "parse_arguments",
    "TRAINING_SETTINGS",
    "task_specs",
    "SINGLE_TOKEN_TASK",
    "SINGLE_SEQUENCE_TASK",
]

# The errors of a full disk or a file system that refuses writes (errno names, as OSError reports them).
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of train.py: runs, and reports usage and data errors without a traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0].split("=")[0] == DEMO_FLAG:
            write_demo_files(argv)
            return 0
        run(argv)
    except UsageError as error:
        print(f"{_program()}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        if error.errno not in DISK_ERRORS:
            raise
        # A full disk or a read-only file system is the machine's state, not a bug: one line, and what to do.
        where = f" while writing {error.filename}" if error.filename else ""
        print(
            f"{_program()}: error: {error.strerror}{where}. Free some space (or fix the file system) and run again; "
            "a run that kept a complete checkpoint continues with --resume_from_checkpoint true.",
            file=sys.stderr,
        )
        return 1
    return 0


def run(
    argv: list[str], callbacks: Sequence[TrainerCallback] = (), model_factory: ModelFactory | None = None
) -> RunResult:
    """Train and/or evaluate as ``argv`` says; ``callbacks`` are added to the Trainer's.

    ``model_factory`` replaces the pooled model by another one, trained and evaluated the same way; such a run
    writes no model card (the card describes a pooling).
    """
    model_args, data_args, training_args = parse_arguments(argv)
    set_up_logging(training_args)
    specs = task_specs(data_args, pooled_config_kwargs(model_args))
    with quiet_libraries(is_verbose(training_args)):
        return run_specs(model_args, data_args, training_args, specs, callbacks, model_factory)


def _program() -> str:
    return program_name("train.py", "pooled-train", "pooled_models.train")


def _help_command() -> str:
    """The command that lists every setting, as the user runs the CLI (a pip install has no train.py)."""
    program = _program()
    return f"{'python train.py' if program == 'train.py' else program} --help"


# pooled-train --demo DIR: the quickstart's config files and data, for an install that has no configs/ and data/.
DEMO_FLAG = "--demo"


def write_demo_files(argv: list[str]) -> None:
    """``--demo DIR`` (or ``--demo=DIR``): write the demo into DIR and say what to run next."""
    from .demo import demo_message, write_demo

    given = argv[0].partition("=")[2] if "=" in argv[0] else (argv[1] if len(argv) > 1 else None)
    rest = argv[1:] if "=" in argv[0] else argv[2:]
    if not given or given.startswith("-") or rest:
        raise UsageError(
            f"{DEMO_FLAG} takes one folder and nothing else, e.g. {_program()} {DEMO_FLAG} quickstart"
        )
    configs = write_demo(given)
    print(demo_message(given, configs, _help_command().removesuffix(" --help")))


CONFIG_FILE_SUFFIXES = (".yaml", ".yml", ".json")


# Settings that would make transformers import and run code named by a checkpoint or a config file.
REFUSED_KEYS = ("trust_remote_code", "auto_map", "custom_pipelines")


def _command_line_settings(argv: list[str]) -> dict[str, Any]:
    """``{--flag: the value after it}`` of the flags on a command line (None for the last flag)."""
    settings = {}
    for index, arg in enumerate(argv):
        if arg.startswith("--"):
            following = argv[index + 1] if index + 1 < len(argv) else None
            settings[arg] = following
    return settings


CLI_MODEL_HELP = {
    "multi_label_loss": "train.py's default: 'asymmetric' for a multi-label run (measured on the debtags benchmark; "
    "docs/training.md, Defaults), left unset otherwise.",
    "label_token_layers": "train.py's default: 2 where the backbone supports it (measured against 'all' on both "
    "benchmarks; docs/training.md, Defaults), 'all' elsewhere.",
    "label_token_attention": "train.py's default: 'one_way' where the backbone supports it (measured against "
    "'two_way' on both benchmarks; docs/training.md, Defaults), 'two_way' elsewhere.",
}


DATA_DERIVED_SETTINGS = {
    "pos_weight": "train.py: 'auto' computes it from the training split's labels (negatives / positives per label); "
    "or give one number per label (--pos_weight 1 4.5 2, or a JSON list).",
}


# --tune_thresholds: how train.py chooses the multi-label decision threshold(s) on the validation split.
THRESHOLD_TUNING = ("auto", "global", "per_label", "none")


# train.py's optimisation defaults where they differ from TrainingArguments' (docs/training.md, "Defaults"). The head learning
# rate (bench/recipes.py, 3 seeds): on fortunes 5e-3 gains 4.8 points of macro-F1 over 1e-3 (2e-3: 2.6); on debtags
# it costs 0.6 of micro-F1 against 1e-3 (0.9 against 2e-3) and gains 3.0 of macro-F1. It is the rate that beats the
# 30-line recipe (whose head trains at 2e-3) on both.
HEAD_LEARNING_RATE = 5e-3


NUM_TRAIN_EPOCHS = 4.0


TRAIN_BATCH_SIZE = 16


def _resolved_types(config_class: type) -> dict[str, Any]:
    # PooledConfig's annotations are strings (postponed evaluation). Resolving them on a stand-in class holding
    # only its own fields avoids the base class's annotations, which name torch types.
    own = {item.name: item.type for item in pooled_config_fields(config_class)}
    stand_in = type("PooledConfigFields", (), {"__annotations__": own, "__module__": config_class.__module__})
    return typing.get_type_hints(stand_in)


def _documented_settings(config_class: type) -> dict[str, str]:
    """``name -> help`` parsed from the ``Args:`` sections of the config's docstring and its bases' (a subclass
    documents the settings it adds or changes; the others keep their base's text)."""
    settings: dict[str, str] = {}
    for cls in reversed(config_class.__mro__):
        doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
        entries = re.findall(r"^ {4}(\w+) \([^\n]*\):\n((?: {8}[^\n]*\n?)+)", doc, flags=re.MULTILINE)
        settings.update({name: " ".join(text.split()) for name, text in entries})
    return settings


_SCALARS = (str, int, float, bool)


def _argument_type(annotation: Any) -> Any:
    """The type HfArgumentParser is given for a config field."""
    arguments = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if _flag_friendly(annotation) or (len(arguments) == 1 and _flag_friendly(arguments[0])):
        return annotation  # X or X | None
    # Anything richer (a dict, a list of lists, a union of several types) is given as JSON on the command line.
    return JSONValue | None


def _flag_friendly(annotation: Any) -> bool:
    """A scalar, a Literal, or a list of scalars: what argparse parses from flags by itself."""
    origin = typing.get_origin(annotation)
    if origin is list:
        return all(item in _SCALARS for item in typing.get_args(annotation))
    return annotation in _SCALARS or origin is Literal


class JSONValue:
    """argparse type of settings richer than a scalar or a list: the flag's text parsed as JSON (or kept as text)."""

    def __new__(cls, text: str) -> Any:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text


def model_argument_fields(config_class: type = PooledConfig) -> list[tuple[str, Any, dataclasses.Field]]:
    """``make_dataclass`` fields for every setting of ``config_class``: its type, default and documented help."""
    types = _resolved_types(config_class)
    helps = _documented_settings(config_class)
    fields = []
    for config_field in pooled_config_fields(config_class):
        annotation = _argument_type(types[config_field.name])
        default = CLI_MODEL_DEFAULTS.get(config_field.name, _config_default(config_field))
        # Every setting is documented in PooledConfig's docstring (tests/train/test_help.py checks it).
        metadata = {"help": helps.get(config_field.name)}
        if config_field.name in CLI_MODEL_HELP:
            metadata["help"] += " " + CLI_MODEL_HELP[config_field.name]
        if config_field.name in DATA_DERIVED_SETTINGS:
            annotation = list[str] | None
            metadata["help"] += " " + DATA_DERIVED_SETTINGS[config_field.name]
        if config_field.name == "pooling":
            metadata["choices"] = PoolingChoices()
        if isinstance(default, (list, dict)):
            argument = field(
                default_factory=lambda default=default: copy.deepcopy(default), metadata=metadata
            )
        else:
            argument = field(default=default, metadata=metadata)
        fields.append((config_field.name, annotation, argument))
    return fields


class PoolingChoices:
    """What ``--pooling`` takes: a registered pooling. Read when the flag is parsed, so that poolings registered
    after this import count too."""

    def __contains__(self, name: object) -> bool:
        return name in POOLINGS

    def __iter__(self):
        return iter(POOLINGS)


@dataclass
class BackboneArguments:
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "The backbone: a Hub id or a local folder of any model built into transformers (BERT, RoBERTa, "
            "ESM, DeBERTa, ModernBERT, ...). A folder saved by train.py continues from that pooled model."
        },
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "Tokenizer to use, if not the one saved with the backbone."}
    )
    model_revision: str | None = field(
        default=None, metadata={"help": "Branch, tag or commit of a Hub backbone."}
    )
    cache_dir: str | None = field(
        default=None, metadata={"help": "Where downloaded backbones and datasets are cached."}
    )


def _check_model_arguments(self) -> None:
    self.pos_weight = parse_pos_weight(self.pos_weight)


ModelArguments = dataclasses.make_dataclass(
    "ModelArguments",
    model_argument_fields(),
    bases=(BackboneArguments,),
    namespace={
        "__doc__": "The backbone, and every PooledConfig setting (pooling, head...) as its own argument.",
        "__module__": __name__,
        "_argument_group_name": "model: the backbone, and every PooledConfig setting (pooling, head)",
        "__post_init__": _check_model_arguments,
    },
)


@dataclass
class DataArguments:
    _argument_group_name = "data"

    dataset_name: str | None = field(
        default=None,
        metadata={"help": "A dataset on the Hugging Face Hub (or anything else load_dataset reads)."},
    )
    dataset_config_name: str | None = field(
        default=None, metadata={"help": "The configuration of dataset_name."}
    )
    train_split_name: str = field(default="train", metadata={"help": "Split of dataset_name to train on."})
    validation_split_name: str = field(
        default="validation", metadata={"help": "Split of dataset_name to evaluate on."}
    )
    test_split_name: str = field(
        default="test", metadata={"help": "Split of dataset_name to test and predict on."}
    )
    train_file: str | None = field(
        default=None, metadata={"help": "A .csv, .tsv, .json, .jsonl or .parquet file."}
    )
    validation_file: str | None = field(default=None, metadata={"help": "Same formats as train_file."})
    test_file: str | None = field(
        default=None,
        metadata={"help": "Same formats as train_file; its label column is optional (prediction only)."},
    )
    text_column: str = field(default="text", metadata={"help": "The column holding the text."})
    text_pair_column: str | None = field(
        default=None, metadata={"help": "A second text column, for sentence-pair tasks (encoded as a pair)."}
    )
    label_column: str = field(default="label", metadata={"help": "The column holding the label."})
    problem_type: Literal[
        "auto", "single_label_classification", "multi_label_classification", "regression"
    ] = field(
        default="auto",
        metadata={
            "help": "auto: detected from the label column (strings or integers: single-label; lists: multi-label; "
            "floats: regression)."
        },
    )
    label_separator: str | None = field(
        default=None,
        metadata={
            "help": "Multi-label labels given as one string per row, e.g. 'joy|fear' with '|' (csv files)."
        },
    )
    skip_unseen_labels: bool = field(
        default=False,
        metadata={
            "help": "Drop validation/test rows whose label never occurs in training (default: an error)."
        },
    )
    max_seq_length: int | None = field(
        default=None,
        metadata={
            "help": "Truncate texts to this many tokens. Defaults to, and is capped at, the backbone's limit."
        },
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N training rows."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N validation rows."}
    )
    max_predict_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N test rows."}
    )
    example_texts: list[str] | None = field(
        default=None,
        metadata={
            "help": "After saving, classify these texts with pipeline() from the saved folder and print them."
        },
    )
    # Token classification and multi-task runs (train/data/token.py, train/data/__init__.py; docs/multitask.md).
    tags_column: str | None = field(
        default=None,
        metadata={
            "help": "Token classification (NER, tagging): the column holding each row's tags, one per word; setting "
            "it makes the run a token-classification run. CoNLL files (.conll) are read into the columns 'words' "
            "and 'tags'."
        },
    )
    words_column: str = field(
        default="words",
        metadata={"help": "Token classification: the column holding each row's words (a list of strings)."},
    )
    label_all_subtokens: bool = field(
        default=False,
        metadata={
            "help": "Token classification: give every sub-token of a word the word's tag (B- continued as I-), "
            "not only the first (the default; the others are then left out of the loss and the metrics)."
        },
    )
    tasks: JSONValue | None = field(
        default=None,
        metadata={
            "help": "Multi-task: task name -> its kind (sequence or token), data files and columns, head settings "
            "and training settings (loss_weight, head_learning_rate, start_epoch, freeze_head). Given in a config "
            "file; see docs/multitask.md."
        },
    )

    def files(self) -> dict[str, str | None]:
        """The local file of each split: ``{"train": ..., "validation": ..., "test": ...}`` (None where not given)."""
        return {"train": self.train_file, "validation": self.validation_file, "test": self.test_file}

    def __post_init__(self):
        valid = ("auto", *PROBLEM_TYPES)
        if self.problem_type not in valid:
            raise UsageError(
                f"Unknown problem_type {self.problem_type!r}. Valid choices: {', '.join(valid)}."
            )
        local = [self.train_file, self.validation_file, self.test_file]
        if self.dataset_name and any(local):
            raise UsageError(
                "Give either dataset_name (a Hub dataset) or local files (train_file...), not both."
            )
        if self.max_seq_length is not None and self.max_seq_length < 1:
            raise UsageError(f"max_seq_length must be >= 1, got {self.max_seq_length}.")
        if self.label_separator == "":
            raise UsageError("label_separator must not be empty.")
        if self.tasks is not None and self.tags_column is not None:
            raise UsageError(
                "tags_column names the tags of a single-task run; in a multi-task run, set it per task."
            )


@dataclass
class PooledTrainingArguments(TrainingArguments):
    _argument_group_name = (
        "training: transformers' TrainingArguments, with pooled_models' defaults and additions"
    )

    # head_learning_rate and num_train_epochs were measured (bench/recipes.py, bench/multilabel_defaults.py;
    # docs/training.md, "Defaults"); the batch size, warmup and weight decay are the usual fine-tuning recipe.
    # output_dir has no default, so a run never writes into a folder nobody asked for.
    learning_rate: float = field(default=5e-5, metadata={"help": "Learning rate of the backbone."})
    head_learning_rate: float | None = field(
        default=HEAD_LEARNING_RATE,
        metadata={
            "help": "Learning rate of the pooler and head, which start from random weights and so need larger "
            "steps than the pretrained backbone."
        },
    )
    label_embedding_learning_rate: float | None = field(
        default=None,
        metadata={
            "help": "pooling='label_tokens': learning rate of the label embeddings (the label tokens' input vectors). "
            "Unset: head_learning_rate, as the rest of the pooler."
        },
    )
    label_embedding_weight_decay: float | None = field(
        default=None,
        metadata={
            "help": "pooling='label_tokens': weight decay of the label embeddings. Unset: weight_decay."
        },
    )
    num_train_epochs: float = field(
        default=NUM_TRAIN_EPOCHS, metadata={"help": "Number of passes over the training data."}
    )
    per_device_train_batch_size: int = field(
        default=TRAIN_BATCH_SIZE, metadata={"help": "Training batch size per process."}
    )
    warmup_steps: float = field(
        default=0.1,
        metadata={"help": "Linear warmup: a number of steps, or a fraction of all steps when below 1."},
    )
    weight_decay: float = field(
        default=0.01, metadata={"help": "AdamW weight decay (not on biases and norms)."}
    )
    # Measured in bench/throughput.py (docs/performance.md, "Speed"): on texts of mixed length most positions of a random batch are
    # padding, which the backbone computes like real tokens.
    train_sampling_strategy: str = field(
        default="group_by_length",
        metadata={
            "help": "Sampler for training: 'group_by_length' (batches of texts of similar length, random between "
            "groups: little padding), 'random' (transformers' default), 'sequential' or 'batch_rebalance'.",
            "choices": ["group_by_length", "random", "sequential", "batch_rebalance"],
        },
    )
    length_sorted_eval: bool = field(
        default=True,
        metadata={
            "help": "Evaluate and predict in batches sorted by length (little padding); predictions are written in "
            "the input's order either way."
        },
    )
    freeze_backbone: bool = field(default=False, metadata={"help": "Train only the pooler and head."})
    layerwise_lr_decay: float = field(
        default=1.0,
        metadata={
            "help": "Layer-wise learning-rate decay, in (0, 1]: backbone layer i of L trains at learning_rate x "
            "decay^(L-1-i) (the top layer at learning_rate), the embeddings at learning_rate x decay^L, and the "
            "pooler and head at head_learning_rate, so that the layers nearest the input, which hold the most "
            "general features, change least. 1.0: off (one learning rate for the whole backbone)."
        },
    )
    label_smoothing_factor: float = field(
        default=0.0,
        metadata={
            "help": "Label smoothing epsilon, in [0, 1): single-label and token classification train on "
            "cross-entropy against 1 - epsilon on the true class plus epsilon spread over all classes; multi-label "
            "runs train their multi-label loss on targets y * (1 - epsilon) + epsilon / 2. Only the training loss "
            "is smoothed. Refused for regression; a multi-task run's regression tasks keep their loss. 0: off."
        },
    )
    early_stopping_patience: int | None = field(
        default=None,
        metadata={
            "help": "Stop after this many evaluations without improvement of metric_for_best_model, and keep the "
            "best model (turns on load_best_model_at_end)."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Replace an existing output_dir (only once the new run has succeeded)."},
    )
    keep_checkpoints: bool = field(
        default=False,
        metadata={
            "help": "Keep the checkpoint-* folders (optimizer state, for resuming) in the finished output_dir."
        },
    )
    eval_strategy: str = field(
        default="auto",
        metadata={
            "help": "When to evaluate during training: 'no', 'steps', 'epoch', or 'auto': every epoch with --do_eval."
        },
    )
    save_strategy: str = field(
        default="auto",
        metadata={
            "help": "When to save a checkpoint: 'no', 'steps', 'epoch', 'best', or 'auto': like eval_strategy "
            "when evaluating, else every epoch."
        },
    )
    save_total_limit: int | None = field(
        default=2, metadata={"help": "Keep at most this many checkpoints (the best one is always kept)."}
    )
    logging_steps: float = field(default=50, metadata={"help": "Log the training loss every N steps."})
    log_level: str = field(
        default="passive",
        metadata={
            "help": "What a run prints. 'passive' (the default), 'warning', 'error', 'critical': what was read and "
            "built, one progress bar per phase, the metrics and where the model went, with the libraries' warnings. "
            "'info' or 'debug': also the libraries' logs (transformers, accelerate, datasets), transformers' own "
            "progress bars and its metrics dumps, as transformers' examples print them.",
            "choices": ["debug", "info", "warning", "error", "critical", "passive"],
        },
    )
    dataloader_pin_memory: bool | None = field(
        default=None,
        metadata={
            "help": "Pin the batches' memory for a faster copy to the accelerator. Default: on where an accelerator "
            "is used, off on the CPU (where pinning does nothing but warn)."
        },
    )
    tune_thresholds: Literal["auto", "global", "per_label", "none"] = field(
        default="auto",
        metadata={
            "help": "Multi-label: after training, choose the decision threshold that maximises F1 on the validation "
            "split and save it in config.json. 'global': one for every label; 'per_label': one per label; 'none': "
            "keep decision_threshold (0.5 unless set); 'auto': global when a multi-label run trains with validation "
            "data and decision_threshold is not set, else none."
        },
    )
    threshold_average: Literal["micro", "macro"] = field(
        default="micro", metadata={"help": "The F1 that tune_thresholds maximises: micro- or macro-averaged."}
    )
    task_sampling: Literal["proportional", "temperature", "round_robin"] = field(
        default="proportional",
        metadata={
            "help": "Multi-task: which task each batch comes from. 'proportional': by task size (an epoch is one "
            "pass over every task); 'temperature': by size ** sampling_alpha; 'round_robin': the tasks take turns."
        },
    )
    sampling_alpha: float = field(
        default=0.5,
        metadata={
            "help": "Multi-task, task_sampling temperature: the exponent of the task sizes (1 = proportional, 0 = uniform)."
        },
    )

    def __post_init__(self):
        if self.output_dir is None:
            raise UsageError("output_dir is required: the folder the trained model is saved in.")
        # A config file's values bypass argparse's choices.
        for name, valid in (
            ("tune_thresholds", THRESHOLD_TUNING),
            ("threshold_average", AVERAGES),
            ("task_sampling", SAMPLING_STRATEGIES),
        ):
            if getattr(self, name) not in valid:
                raise UsageError(
                    f"Unknown {name} {getattr(self, name)!r}. Valid choices: {', '.join(valid)}."
                )
        if (
            isinstance(self.sampling_alpha, bool)
            or not isinstance(self.sampling_alpha, (int, float))
            or self.sampling_alpha < 0
        ):
            raise UsageError(f"sampling_alpha must be a number >= 0, got {self.sampling_alpha!r}.")
        for name in ("head_learning_rate", "label_embedding_learning_rate", "label_embedding_weight_decay"):
            if getattr(self, name) is not None:
                require_number(name, getattr(self, name), lambda value: value >= 0, ">= 0 (or unset)")
        for option in TRAINING_OPTIONS.values():
            option.check_arguments(self)
        if self.early_stopping_patience is not None:
            if self.early_stopping_patience < 1:
                raise UsageError(f"early_stopping_patience must be >= 1, got {self.early_stopping_patience}.")
            self.load_best_model_at_end = True
        if self.eval_strategy == "auto":
            self.eval_strategy = "epoch" if self.do_eval else "no"
        if self.save_strategy == "auto":
            evaluating = self.eval_strategy != "no"  # IntervalStrategy is a str enum: this holds for both
            self.save_strategy = (
                str(getattr(self.eval_strategy, "value", self.eval_strategy)) if evaluating else "epoch"
            )
        # Left unset, the best-model metric is chosen once the problem type is known (training.BEST_MODEL_METRIC).
        self.best_metric_chosen = self.metric_for_best_model is not None
        if _launched_on_several_cpu_processes():
            # TrainingArguments only sets up CPU data parallelism (gloo) when asked to use the CPU; without it every
            # process launched by `accelerate launch --multi_gpu` on a machine without GPUs trains alone.
            self.use_cpu = True
        if self.dataloader_pin_memory is None:
            self.dataloader_pin_memory = _uses_an_accelerator(self.use_cpu)
        super().__post_init__()


def _uses_an_accelerator(use_cpu: bool) -> bool:
    import torch

    return not use_cpu and torch.accelerator.is_available()


def _launched_on_several_cpu_processes() -> bool:
    import torch

    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.accelerator.is_available()


def _refuse_code_references(keys, source: str) -> None:
    for key in keys:
        name = key.lstrip("-").replace("-", "_").split("=")[0]
        if name in REFUSED_KEYS:
            raise UsageError(
                f"{source} sets {name!r}, which is refused: train.py never runs code from a checkpoint, a dataset or "
                "a config file. Use a backbone whose model type is built into transformers."
            )


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The settings of a YAML or JSON config file, as a flat ``{argument: value}`` mapping."""
    path = Path(path)
    if path.suffix not in CONFIG_FILE_SUFFIXES:
        raise UsageError(f"Config file {path} must end in one of {', '.join(CONFIG_FILE_SUFFIXES)}.")
    try:
        text = path.read_text(encoding="utf-8")
        values = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except OSError as error:
        raise UsageError(f"Cannot read config file {path}: {error.strerror or error}.") from error
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise UsageError(
            f"Config file {path} is not valid {path.suffix.lstrip('.').upper()}: {error}"
        ) from error
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise UsageError(
            f"Config file {path} must hold a mapping of argument names to values, got {type(values).__name__}."
        )
    _refuse_code_references(values, f"Config file {path}")
    return values


def _parser() -> HfArgumentParser:
    program = program_name("train.py", "pooled-train", "pooled_models.train")
    return HfArgumentParser(
        (ModelArguments, DataArguments, PooledTrainingArguments),
        prog=program,
        usage=f"{program} [CONFIG.yaml|CONFIG.json] [--flag value ...]",
        description="Fine-tune any Transformers backbone with any pooling head. Settings come from an optional "
        "YAML/JSON config file (first argument) and flags; flags override the file. "
        f"{program} {DEMO_FLAG} DIR writes the quickstart's config files and data into DIR.",
    )


def parse_arguments(argv: list[str]) -> tuple[Any, DataArguments, PooledTrainingArguments]:
    """``(model_args, data_args, training_args)`` from ``[config_file] [--flag value ...]``."""
    parser = _parser()
    if argv and not argv[0].startswith("-"):
        config_file, argv = argv[0], argv[1:]
        file_values = read_config_file(config_file)
        refuse_removed_options(file_values, f"Config file {config_file}")
        known = {action.dest for action in parser._actions}
        unknown = sorted(set(file_values) - known)
        if unknown:
            raise UsageError(
                f"Config file {config_file} has unknown settings: {'; '.join(_with_suggestion(key, known) for key in unknown)}. "
                f"Run {_help_command()} for the list."
            )
        parser.set_defaults(**file_values)  # flags given after the file override it
    _refuse_code_references([arg for arg in argv if arg.startswith("--")], "The command line")
    refuse_removed_options(_command_line_settings(argv), "The command line")
    try:
        *outputs, remaining = parser.parse_args_into_dataclasses(
            args=argv, return_remaining_strings=True, look_for_args_file=False
        )
    except UsageError:
        raise
    except (
        ValueError
    ) as error:  # TrainingArguments' own consistency checks, e.g. mismatched eval/save strategies
        raise UsageError(str(error)) from error
    if remaining:
        raise UsageError(f"Unknown arguments: {' '.join(remaining)}. Run {_help_command()} for the list.")
    return tuple(outputs)


def _with_suggestion(key: str, known: set[str]) -> str:
    matches = difflib.get_close_matches(key, known, n=2)
    return f"{key} (did you mean {' or '.join(matches)}?)" if matches else key


# A task's training settings and their defaults.
TRAINING_SETTINGS = {"loss_weight": 1.0, "head_learning_rate": None, "start_epoch": 0, "freeze_head": False}


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
    "text_column",
    "text_pair_column",
    "label_column",
    "problem_type",
    "label_separator",
    "words_column",
    "tags_column",
    "label_all_subtokens",
    "skip_unseen_labels",
    "max_train_samples",
    "max_eval_samples",
    "max_predict_samples",
)


SEQUENCE_ONLY = ("text_column", "text_pair_column", "label_column", "problem_type", "label_separator")


TOKEN_ONLY = ("words_column", "tags_column", "label_all_subtokens")


HEAD_SETTINGS = (
    "classifier_head",
    "classifier_dropout",
    "classifier_hidden_size",
    "classifier_activation",
)


# The name of the task of a token-classification run from flags, and of a sequence-classification run from flags.
SINGLE_TOKEN_TASK = "tokens"


SINGLE_SEQUENCE_TASK = "sequence"


# Settings of the whole model (the backbone is shared), not of a task: set on the model once it is built.
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
