"""The one training pipeline: checked settings -> data -> model -> trainer -> evaluation -> a published folder.

Every run is a list of task specs; a run given by flags is a list of one. Each step is written once, here: the output
folder's lock, recovery and checks, tokenizing, the swap of ``push_to_hub``, staging, the report of a failure,
``wait_for_everyone``, the results, publishing, pushing and the summary. What differs between a run of one sequence
task (a ``PooledForSequenceClassification``) and a run of tasks (a ``PooledForMultiTask``, or the token head alone
for one token task) is a :class:`RunKind`: how its data is read, its model built, its Trainer made, its thresholds
tuned, its predictions and card written. This is the only module that stages and publishes.

Every check (arguments, files, columns, texts, labels, the output folder) runs before the first folder is created;
the staging folder becomes the output folder only once the run has succeeded.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import DataCollatorWithPadding, TrainerCallback, set_seed

from ..errors import UsageError
from ..modeling.configuration_multitask import SEQUENCE, TOKEN
from ..modeling.configuration_pooled import PooledConfig
from .console import (
    describe_labels,
    describe_model,
    describe_splits,
    install_progress,
    log_metrics,
    say,
)
from .data import TaskData, TaskSpec, prepare_task
from .data.batching import MultiTaskCollator, MultiTaskRows, TaskRows
from .data.sequence import Labels, tokenize
from .data.token import tokenize_words
from .evaluation import (
    BEST_MODEL_METRIC,
    MEAN_SCORE,
    ThresholdPlan,
    main_metric,
    metrics_function,
    plan_thresholds,
    tune_on_validation,
    tune_task_thresholds,
)
from .model import (
    FROM_TRAINING_DATA,
    build_model,
    build_task_model,
    choose_max_length,
    freeze_backbone,
    freeze_heads,
    load_tokenizer,
    resolve_backbone,
    resolve_multi_label_loss,
    resolve_pos_weight,
    saved_model_config,
    saved_pooled_config,
)
from .output_dir import TRUE_WORDS, StagedOutputDir, resolve_checkpoint
from .publish import (
    PREDICTIONS_FILE,
    RESULTS_FILE,
    classify_examples,
    print_summary,
    print_task_summary,
    push_folder,
    task_examples,
    write_model_card,
    write_predictions,
    write_results,
    write_task_card,
    write_task_predictions,
)
from .trainer import MultiTaskTrainer, PooledTrainer, callbacks_for, check_training_options

__all__ = ["RunResult", "ModelFactory", "run_specs", "needed_splits"]

logger = logging.getLogger("pooled_models.train")


# (model_args, labels, tokenizer) -> the model to train instead of a pooled one (the sweep's vanilla baseline)
ModelFactory = Callable[[Any, Labels, Any], Any]


@dataclass
class RunResult:
    output_dir: Path | None  # None on the processes that do not write
    metrics: dict[str, float] = field(default_factory=dict)
    examples: list[Any] = field(default_factory=list)
    parameters: int = 0  # the model's parameter count


def run_specs(
    model_args,
    data_args,
    training_args,
    specs: list[TaskSpec],
    callbacks: Sequence[TrainerCallback] = (),
    model_factory: ModelFactory | None = None,
) -> RunResult:
    """Train and/or evaluate the tasks ``specs`` (from :func:`pooled_models.train.task_specs.task_specs`)."""
    staging = StagedOutputDir(training_args.output_dir, overwrite=training_args.overwrite_output_dir)
    # The process that writes holds output_dir's lock from the first check to the last rename.
    with staging.locked(enabled=training_args.should_save):
        return _locked_run(staging, model_args, data_args, training_args, specs, callbacks, model_factory)


def _locked_run(staging, model_args, data_args, training_args, specs, callbacks, model_factory) -> RunResult:
    roles = needed_splits(training_args)
    base_model = _resolve_backbone(model_args)
    checkpoint, finished = _checkpoint_to_resume(staging, training_args)
    if finished is not None:
        return finished
    if training_args.should_save:
        staging.check(resuming=checkpoint is not None)
    set_seed(training_args.seed)
    kind = run_kind(model_args, data_args, training_args, specs, model_factory)
    kind.prepare_data(roles)  # data: read and checked
    say(training_args, kind.data_lines())
    tokenizer = load_tokenizer(model_args)
    model = kind.build_model(tokenizer)  # model
    parameters = sum(parameter.numel() for parameter in model.parameters())
    with training_args.main_process_first(desc="tokenizing"):
        kind.tokenize(tokenizer, model)
    _prepare_for_training(kind, model, training_args)
    say(
        training_args, [describe_model(model, base_model, parameters, token_head_alone=kind.token_head_alone)]
    )

    # Everything is checked: from here on the run writes, into the staging folder only.
    push_to_hub, training_args.push_to_hub = (
        training_args.push_to_hub,
        False,
    )  # pushed once, complete, at the end
    if training_args.should_save:
        staging.create(resuming=checkpoint is not None)
    training_args.output_dir = str(staging.work)
    trainer = kind.trainer(model, tokenizer, callbacks)  # trainer
    progress = install_progress(trainer)  # one bar per phase, unless --log_level info
    try:
        metrics = _train_and_evaluate(kind, trainer, checkpoint, tokenizer, progress)  # evaluate
    except BaseException:
        if trainer.is_world_process_zero():
            report_failure(staging)
        raise
    trainer.accelerator.wait_for_everyone()
    if not trainer.is_world_process_zero():
        return RunResult(output_dir=None, metrics=metrics, parameters=parameters)
    return _publish(kind, staging, model, base_model, metrics, push_to_hub, parameters)  # publish


def _checkpoint_to_resume(staging, training_args) -> tuple[str | None, RunResult | None]:
    """``(checkpoint, None)``, or ``(None, the finished run's result)`` when there is nothing left to resume."""
    resuming = training_args.do_train and training_args.resume_from_checkpoint is not None
    # What a killed run left is put right first; the other processes then look for checkpoints in the result.
    with training_args.main_process_first(desc="checking output_dir", local=False):
        published = staging.recover() if training_args.should_save else False
        resuming_last = resuming and str(training_args.resume_from_checkpoint).lower() in TRUE_WORDS
        if resuming_last and (published or staging.holds_finished_run()):
            print(f"Nothing to resume: the run had finished. Saved to: {staging.final}")
            return None, RunResult(output_dir=staging.final, metrics=_published_metrics(staging.final))
        if not training_args.do_train:
            return None, None
        return resolve_checkpoint(training_args.resume_from_checkpoint, staging.work), None


def _prepare_for_training(kind: RunKind, model, training_args) -> None:
    """Freeze what the run freezes, refuse training options the model cannot take, choose the best-model metric."""
    if training_args.freeze_backbone:
        logger.info("Backbone frozen: %d parameters will not be trained.", freeze_backbone(model))
    kind.freeze_heads(model)
    if training_args.do_train:
        check_training_options(model, training_args)
    if training_args.load_best_model_at_end and not training_args.best_metric_chosen:
        training_args.metric_for_best_model, training_args.greater_is_better = kind.best_model_metric(model)


def _train_and_evaluate(kind: RunKind, trainer, checkpoint, tokenizer, progress) -> dict[str, float]:
    metrics: dict[str, float] = {}
    args = trainer.args

    def phase(name: str):
        return progress.running(name) if progress is not None else nullcontext()

    if args.do_train:
        result = trainer.train(resume_from_checkpoint=checkpoint)
        metrics.update(result.metrics, **kind.train_rows())
        log_metrics(trainer, "train", result.metrics)
        trainer.save_state()
    # Tuned on the final (or best) model, and set before it is saved, so config.json carries the threshold(s). The
    # metrics read the config when they run: the evaluations below are at the tuned threshold(s).
    with phase("tune thresholds"):
        metrics.update(kind.tune_thresholds(trainer))
    # The final (or best) model and the tokenizer; an evaluation-only run publishes the model it evaluated.
    kind.save_model(trainer, tokenizer)
    if args.do_eval:
        with phase("evaluate"):
            evaluation = trainer.evaluate()
        log_metrics(trainer, "eval", evaluation)
        metrics.update(evaluation)
    if args.do_predict:
        with phase("predict"):
            metrics.update(kind.predict(trainer, tokenizer))
    metrics["world_size"] = args.world_size
    return metrics


def _publish(
    kind: RunKind, staging, model, base_model: str, metrics, pushed: bool, parameters: int
) -> RunResult:
    training_args = kind.training_args
    kind.write_card(staging, model, base_model, metrics, pushed)
    write_results(staging.work, metrics, training_args)
    output_dir = staging.publish(keep_checkpoints=training_args.keep_checkpoints)
    if pushed:
        push_folder(output_dir, training_args)
    texts = kind.data_args.example_texts
    examples = kind.examples(output_dir, texts) if texts else []
    kind.print_summary(output_dir, metrics, examples)
    return RunResult(output_dir=output_dir, metrics=metrics, examples=examples, parameters=parameters)


def report_failure(staging: StagedOutputDir) -> None:
    """Log what a failed run keeps: its last complete checkpoint, for --resume_from_checkpoint true."""
    incomplete = [path.name for path in staging.checkpoints()]
    kept = staging.abandon()
    if not kept:
        logger.error("The run failed before its first complete checkpoint; nothing was kept.")
        return
    skipped = [name for name in incomplete if name not in {path.name for path in kept}]
    logger.error(
        "The run failed; %s in %s stays for --resume_from_checkpoint true%s.",
        kept[0].name,
        staging.work,
        f" ({', '.join(skipped)} is incomplete and will be skipped)" if skipped else "",
    )


def _published_metrics(folder: Path) -> dict[str, float]:
    try:
        return json.loads((folder / RESULTS_FILE).read_text())
    except (OSError, ValueError):
        return {}


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


def _resolve_backbone(model_args) -> str:
    """Resolve a packaged backbone to its folder; returns the name the model card gives the base model."""
    if not model_args.model_name_or_path:
        raise UsageError(
            "model_name_or_path is required: a backbone (Hub id or folder) or a model saved by train.py."
        )
    model_args.model_name_or_path, hub_id = resolve_backbone(model_args.model_name_or_path)
    if model_args.tokenizer_name:
        model_args.tokenizer_name, _ = resolve_backbone(model_args.tokenizer_name)
    return hub_id or model_args.model_name_or_path


def run_kind(model_args, data_args, training_args, specs: list[TaskSpec], model_factory) -> RunKind:
    """One sequence task given by flags: a sequence classifier. Otherwise (a token task, several tasks): tasks."""
    if len(specs) == 1 and specs[0].kind == SEQUENCE and data_args.tasks is None:
        return SequenceRun(model_args, data_args, training_args, specs, model_factory)
    if model_factory is not None:
        raise UsageError("A model factory replaces the model of a single sequence-classification run only.")
    return TaskRun(model_args, data_args, training_args, specs)


class RunKind:
    """The steps of :func:`_locked_run` that depend on the kind of run, in the order it calls them."""

    token_head_alone = False  # a one-token-task run, which publishes its token head alone

    def __init__(self, model_args, data_args, training_args, specs: list[TaskSpec]):
        self.model_args, self.data_args, self.training_args, self.specs = (
            model_args,
            data_args,
            training_args,
            specs,
        )

    def prepare_data(self, roles: list[str]) -> None:
        raise NotImplementedError

    def data_lines(self) -> list[str]:
        """What was read: each split's source and rows, and the labels."""
        raise NotImplementedError

    def build_model(self, tokenizer):
        raise NotImplementedError

    def tokenize(self, tokenizer, model) -> None:
        raise NotImplementedError

    def freeze_heads(self, model) -> None:
        """Freeze what the tasks' settings freeze besides the backbone (none for a sequence run)."""

    def best_model_metric(self, model) -> tuple[str, bool]:
        raise NotImplementedError

    def trainer(self, model, tokenizer, callbacks):
        raise NotImplementedError

    def train_rows(self) -> dict[str, int]:
        raise NotImplementedError

    def tune_thresholds(self, trainer) -> dict[str, float]:
        """Tune the decision thresholds the run tunes; returns the metrics it reports about them."""
        return {}

    def save_model(self, trainer, tokenizer) -> None:
        trainer.save_model()

    def predict(self, trainer, tokenizer) -> dict[str, float]:
        raise NotImplementedError

    def write_card(self, staging, model, base_model: str, metrics, pushed: bool) -> None:
        raise NotImplementedError

    def examples(self, output_dir: Path, texts: list[str]) -> list[Any]:
        raise NotImplementedError

    def print_summary(self, output_dir: Path, metrics, examples) -> None:
        raise NotImplementedError


class SequenceRun(RunKind):
    """One sequence task from flags: a ``PooledForSequenceClassification`` (or the model_factory's model)."""

    def __init__(self, model_args, data_args, training_args, specs, model_factory):
        super().__init__(model_args, data_args, training_args, specs)
        self.model_factory = model_factory
        self.saved_config = saved_pooled_config(model_args)

    def prepare_data(self, roles):
        from .data import prepare_splits

        saved = Labels.from_config(self.saved_config) if self.saved_config else None
        self.splits, self.labels = prepare_splits(
            self.data_args, roles, saved, cache_dir=self.model_args.cache_dir
        )
        self.pos_weight_source = _pos_weight_source(self.model_args, self.saved_config)
        resolve_pos_weight(self.model_args, self.labels, self.splits)
        resolve_multi_label_loss(self.model_args, self.labels, self.saved_config)
        self.threshold_plan: ThresholdPlan | None = plan_thresholds(
            self.training_args,
            self.labels,
            self.splits,
            given=self.model_args.decision_threshold is not None,
            saved=self.saved_config is not None and self.saved_config.decision_threshold is not None,
        )

    def data_lines(self):
        return [f"Data: {describe_splits(self.splits)}", f"Labels: {describe_labels(self.labels)}"]

    def build_model(self, tokenizer):
        if self.model_factory is not None:
            return self.model_factory(self.model_args, self.labels, tokenizer)
        return build_model(self.model_args, self.labels, self.saved_config, tokenizer)

    def tokenize(self, tokenizer, model):
        data = self.data_args
        self.max_length = choose_max_length(data.max_seq_length, tokenizer, model)
        for split in self.splits.values():
            tokenize(split, tokenizer, data.text_column, data.text_pair_column, self.max_length)

    def best_model_metric(self, model):
        return BEST_MODEL_METRIC[self.labels.problem_type]

    def trainer(self, model, tokenizer, callbacks):
        return PooledTrainer(
            model=model,
            args=self.training_args,
            train_dataset=self.splits["train"].encoded if "train" in self.splits else None,
            eval_dataset=self.splits["validation"].encoded if "validation" in self.splits else None,
            processing_class=tokenizer,
            data_collator=DataCollatorWithPadding(tokenizer),
            compute_metrics=metrics_function(model.config),
            callbacks=callbacks_for(self.training_args) + list(callbacks),
        )

    def train_rows(self):
        return {"train_rows": len(self.splits["train"].encoded)}

    def tune_thresholds(self, trainer):
        if self.threshold_plan is None or not self.threshold_plan.tunes:
            return {}
        tuned, at_default = tune_on_validation(trainer, self.splits["validation"], self.threshold_plan)
        trainer.model.config.decision_threshold = tuned
        log_metrics(trainer, "eval", at_default)
        return at_default

    def predict(self, trainer, tokenizer):
        test = self.splits["test"]
        prediction = trainer.predict(test.encoded, metric_key_prefix="test")
        metrics = {}
        if test.labelled:
            log_metrics(trainer, "test", prediction.metrics)
            metrics.update(prediction.metrics)
        if trainer.is_world_process_zero():
            path = Path(trainer.args.output_dir) / PREDICTIONS_FILE
            config = trainer.model.config
            write_predictions(path, test, prediction.predictions, self.labels, self.data_args, config)
        return metrics

    def write_card(self, staging, model, base_model, metrics, pushed):
        if not isinstance(
            model.config, PooledConfig
        ):  # the card describes a pooling; the vanilla model has none
            return
        write_model_card(
            staging.work,
            staging.final,
            model,
            self.training_args,
            base_model,
            self.data_args,
            self.splits,
            self.labels,
            self.max_length,
            metrics,
            pushed=pushed,
            threshold_plan=self.threshold_plan,
            pos_weight_source=self.pos_weight_source,
        )

    def examples(self, output_dir, texts):
        return classify_examples(output_dir, texts)

    def print_summary(self, output_dir, metrics, examples):
        print_summary(output_dir, metrics, examples)


def _pos_weight_source(model_args, saved_config) -> str | None:
    """Where the model's pos_weight comes from, for the model card: computed, given, saved, or None (no pos_weight)."""
    if model_args.pos_weight is not None:
        return "computed" if model_args.pos_weight == FROM_TRAINING_DATA else "given"
    return "saved" if saved_config is not None and saved_config.pos_weight is not None else None


class TaskRun(RunKind):
    """A list of tasks on one backbone (``PooledForMultiTask``); one token task from flags publishes its token
    head alone (a ``PooledForTokenClassification``), with metrics named as a single run names them (``eval_f1``)."""

    def __init__(self, model_args, data_args, training_args, specs):
        super().__init__(model_args, data_args, training_args, specs)
        self.single = data_args.tasks is None
        self.token_head_alone = self.single
        self.saved = saved_model_config(model_args)
        self.tasks: dict[str, TaskData] = {}

    def prepare_data(self, roles):
        self.roles = roles
        cache_dir = self.model_args.cache_dir
        for spec in self.specs:
            self.tasks[spec.name] = prepare_task(spec, roles, self.saved, self.single, cache_dir)

    def data_lines(self):
        if self.single:
            (task,) = self.tasks.values()
            return [
                f"Data: {describe_splits(task.splits)}",
                f"Labels: {describe_labels(task.labels, token=True)}",
            ]
        return [
            f"Task {name} ({task.kind}): {describe_splits(task.splits)}; "
            + describe_labels(task.labels, token=task.kind == TOKEN)
            for name, task in self.tasks.items()
        ]

    def build_model(self, tokenizer):
        model = build_task_model(self.model_args, self.tasks, self.saved, self.single, tokenizer)
        if self.training_args.world_size > 1 and len(self.tasks) > 1:
            # Each step trains one task's head; the other heads get no gradient in it, which DDP must be told of.
            self.training_args.ddp_find_unused_parameters = True
        return model

    def tokenize(self, tokenizer, model):
        for task in self.tasks.values():
            data = task.spec.data
            task.max_length = choose_max_length(data.max_seq_length, tokenizer, model)
            for split in task.splits.values():
                if task.kind == TOKEN:
                    column = task.columns[0]
                    tokenize_words(
                        split, tokenizer, column, task.labels, task.max_length, data.label_all_subtokens
                    )
                else:
                    tokenize(split, tokenizer, data.text_column, data.text_pair_column, task.max_length)

    def freeze_heads(self, model):
        freeze_heads(model, self.specs)

    def best_model_metric(self, model):
        """The mean of the tasks' main metrics (``mean_score``), or for one token task its own (entity F1)."""
        if self.single:
            task = next(iter(self.tasks.values()))
            return main_metric(TOKEN, None, task.labels.names), True
        return MEAN_SCORE, True

    def trainer(self, model, tokenizer, callbacks):
        tasks, roles = self.tasks, self.roles
        return MultiTaskTrainer(
            model=model,
            args=self.training_args,
            train_dataset=MultiTaskRows({name: task.splits["train"].encoded for name, task in tasks.items()})
            if "train" in roles
            else None,
            eval_dataset={
                name: TaskRows(name, task.splits["validation"].encoded) for name, task in tasks.items()
            }
            if "validation" in roles
            else None,
            processing_class=tokenizer,
            data_collator=MultiTaskCollator(tokenizer, {name: task.kind for name, task in tasks.items()}),
            callbacks=callbacks_for(self.training_args) + list(callbacks),
            tasks=self.specs,
            name_metrics_by_task=not self.single,
        )

    def train_rows(self):
        rows = {f"train_rows_{name}": len(task.splits["train"].encoded) for name, task in self.tasks.items()}
        return {"train_rows": sum(rows.values()), **rows}

    def tune_thresholds(self, trainer):
        if trainer.args.do_train:
            tune_task_thresholds(trainer, self.tasks)
        return {}

    def save_model(self, trainer, tokenizer):
        if not trainer.is_world_process_zero():
            return
        if self.single:  # the published model is the token head alone, a PooledForTokenClassification
            trainer.model.export_head(
                next(iter(self.tasks)), Path(trainer.args.output_dir), tokenizer=tokenizer
            )
        else:
            trainer.save_model()

    def predict(self, trainer, tokenizer):
        metrics: dict[str, float] = {}
        work = Path(trainer.args.output_dir)
        for name, task in self.tasks.items():
            test = task.splits["test"]
            prediction = trainer.predict_task(name, TaskRows(name, test.encoded), "test")
            if test.labelled:
                metrics.update(prediction.metrics)
            if trainer.is_world_process_zero():
                predictions = prediction.predictions
                write_task_predictions(work, name, task, predictions, trainer.model, tokenizer, self.single)
        if not self.single and any(task.splits["test"].labelled for task in self.tasks.values()):
            metrics.update(trainer.summary_metrics(metrics, list(self.tasks), "test"))
            log_metrics(
                trainer, "test", {key: value for key, value in metrics.items() if key.startswith("test_")}
            )
        return metrics

    def write_card(self, staging, model, base_model, metrics, pushed):
        write_task_card(
            staging.work,
            staging.final,
            model,
            self.training_args,
            base_model,
            self.tasks,
            metrics,
            single=self.single,
            pushed=pushed,
            example_text=(self.data_args.example_texts or [None])[0],
        )

    def examples(self, output_dir, texts):
        return task_examples(output_dir, texts, self.single)

    def print_summary(self, output_dir, metrics, examples):
        kinds = {name: task.kind for name, task in self.tasks.items()}
        print_task_summary(output_dir, metrics, examples, kinds, self.single)
