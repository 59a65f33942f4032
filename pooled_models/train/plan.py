"""A run's plan: every setting the run works out from its arguments, its tasks and their data, worked out once
before a model is built or a folder written, then read-only.

* :class:`ModelSource`: where the model comes from: a backbone (a ``package:`` name resolved to its folder) or a model
  saved by train.py, whose config is checked first (no code references, safetensors weights only).
* :class:`TaskPlan`: each task's head settings as the model is built with them (the user's, and train.py's
  data-derived defaults: ``pos_weight auto`` counted on the training split, the multi-label loss, the label-token
  layers and attention; a label-text task's label descriptions as its data and files give them), how its decision
  thresholds are chosen, and where its positive weights came from.
* :class:`RunPlan`: the source, the tasks, what the run publishes (a sequence classifier, a token classifier or a
  multi-task model), and the ``TrainingArguments`` the Trainer gets: the user's, staged in the work folder, with the
  best-model metric the tasks call for.

The pipeline passes the plan down; nothing writes into the arguments or the plan.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from transformers import AutoConfig, PreTrainedConfig, TrainingArguments

from ..errors import UsageError
from ..modeling.configuration_multitask import SEQUENCE, TOKEN, PooledMultiTaskConfig
from ..modeling.label_token_layers import ALL_LAYERS, LAYER_STACKS, TWO_WAY, supports_top_layers
from ..modeling.problem_types import MULTI_LABEL
from ..thresholds import positive_weights
from .arguments.defaults import (
    LABEL_TOKEN_ATTENTION_DEFAULT,
    LABEL_TOKEN_LAYERS_DEFAULT,
    MULTI_LABEL_DEFAULT_LOSS,
)
from .arguments.documents import resolved_document_arguments
from .arguments.model import FROM_TRAINING_DATA
from .arguments.speed import choice
from .batch_layout import bucket_refusal
from .evaluation import ThresholdPlan, best_model_metric, plan_thresholds
from .few_examples import default_epochs, default_learning_rate, default_pooling, default_untuned_threshold
from .source import ModelSource

if TYPE_CHECKING:  # annotations only
    from .data import TaskData
    from .tasks import TaskSpec

__all__ = [
    "ModelSource",
    "TaskPlan",
    "RunPlan",
    "make_plan",
    "needed_splits",
    "default_label_token_settings",
    "PUBLISHED_KINDS",
    "with_document_settings",
]

logger = logging.getLogger("pooled_models.train")


# What a run publishes: the model of one sequence task, of one token task, or of several tasks.
PUBLISHED_KINDS = (SEQUENCE, TOKEN, "multitask")


@dataclass(frozen=True)
class TaskPlan:
    """One task as the run builds and evaluates it."""

    spec: TaskSpec
    settings: Mapping[str, Any]  # the head's PooledConfig settings, train.py's defaults filled in
    thresholds: ThresholdPlan | None = None  # a multi-label task's decision thresholds
    pos_weight_origin: str | None = None  # "computed", "given", "saved" or None (no positive weights)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind


@dataclass(frozen=True)
class RunPlan:
    source: ModelSource
    tasks: Mapping[str, TaskPlan]  # in task order
    publishes: str  # one of PUBLISHED_KINDS
    model_settings: Mapping[str, Any]  # settings of the whole model (packed_batches)
    roles: tuple[str, ...]  # the splits the run reads: train, validation, test
    trainer_args: TrainingArguments  # what the Trainer gets: output_dir is the staging folder
    output_dir: Path  # where the finished run is published
    push_to_hub: bool  # the finished folder is pushed once, complete (the Trainer never pushes)
    example_texts: tuple[str, ...] = ()
    model_factory: Callable | None = None  # (source, labels, tokenizer) -> a model of another kind (no card)

    @property
    def single(self) -> bool:
        """One task, published as its own head's model: metrics, files and card name no task."""
        return self.publishes != "multitask"

    @property
    def publishes_model(self) -> bool:
        """Whether the run publishes a model: one it trained, built from a backbone, or whose saved config it changed
        (decision thresholds tuned on validation, a problem type the config did not name). A saved model only
        evaluated or predicted with stays where it is: the run publishes predictions and metrics, and names it there."""
        if self.trainer_args.do_train or self.source.saved is None or self.model_factory is not None:
            return True
        tuned = "validation" in self.roles and any(
            task.thresholds is not None and task.thresholds.tunes for task in self.tasks.values()
        )
        unnamed = any(
            getattr(self.source.task_config(name), "problem_type", None) is None for name in self.tasks
        )
        return tuned or unnamed


def needed_splits(training_args) -> list[str]:
    """The splits the run needs: train (do_train), validation (do_eval), test (do_predict)."""
    wanted = {
        "train": training_args.do_train,
        "validation": training_args.do_eval,
        "test": training_args.do_predict,
    }
    roles = [role for role, needed in wanted.items() if needed]
    if not roles:
        raise UsageError("Nothing to do: set do_train, do_eval and/or do_predict.")
    if training_args.load_best_model_at_end and not training_args.do_eval:
        raise UsageError(
            "load_best_model_at_end and early_stopping_patience need validation data and --do_eval."
        )
    return roles


def make_plan(
    source: ModelSource,
    tasks: dict[str, TaskData],
    model_settings: Mapping[str, Any],
    training_args,
    work_dir: Path,
    example_texts=None,
    model_factory: Callable | None = None,
) -> RunPlan:
    """The run's plan, from its model source, its tasks' checked data and the arguments."""
    publishes = _published_kind(source, tasks)
    single = publishes != "multitask"
    backbone = _BackboneConfig(source)
    task_plans = {
        name: _task_plan(task, source, training_args, backbone, single) for name, task in tasks.items()
    }
    if model_factory is not None and publishes != SEQUENCE:
        raise UsageError("A model factory replaces the model of a single sequence-classification run only.")
    return RunPlan(
        source=source,
        tasks=MappingProxyType(task_plans),
        publishes=publishes,
        model_settings=MappingProxyType(dict(model_settings)),
        roles=tuple(needed_splits(training_args)),
        trainer_args=_trainer_args(training_args, tasks, work_dir, single),
        output_dir=Path(training_args.output_dir),
        push_to_hub=bool(training_args.push_to_hub),
        example_texts=tuple(example_texts or ()),
        model_factory=model_factory,
    )


def with_document_settings(plan: RunPlan, documents) -> RunPlan:
    """The plan of a new model in document mode: its one task's settings with the run's window and stride (a saved
    model keeps its own; data/documents.py decided). A new plan: the plan itself is not written into."""
    if not documents.on or plan.source.saved is not None:
        return plan
    (task,) = plan.tasks.values()
    settings = {**task.settings, **documents.model_settings()}
    tasks = {task.name: dataclasses.replace(task, settings=MappingProxyType(settings))}
    return dataclasses.replace(plan, tasks=MappingProxyType(tasks))


def _published_kind(source: ModelSource, tasks: dict[str, TaskData]) -> str:
    if len(tasks) == 1 and not isinstance(source.saved, PooledMultiTaskConfig):
        return next(iter(tasks.values())).kind
    return "multitask"


def _trainer_args(training_args, tasks: dict[str, TaskData], work_dir: Path, single: bool):
    """The user's TrainingArguments as the Trainer gets them (a new object: the user's stay as they were): writing
    into the staging folder, never pushing (the finished folder is pushed once, complete), the best-model metric the
    tasks call for when none was chosen, and DDP told that a step trains one task's head of several."""
    changes: dict[str, Any] = {"output_dir": str(work_dir), "push_to_hub": False}
    changes.update(resolved_document_arguments(training_args))
    if training_args.load_best_model_at_end and not training_args.best_metric_chosen:
        metric, greater = best_model_metric({name: task.labels for name, task in tasks.items()}, single)
        changes.update(metric_for_best_model=metric, greater_is_better=greater)
    epochs = default_epochs(training_args, tasks)
    if epochs is not None:
        changes["num_train_epochs"] = epochs
    learning_rate = default_learning_rate(training_args, tasks)
    if learning_rate is not None:
        changes["learning_rate"] = learning_rate
    if _compiled_on_buckets(training_args, tasks) and not training_args.dataloader_drop_last:
        # A last, smaller batch would be one more shape to compile (and record) for one step an epoch.
        changes["dataloader_drop_last"] = True
        logger.info(
            "The last training batch of each epoch is dropped when smaller than the others (a compiled model on "
            "length buckets then meets only the buckets' shapes)."
        )
    if training_args.world_size > 1 and len(tasks) > 1:
        # Each step trains one task's head; the other heads get no gradient in it, which DDP must be told of.
        changes["ddp_find_unused_parameters"] = True
    return dataclasses.replace(training_args, **changes)


def _compiled_on_buckets(training_args, tasks: dict[str, TaskData]) -> bool:
    """A compiled run that will pad to length buckets (batch_layout.choose_buckets; compiled runs pad)."""
    kinds = {name: task.kind for name, task in tasks.items()}
    return (
        bool(training_args.torch_compile)
        and training_args.do_train
        and choice(training_args, "pad_to_buckets") != "false"
        and bucket_refusal(training_args, kinds, padding_free=False) is None
    )


def _task_plan(task: TaskData, source, training_args, backbone, single: bool) -> TaskPlan:
    settings = dict(task.spec.model)
    if task.kind != SEQUENCE:
        return TaskPlan(task.spec, MappingProxyType(settings))
    if task.descriptions is not None:  # read from the setting's JSON or file and the data column, merged
        settings["label_descriptions"] = task.descriptions
    saved = source.task_config(task.name)
    where = "this run's" if single else f"task {task.name!r}'s"
    origin = _pos_weight(settings, task, where, saved)
    if saved is None:
        if single:
            default_pooling(settings, task, backbone.config())
        default_multi_label_loss(settings, task.labels.problem_type)
        if leaves_label_token_defaults_unset(settings):
            default_label_token_settings(settings, backbone.config())
    thresholds = plan_thresholds(
        training_args,
        task.labels,
        task.splits,
        given=settings.get("decision_threshold") is not None,
        saved=saved is not None and saved.decision_threshold is not None,
        where="" if single else f"task {task.name!r}: ",
    )
    untuned = thresholds is not None and thresholds.origin == "default"
    if saved is None and untuned and training_args.tune_thresholds == "auto":
        thresholds = default_untuned_threshold(settings, thresholds)
    return TaskPlan(task.spec, MappingProxyType(settings), thresholds, origin)


def _pos_weight(settings: dict, task: TaskData, where: str, saved) -> str | None:
    """Turn ``pos_weight auto`` into negatives / positives per label, counted on the training split's targets;
    returns where the task's positive weights come from, for its model card."""
    given = settings.get("pos_weight")
    if given is None:
        return "saved" if saved is not None and saved.pos_weight is not None else None
    labels = task.labels
    if labels.problem_type != MULTI_LABEL:
        raise UsageError(
            f"pos_weight weights the positive labels of a multi-label loss; {where} labels are "
            f"{labels.problem_type}. Leave pos_weight out."
        )
    if given != FROM_TRAINING_DATA:
        return "given"
    if "train" not in task.splits:
        raise UsageError(
            f"pos_weight={FROM_TRAINING_DATA} is computed from the training split: it needs --do_train."
        )
    settings["pos_weight"] = positive_weights(task.splits["train"].targets)
    logger.info(
        "pos_weight from the training split (negatives / positives): %s",
        ", ".join(
            f"{name} {weight:.3g}" for name, weight in zip(labels.names, settings["pos_weight"], strict=True)
        ),
    )
    return "computed"


def default_multi_label_loss(settings: dict, problem_type: str) -> None:
    """A new multi-label head that names no loss gets train.py's default (others keep PooledConfig's)."""
    if problem_type == MULTI_LABEL and settings.get("multi_label_loss") is None:
        settings["multi_label_loss"] = MULTI_LABEL_DEFAULT_LOSS
        logger.info(
            "Multi-label loss: %s (train.py's default; --multi_label_loss bce for plain BCE).",
            MULTI_LABEL_DEFAULT_LOSS,
        )


class _BackboneConfig:
    """The backbone's config, read once and only when a default depends on it."""

    def __init__(self, source: ModelSource):
        self.source = source
        self._config: PreTrainedConfig | None = None

    def config(self) -> PreTrainedConfig:
        if self._config is None:
            try:
                self._config = AutoConfig.from_pretrained(
                    self.source.path, trust_remote_code=False, **self.source.hub_kwargs()
                )
            except (OSError, ValueError) as error:
                raise UsageError(f"Cannot load the backbone {self.source.path!r}: {error}") from error
        return self._config


# The label-token settings train.py fills in when a new label-token model leaves them out, on the backbones that run
# the label tokens' layers one by one.
LABEL_TOKEN_DEFAULTS = ("label_token_layers", "label_token_attention")


def leaves_label_token_defaults_unset(settings: Mapping[str, Any]) -> bool:
    return settings.get("pooling") == "label_tokens" and any(
        name not in settings for name in LABEL_TOKEN_DEFAULTS
    )


def default_label_token_settings(settings: dict, backbone_config: PreTrainedConfig) -> None:
    """Fill train.py's label-token defaults into a new label-token head's ``settings`` the user left out: the top
    LABEL_TOKEN_LAYERS_DEFAULT layers and LABEL_TOKEN_ATTENTION_DEFAULT attention, where the backbone can run them
    (PooledConfig's full insertion and two-way attention elsewhere)."""
    if not leaves_label_token_defaults_unset(settings):
        return
    if not supports_top_layers(backbone_config):
        logger.info(
            "Label tokens in every layer, with two-way attention: a %s backbone runs them no other way (train.py's "
            "defaults, the top %d layers and %s attention, need one of model type %s).",
            getattr(backbone_config, "model_type", None),
            LABEL_TOKEN_LAYERS_DEFAULT,
            LABEL_TOKEN_ATTENTION_DEFAULT,
            ", ".join(sorted(LAYER_STACKS)),
        )
        return
    if "label_token_layers" not in settings:
        layers = min(LABEL_TOKEN_LAYERS_DEFAULT, backbone_config.num_hidden_layers)
        settings["label_token_layers"] = layers
        logger.info(
            "Label tokens join the backbone's top %d layers (train.py's default; --label_token_layers %s puts them "
            "in every layer).",
            layers,
            ALL_LAYERS,
        )
    if "label_token_attention" not in settings:
        settings["label_token_attention"] = LABEL_TOKEN_ATTENTION_DEFAULT
        logger.info(
            "Label tokens attend to the text, the text not to them (train.py's default; --label_token_attention "
            "%s lets the text attend to them too).",
            TWO_WAY,
        )
