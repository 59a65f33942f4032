"""What a multi-task (or token-classification) train.py run does, step by step: the tasks from the config file ->
each task's data, checked -> one model with a head per task -> MultiTaskTrainer (task sampling, loss weights, head
learning rates, frozen parts, curriculum) -> thresholds of multi-label tasks -> a saved model with its card.

A token-classification run from flags (``--tags_column``) is a run of one token task whose published model is that
head alone: a ``PooledForTokenClassification`` (``model.export_head``), with metrics named as a single run names them
(``eval_f1``). It runs inside :func:`pooled_models.train.run.run`, which holds the output folder's lock and has
already put right what a killed run left; the folder is written and published through the same staging.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import AutoConfig

from ..modeling.configuration_multitask import SEQUENCE, TOKEN, PooledMultiTaskConfig
from ..modeling.configuration_pooled import PooledConfig
from ..modeling.modeling_multitask import PooledForMultiTask
from ..modeling.modeling_token import PooledForTokenClassification
from ..modeling.problem_types import MULTI_LABEL
from ..thresholds import positive_weights, tune_thresholds
from .arguments import FROM_TRAINING_DATA, pooled_config_kwargs
from .data import Split, prepare_splits, tokenize
from .errors import DataError, UsageError
from .label_space import Labels
from .metrics import logits_of, probabilities
from .model_setup import (
    MULTI_LABEL_DEFAULT_LOSS,
    choose_max_length,
    default_label_token_settings,
    leaves_label_token_defaults_unset,
    load_tokenizer,
    saved_model_config,
)
from .multitask_data import MultiTaskCollator, MultiTaskRows, TaskRows
from .multitask_trainer import MEAN_SCORE, MultiTaskTrainer, main_metric
from .outputs import write_results
from .task_outputs import print_task_summary, task_examples, write_task_card, write_task_predictions
from .task_specs import TaskSpec, task_specs
from .token_data import TokenLabels, prepare_token_splits, tokenize_words
from .trainer import callbacks_for, check_training_options, freeze_backbone

__all__ = ["TaskData", "TaskRunResult", "run_tasks"]

logger = logging.getLogger("pooled_models.train")


@dataclass
class TaskRunResult:
    """What run.py's ``RunResult`` reports: the published folder (None on the processes that do not write), the
    metrics, the example texts' answers and the parameter count."""

    output_dir: Path | None
    metrics: dict[str, float]
    examples: list[Any]
    parameters: int


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


def run_tasks(
    staging, model_args, data_args, training_args, callbacks, checkpoint, roles, base_model, on_failure
) -> TaskRunResult:
    """A multi-task or token-classification run, from the checked arguments to the published folder.

    ``on_failure(staging)`` reports what a failed run keeps (run.py's report, shared by every kind of run)."""
    single = data_args.tasks is None
    chosen = pooled_config_kwargs(model_args)
    # A setting of the whole model (the backbone is shared), not of a task: set on the model once it is built.
    packed_batches = chosen.pop("packed_batches", None)
    specs = task_specs(data_args, chosen)
    saved = saved_model_config(model_args)
    tasks = {spec.name: _prepare_task(spec, roles, saved, single, model_args.cache_dir) for spec in specs}
    tokenizer = load_tokenizer(model_args)
    model = _build_model(model_args, tasks, saved, single, tokenizer)
    if packed_batches is not None:
        _set_packed_batches(model, packed_batches)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    with training_args.main_process_first(desc="tokenizing"):
        for task in tasks.values():
            task.max_length = choose_max_length(task.spec.data.max_seq_length, tokenizer, model)
            for split in task.splits.values():
                if task.kind == TOKEN:
                    tokenize_words(
                        split,
                        tokenizer,
                        task.columns[0],
                        task.labels,
                        task.max_length,
                        task.spec.data.label_all_subtokens,
                    )
                else:
                    data = task.spec.data
                    tokenize(split, tokenizer, data.text_column, data.text_pair_column, task.max_length)
    _freeze(model, training_args, specs)
    if training_args.do_train:
        check_training_options(model, training_args)
    _choose_best_model_metric(training_args, model, tasks, single)
    if training_args.world_size > 1 and len(tasks) > 1:
        # Each step trains one task's head; the other heads get no gradient in it, which DDP must be told of.
        training_args.ddp_find_unused_parameters = True

    # Everything is checked: from here on the run writes, into the staging folder only.
    push_to_hub, training_args.push_to_hub = training_args.push_to_hub, False
    if training_args.should_save:
        staging.create(resuming=checkpoint is not None)
    training_args.output_dir = str(staging.work)
    trainer = MultiTaskTrainer(
        model=model,
        args=training_args,
        train_dataset=MultiTaskRows({name: task.splits["train"].encoded for name, task in tasks.items()})
        if "train" in roles
        else None,
        eval_dataset={name: TaskRows(name, task.splits["validation"].encoded) for name, task in tasks.items()}
        if "validation" in roles
        else None,
        processing_class=tokenizer,
        data_collator=MultiTaskCollator(tokenizer, {name: task.kind for name, task in tasks.items()}),
        callbacks=callbacks_for(training_args) + list(callbacks),
        tasks=specs,
        name_metrics_by_task=not single,
    )
    try:
        metrics = _train_and_evaluate(trainer, tasks, checkpoint, single, staging.work, tokenizer)
    except BaseException:
        if trainer.is_world_process_zero():
            on_failure(staging)
        raise
    trainer.accelerator.wait_for_everyone()
    if not trainer.is_world_process_zero():
        return TaskRunResult(None, metrics, [], parameters)

    write_task_card(
        staging.work,
        staging.final,
        model,
        training_args,
        base_model,
        tasks,
        metrics,
        single=single,
        pushed=push_to_hub,
        example_text=(data_args.example_texts or [None])[0],
    )
    write_results(staging.work, metrics, training_args)
    output_dir = staging.publish(keep_checkpoints=training_args.keep_checkpoints)
    if push_to_hub:
        from .outputs import push_folder

        push_folder(output_dir, training_args)
    examples = task_examples(output_dir, data_args.example_texts, single) if data_args.example_texts else []
    print_task_summary(output_dir, metrics, examples)
    return TaskRunResult(output_dir, metrics, examples, parameters)


# ----------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------


def _prepare_task(spec: TaskSpec, roles: list[str], saved, single: bool, cache_dir) -> TaskData:
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


def _build_model(
    model_args, tasks: dict[str, TaskData], saved, single: bool, tokenizer
) -> PooledForMultiTask:
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


def _freeze(model: PooledForMultiTask, training_args, specs: list[TaskSpec]) -> None:
    if training_args.freeze_backbone:
        logger.info("Backbone frozen: %d parameters will not be trained.", freeze_backbone(model))
    for spec in specs:
        if spec.freeze_head:
            frozen = 0
            for parameter in model.head_parameters(spec.name):
                parameter.requires_grad_(False)
                frozen += parameter.numel()
            logger.info("Head of task %r frozen: %d parameters will not be trained.", spec.name, frozen)


def _choose_best_model_metric(training_args, model, tasks: dict[str, TaskData], single: bool) -> None:
    """Unless ``metric_for_best_model`` is given: the mean of the tasks' main metrics (``mean_score``), or for one
    token task its own main metric (entity F1)."""
    if not training_args.load_best_model_at_end or training_args.best_metric_chosen:
        return
    if single:
        task = next(iter(tasks.values()))
        metric = main_metric(TOKEN, None, task.labels.names)
    else:
        metric = MEAN_SCORE
    training_args.metric_for_best_model, training_args.greater_is_better = metric, True


# ----------------------------------------------------------------------------------------------------
# Training, thresholds, saving, evaluating
# ----------------------------------------------------------------------------------------------------


def _train_and_evaluate(trainer, tasks: dict[str, TaskData], checkpoint, single: bool, work: Path, tokenizer):
    metrics: dict[str, float] = {}
    args = trainer.args
    if args.do_train:
        result = trainer.train(resume_from_checkpoint=checkpoint)
        metrics.update(
            result.metrics, train_rows=sum(len(task.splits["train"].encoded) for task in tasks.values())
        )
        for name, task in tasks.items():
            metrics[f"train_rows_{name}"] = len(task.splits["train"].encoded)
        trainer.log_metrics("train", result.metrics)
        trainer.save_state()
        _tune_thresholds(trainer, tasks)
    model = trainer.model
    if trainer.is_world_process_zero():
        if single:  # the published model is the token head alone, a PooledForTokenClassification
            model.export_head(next(iter(tasks)), work, tokenizer=tokenizer)
        else:
            trainer.save_model()
    if args.do_eval:
        evaluation = trainer.evaluate()
        trainer.log_metrics("eval", evaluation)
        metrics.update(evaluation)
    if args.do_predict:
        for name, task in tasks.items():
            test = task.splits["test"]
            prediction = trainer.predict_task(name, TaskRows(name, test.encoded), "test")
            if test.labelled:
                metrics.update(prediction.metrics)
            if trainer.is_world_process_zero():
                write_task_predictions(work, name, task, prediction.predictions, model, tokenizer, single)
        if not single and any(task.splits["test"].labelled for task in tasks.values()):
            metrics.update(trainer.summary_metrics(metrics, list(tasks), "test"))
            trainer.log_metrics(
                "test", {key: value for key, value in metrics.items() if key.startswith("test_")}
            )
    metrics["world_size"] = args.world_size
    return metrics


def _tune_thresholds(trainer, tasks: dict[str, TaskData]) -> None:
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
