"""What ``python train.py`` does: arguments -> checked data -> model -> Trainer -> a saved, documented model.

Every check (arguments, files, columns, texts, labels, the output folder) runs before the first folder is
created; :mod:`pooled_models.staging` makes the output folder appear only once the run has succeeded.
"""

from __future__ import annotations

import errno
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import transformers
from transformers import DataCollatorWithPadding, TrainerCallback, set_seed

from ..modeling.configuration_pooled import PooledConfig
from .arguments import FROM_TRAINING_DATA, parse_arguments
from .checkpoints import TRUE_WORDS, resolve_checkpoint
from .data import Split, prepare_splits, tokenize
from .errors import UsageError, program_name
from .label_space import Labels
from .metrics import BEST_MODEL_METRIC, metrics_function
from .model_setup import (
    build_model,
    choose_max_length,
    load_tokenizer,
    resolve_multi_label_loss,
    resolve_pos_weight,
    saved_pooled_config,
)
from .multitask import run_tasks
from .outputs import (
    PREDICTIONS_FILE,
    RESULTS_FILE,
    classify_examples,
    print_summary,
    push_folder,
    write_model_card,
    write_predictions,
    write_results,
)
from .packaged import resolve_backbone
from .staging import StagedOutputDir
from .task_specs import is_task_run
from .threshold_tuning import ThresholdPlan, plan_thresholds, tune_on_validation
from .trainer import PooledTrainer, callbacks_for, check_training_options, freeze_backbone

__all__ = ["RunResult", "run", "main", "needed_splits"]

logger = logging.getLogger("pooled_models.train")

# The errors of a full disk or a file system that refuses writes (errno names, as OSError reports them).
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


@dataclass
class RunResult:
    output_dir: Path | None  # None on the processes that do not write
    metrics: dict[str, float] = field(default_factory=dict)
    examples: list[Any] = field(default_factory=list)
    parameters: int = 0  # the model's parameter count


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of train.py: runs, and reports usage and data errors without a traceback."""
    try:
        run(list(sys.argv[1:] if argv is None else argv))
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


# (model_args, labels, tokenizer) -> the model to train instead of a pooled one (the sweep's vanilla baseline)
ModelFactory = Callable[[Any, Labels, Any], Any]


def run(
    argv: list[str], callbacks: Sequence[TrainerCallback] = (), model_factory: ModelFactory | None = None
) -> RunResult:
    """Train and/or evaluate as ``argv`` says; ``callbacks`` are added to the Trainer's.

    ``model_factory`` replaces the pooled model by another one, trained and evaluated the same way; such a run
    writes no model card (the card describes a pooling).
    """
    model_args, data_args, training_args = parse_arguments(argv)
    _set_up_logging(training_args)
    staging = StagedOutputDir(training_args.output_dir, overwrite=training_args.overwrite_output_dir)
    # The process that writes holds output_dir's lock from the first check to the last rename.
    with staging.locked(enabled=training_args.should_save):
        return _locked_run(staging, model_args, data_args, training_args, callbacks, model_factory)


def _locked_run(
    staging: StagedOutputDir, model_args, data_args, training_args, callbacks, model_factory
) -> RunResult:
    roles = needed_splits(training_args)
    base_model = _resolve_backbone(model_args)
    resuming = training_args.do_train and training_args.resume_from_checkpoint is not None
    # What a killed run left is put right first; the other processes then look for checkpoints in the result.
    with training_args.main_process_first(desc="checking output_dir", local=False):
        published = staging.recover() if training_args.should_save else False
        resuming_last = resuming and str(training_args.resume_from_checkpoint).lower() in TRUE_WORDS
        if resuming_last and (published or staging.holds_finished_run()):
            print(f"Nothing to resume: the run had finished. Saved to: {staging.final}")
            return RunResult(output_dir=staging.final, metrics=_published_metrics(staging.final))
        checkpoint = (
            resolve_checkpoint(training_args.resume_from_checkpoint, staging.work)
            if training_args.do_train
            else None
        )
    if training_args.should_save:
        staging.check(resuming=checkpoint is not None)
    set_seed(training_args.seed)
    if is_task_run(data_args):  # token classification, or several tasks on one backbone: train/multitask.py
        result = run_tasks(
            staging,
            model_args,
            data_args,
            training_args,
            callbacks,
            checkpoint,
            roles,
            base_model,
            _report_failure,
        )
        return RunResult(result.output_dir, result.metrics, result.examples, result.parameters)

    saved_config = saved_pooled_config(model_args)
    splits, labels = prepare_splits(
        data_args,
        roles,
        Labels.from_config(saved_config) if saved_config else None,
        cache_dir=model_args.cache_dir,
    )
    pos_weight_source = _pos_weight_source(model_args, saved_config)
    resolve_pos_weight(model_args, labels, splits)
    resolve_multi_label_loss(model_args, labels, saved_config)
    threshold_plan = plan_thresholds(
        training_args,
        labels,
        splits,
        given=model_args.decision_threshold is not None,
        saved=saved_config is not None and saved_config.decision_threshold is not None,
    )
    tokenizer = load_tokenizer(model_args)
    if model_factory is not None:
        model = model_factory(model_args, labels, tokenizer)
    else:
        model = build_model(model_args, labels, saved_config, tokenizer)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    max_length = choose_max_length(data_args.max_seq_length, tokenizer, model)
    _tokenize(splits, tokenizer, data_args, max_length, training_args)
    _prepare_for_training(model, training_args)
    if training_args.load_best_model_at_end and not training_args.best_metric_chosen:
        training_args.metric_for_best_model, training_args.greater_is_better = BEST_MODEL_METRIC[
            labels.problem_type
        ]

    # Everything is checked: from here on the run writes, into the staging folder only.
    push_to_hub, training_args.push_to_hub = (
        training_args.push_to_hub,
        False,
    )  # pushed once, complete, at the end
    if training_args.should_save:
        staging.create(resuming=checkpoint is not None)
    training_args.output_dir = str(staging.work)
    trainer = _trainer(model, training_args, splits, tokenizer, callbacks)
    try:
        metrics = _train_and_evaluate(trainer, splits, checkpoint, labels, data_args, threshold_plan)
    except BaseException:
        if trainer.is_world_process_zero():
            _report_failure(staging)
        raise
    trainer.accelerator.wait_for_everyone()
    if not trainer.is_world_process_zero():
        return RunResult(output_dir=None, metrics=metrics, parameters=parameters)

    if isinstance(
        model.config, PooledConfig
    ):  # the card describes a pooling; the sweep's vanilla model has none
        write_model_card(
            staging.work,
            staging.final,
            model,
            training_args,
            base_model,
            data_args,
            splits,
            labels,
            max_length,
            metrics,
            pushed=push_to_hub,
            threshold_plan=threshold_plan,
            pos_weight_source=pos_weight_source,
        )
    write_results(staging.work, metrics, training_args)
    output_dir = staging.publish(keep_checkpoints=training_args.keep_checkpoints)
    if push_to_hub:
        push_folder(output_dir, training_args)
    examples = classify_examples(output_dir, data_args.example_texts) if data_args.example_texts else []
    print_summary(output_dir, metrics, examples)
    return RunResult(output_dir=output_dir, metrics=metrics, examples=examples, parameters=parameters)


def _tokenize(splits: dict[str, Split], tokenizer, data_args, max_length: int, training_args) -> None:
    with training_args.main_process_first(desc="tokenizing"):
        for split in splits.values():
            tokenize(split, tokenizer, data_args.text_column, data_args.text_pair_column, max_length)


def _prepare_for_training(model, training_args) -> None:
    """Freeze the backbone if asked, and refuse training options the model cannot take."""
    if training_args.freeze_backbone:
        logger.info("Backbone frozen: %d parameters will not be trained.", freeze_backbone(model))
    if training_args.do_train:
        check_training_options(model, training_args)


def _trainer(model, training_args, splits: dict[str, Split], tokenizer, callbacks=()) -> PooledTrainer:
    return PooledTrainer(
        model=model,
        args=training_args,
        train_dataset=splits["train"].encoded if "train" in splits else None,
        eval_dataset=splits["validation"].encoded if "validation" in splits else None,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=metrics_function(model.config),
        callbacks=callbacks_for(training_args) + list(callbacks),
    )


def _report_failure(staging: StagedOutputDir) -> None:
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


def _program() -> str:
    return program_name("train.py", "pooled-train", "pooled_models.train")


def _set_up_logging(training_args) -> None:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    level = training_args.get_process_log_level()
    logging.getLogger("pooled_models").setLevel(logging.INFO if training_args.should_log else level)
    transformers.utils.logging.set_verbosity(level)


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
    return hub_id or model_args.model_name_or_path


def _pos_weight_source(model_args, saved_config) -> str | None:
    """Where the model's pos_weight comes from, for the model card: computed, given, saved, or None (no pos_weight)."""
    if model_args.pos_weight is not None:
        return "computed" if model_args.pos_weight == FROM_TRAINING_DATA else "given"
    return "saved" if saved_config is not None and saved_config.pos_weight is not None else None


def _train_and_evaluate(
    trainer,
    splits: dict[str, Split],
    checkpoint,
    labels: Labels,
    data_args,
    threshold_plan: ThresholdPlan | None,
) -> dict[str, float]:
    metrics: dict[str, float] = {}
    args = trainer.args
    if args.do_train:
        result = trainer.train(resume_from_checkpoint=checkpoint)
        metrics.update(result.metrics, train_rows=len(splits["train"].encoded))
        trainer.log_metrics("train", result.metrics)
        trainer.save_state()
    if threshold_plan is not None and threshold_plan.tunes:
        # Tuned on the final (or best) model, and set before it is saved, so config.json carries the threshold(s). The
        # metrics function reads the config when it runs: the evaluations below are at the tuned threshold(s).
        tuned, at_default = tune_on_validation(trainer, splits["validation"], threshold_plan)
        trainer.model.config.decision_threshold = tuned
        trainer.log_metrics("eval", at_default)
        metrics.update(at_default)
    # The final (or best) model and the tokenizer; an evaluation-only run publishes the model it evaluated.
    trainer.save_model()
    if args.do_eval:
        evaluation = trainer.evaluate()
        trainer.log_metrics("eval", evaluation)
        metrics.update(evaluation)
    if args.do_predict:
        test = splits["test"]
        prediction = trainer.predict(test.encoded, metric_key_prefix="test")
        if test.labelled:
            trainer.log_metrics("test", prediction.metrics)
            metrics.update(prediction.metrics)
        if trainer.is_world_process_zero():
            write_predictions(
                Path(args.output_dir) / PREDICTIONS_FILE,
                test,
                prediction.predictions,
                labels,
                data_args,
                trainer.model.config,
            )
    metrics["world_size"] = args.world_size
    return metrics
