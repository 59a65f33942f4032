"""The one training pipeline, written once for every run: the output folder (lock, recovery, checks) -> each task's
data read and checked -> the plan -> the model -> tokenizing -> the Trainer -> train, tune thresholds, save, evaluate,
predict -> predictions, card, results, publish, push, summary.

Every run is a list of tasks; a run given by flags is a list of one. What it publishes follows from the tasks (the
plan says which): one sequence task's ``PooledForSequenceClassification``, one token task's
``PooledForTokenClassification``, or several tasks' ``PooledForMultiTask``. Every check (arguments, files, columns,
texts, labels, the output folder) runs before the first folder is created; the staging folder becomes the output
folder only once the run has succeeded. This is the only module that stages and publishes; it reads the arguments
and the plan and writes into neither.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, set_seed

from ..errors import UsageError
from ..modeling.inputs import values_checked_by_caller
from .arguments.model import chosen_model_settings
from .batch_layout import BatchLayout, lay_out_batches
from .card import card_data, render_model_card
from .checkpoints import TRUE_WORDS, resolve_checkpoint
from .console import (
    describe_length,
    describe_model,
    describe_tasks,
    install_progress,
    log_metrics,
    print_summary,
    say,
)
from .data import TaskData, read_task, tokenize_task
from .data.documents import (
    DocumentMode,
    choose_document_mode,
    refuse_off_settings,
    tokenize_document_task,
)
from .data.multitask import MultiTaskRows
from .disk_full import DiskFull, put_right_when_full
from .evaluation import summary_metrics, task_config, tune_decision_thresholds
from .model import (
    build_model,
    choose_max_length,
    freeze_backbone,
    freeze_heads,
    load_tokenizer,
    record_max_length,
    warn_of_another_length,
)
from .output_dir import StagedOutputDir, push_folder, read_run_record
from .plan import RunPlan, make_plan, needed_splits, with_document_settings
from .predictions import RESULTS_FILE, example_answers, predictions_file, write_predictions, write_results
from .source import model_source
from .tasks import MODEL_WIDE_SETTINGS, TaskSpec
from .trainer import PooledTrainer, callbacks_for, check_training_options
from .zero_shot_eval import (
    ZeroShotEvaluation,
    check_zero_shot_model,
    read_seen_rows,
    read_zero_shot_rows,
    scores_any_labels,
)

__all__ = ["RunResult", "ModelFactory", "RunInterrupted", "run_tasks"]

logger = logging.getLogger("pooled_models.train")


# (model source, labels, tokenizer) -> the model to train instead of a pooled one (the sweep's vanilla baseline)
ModelFactory = Callable[[Any, Any, Any], Any]


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C once the run had started writing; ``kept`` says what it left (cli.py prints it in one line)."""

    def __init__(self, kept: str):
        super().__init__(kept)
        self.kept = kept


@dataclass
class RunResult:
    output_dir: Path | None  # None on the processes that do not write
    metrics: dict[str, float] = field(default_factory=dict)
    examples: list[Any] = field(default_factory=list)  # [(text, {task: answers})]
    parameters: int = 0  # the model's parameter count


def run_tasks(
    arguments,
    specs: list[TaskSpec],
    callbacks: Sequence[TrainerCallback] = (),
    model_factory: ModelFactory | None = None,
) -> RunResult:
    """Train and/or evaluate the tasks ``specs`` as ``arguments`` (model, data, training arguments) say."""
    training_args = arguments[2]
    staging = StagedOutputDir(training_args.output_dir, overwrite=training_args.overwrite_output_dir)
    # The process that writes holds output_dir's lock from the first check to the last rename.
    with staging.locked(enabled=training_args.should_save):
        try:
            return _locked_run(staging, arguments, specs, callbacks, model_factory)
        except KeyboardInterrupt as interrupt:
            if isinstance(interrupt, RunInterrupted):
                raise
            raise RunInterrupted(_left_outside_training(staging)) from interrupt


def _left_outside_training(staging: StagedOutputDir) -> str:
    """What Ctrl-C left when it came before training (reading, checking, building) or after it (publishing)."""
    if staging.work.exists():
        return f"{staging.work} stays; the same command run again completes or removes it"
    record = read_run_record(staging.final) if staging.final.is_dir() else None
    if record is not None and record.get("pid") == os.getpid() and record.get("status") == "finished":
        return f"the model was already published in {staging.final}"
    return "nothing was written"


def _locked_run(staging: StagedOutputDir, arguments, specs, callbacks, model_factory) -> RunResult:
    model_args, data_args, training_args = arguments
    roles = needed_splits(training_args)
    source = model_source(model_args)
    source.check_tasks(specs, from_tasks_setting=data_args.tasks is not None)
    checkpoint, finished = _checkpoint_to_resume(staging, training_args)
    if finished is not None:
        return finished
    if training_args.should_save:
        staging.check(resuming=checkpoint is not None)
    set_seed(training_args.seed)
    tasks = {
        spec.name: read_task(spec, roles, source.saved, source.cache_dir, len(specs) == 1) for spec in specs
    }
    zero_shot_rows = read_zero_shot_rows(data_args, _label_names(tasks), source.cache_dir)
    say(training_args, describe_tasks(tasks))
    plan = make_plan(
        source,
        tasks,
        _model_wide(model_args),
        training_args,
        staging.work,
        data_args.example_texts,
        model_factory,
    )
    tokenizer = load_tokenizer(plan)
    documents = _document_mode(plan, tasks, tokenizer, model_args, data_args)
    plan = with_document_settings(plan, documents)
    model = build_model(plan, tasks, tokenizer)
    if zero_shot_rows is not None:
        check_zero_shot_model(model.config)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    max_length, origin = _tokenize(plan, tasks, tokenizer, model, data_args.max_seq_length, documents)
    zero_shot = _zero_shot_evaluation(zero_shot_rows, tasks, tokenizer, max_length, data_args)
    _prepare_for_training(plan, model)
    layout = lay_out_batches(plan.trainer_args, model, tasks, max_length, documents)
    described = [describe_model(model, source.base_model, parameters)]
    # a run says its text length, or in document mode its windows (the layout's reading of the documents)
    described += layout.documents.lines(describe_length(max_length, origin))
    say(training_args, [*described, *layout.lines])

    # Everything is checked: from here on the run writes, into the staging folder only.
    if training_args.should_save:
        staging.create(resuming=checkpoint is not None)
    trainer = _trainer(plan, model, tokenizer, tasks, callbacks, layout)
    progress = install_progress(trainer)  # one bar per phase, unless --log_level info
    with _cleaned_up_on_failure(staging, trainer, progress):
        # Token ids were checked above and labels when read: the model need not read them back at every step.
        with values_checked_by_caller():
            metrics = _train_and_evaluate(plan, trainer, tasks, checkpoint, tokenizer, progress, zero_shot)
    trainer.accelerator.wait_for_everyone()
    if not trainer.is_world_process_zero():
        return RunResult(output_dir=None, metrics=metrics, parameters=parameters)
    optimizer = trainer.optimizer if plan.trainer_args.do_train else None  # the card gives the rates it used
    return _publish(plan, staging, model, tasks, metrics, parameters, zero_shot, layout, optimizer)


def _zero_shot_evaluation(
    zero_shot_rows, tasks, tokenizer, max_length: int, data_args
) -> ZeroShotEvaluation | None:
    """--zero_shot_file's evaluation (zero_shot_eval.py): the file's rows, with the run's validation rows as the seen
    ones of the generalized setting; None without the file."""
    if zero_shot_rows is None:
        return None
    seen = read_seen_rows(next(iter(tasks.values())))
    return ZeroShotEvaluation(
        zero_shot_rows, tokenizer, max_length, seen, _label_names(tasks), data_args.seen_label_margin
    )


@contextmanager
def _cleaned_up_on_failure(staging: StagedOutputDir, trainer, progress) -> Iterator[None]:
    """A failure keeps the staging folder only for its complete checkpoint, and says so; Ctrl-C does the same, said
    in one line by cli.py (RunInterrupted), not as a failure with a traceback."""
    try:
        with put_right_when_full(staging, trainer.is_world_process_zero() and trainer.args.should_save):
            yield  # a save that fills the disk is put right first, and raised as DiskFull (disk_full.py)
    except KeyboardInterrupt as interrupt:
        if progress is not None:
            progress.close()  # cli.py's line goes below the progress bar, not onto it
        kept = (
            what_was_kept(staging) if trainer.is_world_process_zero() else "nothing written on this process"
        )
        raise RunInterrupted(kept) from interrupt
    except DiskFull:
        raise  # its line already says what stays (disk_full.py put the staging folder right)
    except BaseException:
        if trainer.is_world_process_zero():
            logger.error("The run failed; %s.", what_was_kept(staging))
        raise


def _tokenize(
    plan: RunPlan, tasks, tokenizer, model, requested: int | None, documents: DocumentMode
) -> tuple[int, str]:
    """Tokenize every task at the run's one length (max_seq_length is a setting of the run, not of a task), saved
    with the model; returns it and where it comes from. In document mode the length is the window's, and every
    split is cut into windows (data/documents.py)."""
    training_args = plan.trainer_args  # the document arguments as the plan resolved them
    if documents.on:
        max_length, origin = model.config.document_window, "document mode's window, --document_window"
    else:
        max_length, origin = choose_max_length(requested, tokenizer, model, plan.source)
        warn_of_another_length(plan.source, max_length, training_args.do_train)
    record_max_length(model, tokenizer, max_length)
    with training_args.main_process_first(desc="tokenizing"):
        for task in tasks.values():
            if documents.on:
                tokenize_document_task(task, tokenizer, model.config, training_args)
            else:
                tokenize_task(task, tokenizer, max_length, named=not plan.single)
    return max_length, origin


def _document_mode(plan: RunPlan, tasks, tokenizer, model_args, data_args) -> DocumentMode:
    """Whether the run reads whole documents in windows (data/documents.py), decided before the model is built."""
    args = plan.trainer_args
    if (
        plan.model_factory is not None
    ):  # the sweep's vanilla baseline: a model of transformers' own, one window
        if args.document_mode == "true":
            raise UsageError("--document_mode true: a model factory's model reads one window; leave it out.")
        return DocumentMode(False, "off: the model factory's model reads one window")
    settings = chosen_model_settings(model_args)
    documents = choose_document_mode(
        args,
        settings,
        plan.source.saved,
        tasks,
        # the window's default is the length the same run cuts texts at: one decision (model.py)
        run_length=lambda: choose_max_length(data_args.max_seq_length, tokenizer, None, plan.source)[0],
    )
    refuse_off_settings(documents, args)
    return documents


def _model_wide(model_args) -> dict[str, Any]:
    """The settings of the whole model the user chose (packed_batches), as opposed to a task's head."""
    return {
        name: value
        for name, value in chosen_model_settings(model_args).items()
        if name in MODEL_WIDE_SETTINGS
    }


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


def _prepare_for_training(plan: RunPlan, model) -> None:
    """Freeze what the run freezes, and refuse training options the model cannot take."""
    args = plan.trainer_args
    if args.freeze_backbone:
        logger.info("Backbone frozen: %d parameters will not be trained.", freeze_backbone(model))
    freeze_heads(model, plan)
    if args.do_train:
        check_training_options(model, args)


def _trainer(
    plan: RunPlan,
    model,
    tokenizer,
    tasks: dict[str, TaskData],
    callbacks,
    layout: BatchLayout,
) -> PooledTrainer:
    """The Trainer of the run: a dict of each task's rows to evaluate; one task's rows, or every task's, to train."""
    args = plan.trainer_args
    kinds = {name: task.kind for name, task in tasks.items()}
    training = None
    if "train" in plan.roles:
        rows = {name: task.encoded["train"] for name, task in tasks.items()}
        training = next(iter(rows.values())) if plan.single else MultiTaskRows(rows)
    return PooledTrainer(
        model=model,
        args=args,
        train_dataset=training,
        eval_dataset={name: task.encoded["validation"] for name, task in tasks.items()}
        if "validation" in plan.roles
        else None,
        processing_class=tokenizer,
        data_collator=layout.collator(tokenizer, kinds, args.pad_to_multiple_of),
        callbacks=callbacks_for(args) + list(callbacks),
        tasks=[task.spec for task in plan.tasks.values()],
        name_tasks=not plan.single,
        length_buckets=layout.buckets,
        window_budget=layout.window_budget,  # document mode: batches cut by windows
    )


def _train_and_evaluate(
    plan: RunPlan, trainer, tasks, checkpoint, tokenizer, progress, zero_shot
) -> dict[str, float]:
    metrics: dict[str, float] = {}
    args = trainer.args

    def phase(name: str):
        return progress.running(name) if progress is not None else nullcontext()

    if zero_shot is not None and args.do_train:
        # a new model's labels are not trained yet: scored without the seen-label margin (the cosine baseline)
        zero_shot.score(trainer.model, "before training", new_model=plan.source.saved is None)
    if args.do_train:
        result = trainer.train(resume_from_checkpoint=checkpoint)
        metrics.update(result.metrics, **_train_rows(plan, tasks))
        log_metrics(trainer, "train", result.metrics)
        trainer.save_state()
    if zero_shot is not None and args.do_train:  # saved with the model, as the thresholds below
        zero_shot.set_margin(trainer.model)
    # Tuned on the final (or best) model, and set before it is saved, so config.json carries the threshold(s). The
    # metrics read the config when they run: the evaluations below are at the tuned threshold(s).
    if "validation" in plan.roles:
        with phase("tune thresholds"):
            validations = {name: task.encoded["validation"] for name, task in tasks.items()}
            at_default = tune_decision_thresholds(trainer, validations, plan.tasks)
        if at_default:
            log_metrics(trainer, "eval", at_default)
            metrics.update(at_default)
    if (
        plan.publishes_model
    ):  # the final (or best) model and the tokenizer; not a saved model only used (plan.py)
        trainer.save_model()
    if args.do_eval:
        with phase("evaluate"):
            evaluation = trainer.evaluate()
        log_metrics(trainer, "eval", evaluation)
        metrics.update(evaluation)
    if zero_shot is not None:
        zero_shot.score(trainer.model, "trained model")
        metrics.update(zero_shot.result.metrics())
    if args.do_predict:
        with phase("predict"):
            metrics.update(_predict(plan, trainer, tasks, tokenizer))
    metrics["world_size"] = args.world_size
    return metrics


def _label_names(tasks: dict[str, TaskData]) -> list[str]:
    """The labels of a run of one task (the zero-shot file's labels are compared with them)."""
    return [str(name) for name in getattr(next(iter(tasks.values())).labels, "names", None) or []]


def _train_rows(plan: RunPlan, tasks: dict[str, TaskData]) -> dict[str, int]:
    rows = {f"train_rows_{name}": len(task.encoded["train"]) for name, task in tasks.items()}
    return {"train_rows": sum(rows.values()), **({} if plan.single else rows)}


def _predict(plan: RunPlan, trainer, tasks: dict[str, TaskData], tokenizer) -> dict[str, float]:
    """Each task's test predictions, written in input order; the metrics of the labelled ones."""
    metrics: dict[str, float] = {}
    for name, task in tasks.items():
        prediction = trainer.predict_task(name, task.encoded["test"], "test")
        if task.splits["test"].labelled:
            metrics.update(prediction.metrics)
        if trainer.is_world_process_zero():
            path = Path(trainer.args.output_dir) / predictions_file(name, plan.single)
            config = task_config(trainer.model, name)
            write_predictions(path, task, prediction.predictions, config, tokenizer)
    labelled = {name: task.kind for name, task in tasks.items() if task.splits["test"].labelled}
    if not plan.single and labelled:
        metrics.update(summary_metrics(trainer.model, labelled, metrics, "test"))
    log_metrics(trainer, "test", {key: value for key, value in metrics.items() if key.startswith("test_")})
    return metrics


def _publish(
    plan: RunPlan,
    staging,
    model,
    tasks,
    metrics,
    parameters: int,
    zero_shot,
    layout: BatchLayout,
    optimizer,
) -> RunResult:
    """Write the card, results and predictions' summary into the staging folder and publish it (``optimizer``: the
    one training used, whose rates the card gives; None without training)."""
    with put_right_when_full(staging):  # the card and the results fill a disk too (disk_full.py)
        # The card describes a pooling (a factory's model has none) and a model this run publishes.
        if plan.model_factory is None and plan.publishes_model:
            rows = layout.card_rows()
            card = card_data(
                plan, model, tasks, metrics, pushed=plan.push_to_hub, layout=rows, optimizer=optimizer
            )
            # document mode's rows, written from the reading its log line is written from
            card.training_settings.update(layout.documents.card_rows())
            card.zero_shot = zero_shot.result if zero_shot is not None else None
            render_model_card(card).save(staging.work / "README.md")
        write_results(staging.work, metrics, plan.trainer_args)
        output_dir = staging.publish(keep_checkpoints=plan.trainer_args.keep_checkpoints)
    if plan.push_to_hub:
        push_folder(output_dir, plan.trainer_args)
    kinds = {name: task.kind for name, task in plan.tasks.items()}
    texts = list(plan.example_texts)
    # A saved model only evaluated or predicted with is named where it already is (no copy was published).
    model_at = output_dir if plan.publishes_model else plan.source.path
    examples = example_answers(model_at, texts, kinds, plan.single) if texts else []
    print_summary(
        output_dir,
        metrics,
        examples,
        kinds,
        plan.single,
        zero_shot=scores_any_labels(model.config),
        model_at=None if plan.publishes_model else model_at,
    )
    return RunResult(output_dir=output_dir, metrics=metrics, examples=examples, parameters=parameters)


def what_was_kept(staging: StagedOutputDir) -> str:
    """After a failed or interrupted run: keep the staging folder only if it holds a complete checkpoint (its last one
    is what --resume_from_checkpoint true continues), and say what was kept."""
    incomplete = [path.name for path in staging.checkpoints()]
    kept = staging.abandon()
    if not kept:
        return "nothing was kept (no complete checkpoint had been saved)"
    skipped = [name for name in incomplete if name not in {path.name for path in kept}]
    return f"{kept[0].name} in {staging.work} stays for --resume_from_checkpoint true" + (
        f" ({', '.join(skipped)} is incomplete and will be skipped)" if skipped else ""
    )


def _published_metrics(folder: Path) -> dict[str, float]:
    try:
        return json.loads((folder / RESULTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
