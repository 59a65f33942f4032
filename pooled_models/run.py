"""What ``python train.py`` does: arguments -> checked data -> model -> Trainer -> a saved, documented model.

Every check (arguments, files, columns, texts, labels, the output folder) runs before the first folder is
created; see :mod:`pooled_models.staging` for how a run's output appears only once the run has succeeded.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import transformers
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    TrainerCallback,
    set_seed,
)

from .arguments import UsageError, parse_arguments, pooled_config_kwargs
from .configuration_pooled import PooledConfig
from .data import Split, attach_labels, backbone_max_length, check_texts, load_splits, tokenize
from .labels import DataError, Labels
from .modeling_pooled import PooledForSequenceClassification
from .packaged import resolve_backbone
from .staging import StagedOutputDir
from .training import (
    BEST_MODEL_METRIC,
    PooledTrainer,
    callbacks_for,
    freeze_backbone,
    metrics_function,
    probabilities,
    resolve_checkpoint,
)

__all__ = ["RunResult", "run", "main"]

logger = logging.getLogger("pooled_models.train")

PREDICTIONS_FILE = "predictions.jsonl"
RESULTS_FILE = "all_results.json"


@dataclass
class RunResult:
    output_dir: Path | None  # None on the processes that do not write
    metrics: dict[str, float] = field(default_factory=dict)
    examples: list[Any] = field(default_factory=list)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of train.py: runs, and reports usage and data errors without a traceback."""
    try:
        run(list(sys.argv[1:] if argv is None else argv))
    except UsageError as error:
        print(f"train.py: error: {error}", file=sys.stderr)
        return 2
    return 0


def run(argv: list[str], callbacks: Sequence[TrainerCallback] = ()) -> RunResult:
    model_args, data_args, training_args = parse_arguments(argv)
    _set_up_logging(training_args)
    roles = _roles(training_args)
    base_model = _resolve_backbone(model_args)
    staging = StagedOutputDir(training_args.output_dir, overwrite=training_args.overwrite_output_dir)
    resuming = bool(training_args.do_train and training_args.resume_from_checkpoint not in (None, "", "false", "False"))
    if training_args.should_save:
        staging.check(resuming)
    checkpoint = resolve_checkpoint(training_args.resume_from_checkpoint, staging.work) if training_args.do_train else None
    set_seed(training_args.seed)

    # Data and labels, all checked before a model is loaded.
    splits = load_splits(data_args, roles, cache_dir=model_args.cache_dir)
    _limit_rows(splits, data_args)
    for split in splits.values():
        _check_split(split, data_args)
    pooled_checkpoint = _pooled_checkpoint_config(model_args)
    labels = _label_space(splits, data_args, pooled_checkpoint)
    for split in splits.values():
        if split.labelled:
            attach_labels(split, labels, data_args.label_column, data_args.skip_unseen_labels)

    model = _build_model(model_args, labels, pooled_checkpoint)
    tokenizer = _load_tokenizer(model_args, model)
    max_length = _max_length(data_args, tokenizer, model)
    with training_args.main_process_first(desc="tokenizing"):
        for split in splits.values():
            tokenize(split, tokenizer, data_args.text_column, data_args.text_pair_column, max_length)
    if training_args.freeze_backbone:
        logger.info("Backbone frozen: %d parameters will not be trained.", freeze_backbone(model))
    _choose_best_model_metric(training_args, labels.problem_type)

    # From here on the run writes, into the staging folder only.
    push_to_hub, training_args.push_to_hub = training_args.push_to_hub, False  # pushed once, complete, at the end
    if training_args.should_save:
        staging.create(resuming=checkpoint is not None)
    training_args.output_dir = str(staging.work)
    trainer = PooledTrainer(
        model=model,
        args=training_args,
        train_dataset=splits["train"].encoded if "train" in splits else None,
        eval_dataset=splits["validation"].encoded if "validation" in splits else None,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=metrics_function(labels.problem_type, training_args.multi_label_threshold),
        callbacks=callbacks_for(training_args) + list(callbacks),
    )
    try:
        metrics = _train_and_evaluate(trainer, splits, checkpoint, labels, data_args)
    except BaseException:
        if trainer.is_world_process_zero():
            kept = staging.abandon()
            logger.error(
                "The run failed; %s", f"its checkpoints stay in {staging.work} (resume with --resume_from_checkpoint "
                "true)." if kept else "nothing was written."
            )
        raise
    trainer.accelerator.wait_for_everyone()
    if not trainer.is_world_process_zero():
        return RunResult(output_dir=None, metrics=metrics)

    _write_card(staging, trainer, base_model, data_args, splits, labels, max_length, metrics, push_to_hub)
    (staging.work / RESULTS_FILE).write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    (staging.work / "training_args.json").write_text(training_args.to_json_string() + "\n")
    output_dir = staging.publish(keep_checkpoints=training_args.keep_checkpoints)
    if push_to_hub:
        _push(output_dir, training_args)
    examples = _classify_examples(output_dir, data_args.example_texts) if data_args.example_texts else []
    _print_summary(output_dir, metrics, examples)
    return RunResult(output_dir=output_dir, metrics=metrics, examples=examples)


# ----------------------------------------------------------------------------------------------------
# Steps
# ----------------------------------------------------------------------------------------------------


def _set_up_logging(training_args) -> None:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO, force=False)
    level = training_args.get_process_log_level()
    logger.setLevel(logging.INFO if training_args.should_log else level)
    logging.getLogger("pooled_models").setLevel(logging.INFO if training_args.should_log else level)
    transformers.utils.logging.set_verbosity(level)


def _roles(training_args) -> list[str]:
    roles = [role for role, wanted in (("train", training_args.do_train), ("validation", training_args.do_eval),
                                       ("test", training_args.do_predict)) if wanted]
    if not roles:
        raise UsageError("Nothing to do: set do_train, do_eval and/or do_predict.")
    if training_args.load_best_model_at_end and not training_args.do_eval:
        raise UsageError("load_best_model_at_end and early_stopping_patience need validation data and --do_eval.")
    return roles


def _limit_rows(splits: dict[str, Split], data_args) -> None:
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples,
              "test": data_args.max_predict_samples}
    for role, split in splits.items():
        if limits[role] is not None and limits[role] < len(split.dataset):
            split.dataset = split.dataset.select(range(limits[role]))


def _check_split(split: Split, data_args) -> None:
    text_columns = [data_args.text_column] + ([data_args.text_pair_column] if data_args.text_pair_column else [])
    # A test split may come without labels: it is then only predicted.
    label_needed = split.name != "test" or data_args.label_column in split.dataset.column_names
    split.require_columns(text_columns + ([data_args.label_column] if label_needed else []))
    for column in text_columns:
        check_texts(split, column)
    split.labelled = label_needed


def _resolve_backbone(model_args) -> str:
    """Resolve a packaged backbone to its folder; returns the name the model card gives the base model."""
    if not model_args.model_name_or_path:
        raise UsageError("model_name_or_path is required: a backbone (Hub id or folder) or a model saved by train.py.")
    model_args.model_name_or_path, hub_id = resolve_backbone(model_args.model_name_or_path)
    return hub_id or model_args.model_name_or_path


def _pooled_checkpoint_config(model_args) -> PooledConfig | None:
    """The config of a model saved by train.py, when model_name_or_path is one (to evaluate or continue it)."""
    try:
        config = AutoConfig.from_pretrained(
            model_args.model_name_or_path, revision=model_args.model_revision, cache_dir=model_args.cache_dir,
            trust_remote_code=False,
        )
    except (OSError, ValueError) as error:
        raise UsageError(f"Cannot load the model {model_args.model_name_or_path!r}: {error}") from error
    return config if isinstance(config, PooledConfig) else None


def _label_space(splits: dict[str, Split], data_args, pooled_checkpoint: PooledConfig | None) -> Labels:
    column = data_args.label_column
    if "train" in splits:
        train = splits["train"].dataset
        labels = Labels.from_training(
            train[column], train.features[column], splits["train"].source, column,
            problem_type=data_args.problem_type, separator=data_args.label_separator,
        )
        if pooled_checkpoint is not None:
            _check_same_labels(labels, Labels.from_config(pooled_checkpoint))
    elif pooled_checkpoint is not None:
        labels = Labels.from_config(pooled_checkpoint)
        labels.separator = data_args.label_separator
    else:
        raise UsageError(
            "Without do_train, model_name_or_path must be a model trained by train.py (its labels come from its "
            "config), not a plain backbone."
        )
    test = splits.get("test")
    if test is not None and test.labelled and labels.is_unlabelled(test.dataset[column], test.dataset.features[column]):
        test.labelled = False  # labels withheld (all empty, or -1 in a ClassLabel column)
    return labels


def _check_same_labels(labels: Labels, saved: Labels) -> None:
    if (labels.problem_type, labels.names) != (saved.problem_type, saved.names):
        raise DataError(
            f"The model was trained for {saved.problem_type} with labels {saved.names}; the training data gives "
            f"{labels.problem_type} with labels {labels.names}. Start from the backbone to train on new labels."
        )


def _build_model(model_args, labels: Labels, pooled_checkpoint: PooledConfig | None) -> PooledForSequenceClassification:
    settings = pooled_config_kwargs(model_args)
    if pooled_checkpoint is not None:
        changed = {name: value for name, value in settings.items() if getattr(pooled_checkpoint, name) != value}
        if changed:
            raise UsageError(
                f"{model_args.model_name_or_path} is a trained pooled model; its settings cannot change "
                f"({', '.join(f'{name}={value!r}' for name, value in changed.items())}). Start from its backbone instead."
            )
        return AutoModelForSequenceClassification.from_pretrained(
            model_args.model_name_or_path, revision=model_args.model_revision, cache_dir=model_args.cache_dir,
            use_safetensors=True, trust_remote_code=False,
        )
    backbone_kwargs = {key: value for key, value in
                       (("revision", model_args.model_revision), ("cache_dir", model_args.cache_dir)) if value}
    try:
        return PooledForSequenceClassification.from_backbone(
            model_args.model_name_or_path,
            backbone_kwargs=backbone_kwargs,
            num_labels=labels.num_labels,
            id2label=labels.id2label,
            label2id=labels.label2id if labels.names else None,
            problem_type=labels.problem_type,
            **settings,
        )
    except ValueError as error:  # PooledConfig's checks: a setting that does not apply, an unknown pooling...
        raise UsageError(str(error)) from error


def _load_tokenizer(model_args, model):
    tokenizer = AutoTokenizer.from_pretrained(
        model_args.tokenizer_name or model_args.model_name_or_path, revision=model_args.model_revision,
        cache_dir=model_args.cache_dir, trust_remote_code=False,
    )
    if tokenizer.pad_token is None:  # decoders (GPT-2, Llama) have none; the attention mask hides it anyway
        if tokenizer.eos_token is None:
            raise UsageError(f"The tokenizer of {model_args.model_name_or_path} has neither a pad nor an eos token.")
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    return tokenizer


def _max_length(data_args, tokenizer, model) -> int:
    limit = backbone_max_length(tokenizer, model)
    requested = data_args.max_seq_length
    if requested is None:
        if limit is None:
            raise UsageError("The backbone states no maximum input length; set --max_seq_length.")
        return limit
    if limit is not None and requested > limit:
        logger.warning("max_seq_length=%d is more than the backbone takes; using its limit, %d.", requested, limit)
        return limit
    return requested


def _choose_best_model_metric(training_args, problem_type: str) -> None:
    if training_args.best_metric_chosen:
        return
    if training_args.load_best_model_at_end:
        training_args.metric_for_best_model, training_args.greater_is_better = BEST_MODEL_METRIC[problem_type]


def _train_and_evaluate(trainer, splits, checkpoint, labels: Labels, data_args) -> dict[str, float]:
    metrics: dict[str, float] = {}
    args = trainer.args
    if args.do_train:
        result = trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_model()  # the final (or best) model and the tokenizer, into the staging folder
        trainer.save_state()
        metrics.update(result.metrics)
        metrics["train_rows"] = len(splits["train"].encoded)
        trainer.log_metrics("train", result.metrics)
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
            _write_predictions(Path(args.output_dir) / PREDICTIONS_FILE, test, prediction.predictions, labels,
                               data_args, args.multi_label_threshold)
    if not args.do_train:
        trainer.save_model()  # an evaluation-only run still publishes the model it evaluated
    metrics["world_size"] = args.world_size
    return metrics


def _write_predictions(path: Path, split: Split, logits, labels: Labels, data_args, threshold: float) -> None:
    """One JSON object per test row: its text(s), its label if known, the prediction and the scores by label name."""
    scores = probabilities(logits, labels.problem_type)
    text_columns = [data_args.text_column] + ([data_args.text_pair_column] if data_args.text_pair_column else [])
    rows = split.dataset
    with open(path, "w", encoding="utf-8") as handle:
        for index in range(len(rows)):
            record = {column: rows[index][column] for column in text_columns}
            if split.labelled:
                record["label"] = _json_safe(rows[index][data_args.label_column])
            if labels.problem_type == "regression":
                record["prediction"] = float(scores[index])
            else:
                by_name = {name: round(float(score), 6) for name, score in zip(labels.names, scores[index], strict=True)}
                if labels.problem_type == "single_label_classification":
                    record["prediction"] = labels.names[int(scores[index].argmax())]
                else:
                    record["prediction"] = [name for name, score in zip(labels.names, scores[index], strict=True) if score >= threshold]
                record["scores"] = by_name
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _write_card(staging: StagedOutputDir, trainer, base_model: str, data_args, splits, labels, max_length, metrics,
                push_to_hub: bool) -> None:
    from .model_card import CardFacts, render_model_card

    args = trainer.args
    name = args.hub_model_id or staging.final.name
    facts = CardFacts(
        model_name=name.split("/")[-1],
        repo_id=name if push_to_hub else str(staging.final),
        base_model=base_model,
        base_model_on_hub=not Path(base_model).exists(),
        config=trainer.model.config,
        data_description=_data_description(data_args, splits),
        dataset_name=data_args.dataset_name,
        dataset_config=data_args.dataset_config_name,
        data_format=_data_format(data_args),
        splits=[{"name": split.name, "rows": len(split.encoded), "truncated": split.truncated} for split in splits.values()],
        max_seq_length=max_length,
        training_settings=_training_settings(trainer, labels),
        evaluation=_evaluation_by_split(metrics),
        example_text=(data_args.example_texts or [_first_text(splits, data_args)])[0],
    )
    render_model_card(facts).save(staging.work / "README.md")


def _first_text(splits, data_args) -> str:
    split = next(iter(splits.values()))
    return split.dataset[0][data_args.text_column]


def _data_description(data_args, splits) -> str:
    if data_args.dataset_name:
        config = f" (configuration `{data_args.dataset_config_name}`)" if data_args.dataset_config_name else ""
        source = f"the Hub dataset [`{data_args.dataset_name}`](https://huggingface.co/datasets/{data_args.dataset_name}){config}"
    else:
        source = "local files: " + ", ".join(f"`{Path(split.source.split(' file ', 1)[1]).name}`" for split in splits.values())
    columns = f"text column `{data_args.text_column}`"
    if data_args.text_pair_column:
        columns += f" paired with `{data_args.text_pair_column}`"
    return f"From {source}; {columns}, labels from `{data_args.label_column}`."


def _data_format(data_args) -> str:
    if data_args.dataset_name:
        return data_args.dataset_name
    first = data_args.train_file or data_args.validation_file or data_args.test_file
    return Path(first).suffix.lstrip(".").replace("jsonl", "json").replace("tsv", "csv")


def _training_settings(trainer, labels: Labels) -> dict[str, Any]:
    args = trainer.args
    settings: dict[str, Any] = {"problem type": labels.problem_type}
    if args.do_train:
        settings.update({
            "learning rate (backbone)": args.learning_rate,
            "learning rate (pooler and head)": args.head_learning_rate or args.learning_rate,
            "backbone frozen": args.freeze_backbone,
            "epochs": args.num_train_epochs if args.max_steps <= 0 else f"{args.max_steps} steps",
            "batch size per device": args.per_device_train_batch_size,
            "devices": args.world_size,
            "gradient accumulation steps": args.gradient_accumulation_steps,
            "warmup": args.warmup_steps,
            "weight decay": args.weight_decay,
            "scheduler": str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)),
            "seed": args.seed,
        })
        if args.load_best_model_at_end:
            settings["best model by"] = args.metric_for_best_model
        if args.early_stopping_patience:
            settings["early stopping patience"] = args.early_stopping_patience
    if labels.problem_type == "multi_label_classification":
        settings["decision threshold"] = args.multi_label_threshold
    return settings


def _evaluation_by_split(metrics: dict[str, float]) -> dict[str, dict[str, float]]:
    from .model_card import METRIC_IDS

    table: dict[str, dict[str, float]] = {}
    for prefix, split in (("eval_", "validation"), ("test_", "test")):
        values = {key[len(prefix):]: value for key, value in metrics.items()
                  if key.startswith(prefix) and key[len(prefix):] in METRIC_IDS}
        if values:
            table[split] = values
    return table


def _push(output_dir: Path, training_args) -> None:
    from huggingface_hub import HfApi

    repo_id = training_args.hub_model_id or output_dir.name
    api = HfApi(token=training_args.hub_token)
    repo = api.create_repo(repo_id, private=training_args.hub_private_repo, exist_ok=True)
    api.upload_folder(
        repo_id=repo.repo_id, folder_path=str(output_dir), commit_message="Upload model trained with pooled_models",
        ignore_patterns=["checkpoint-*", "checkpoint-*/**"],
    )
    logger.info("Pushed %s to https://huggingface.co/%s", output_dir, repo.repo_id)


def _classify_examples(output_dir: Path, texts: list[str]) -> list[Any]:
    from transformers import pipeline

    config = AutoConfig.from_pretrained(output_dir)
    top_k = None if config.problem_type == "multi_label_classification" else 1
    classify = pipeline("text-classification", model=str(output_dir), tokenizer=str(output_dir), top_k=top_k)
    return [(text, result if isinstance(result, list) else [result]) for text, result in zip(texts, classify(list(texts)), strict=True)]


def _print_summary(output_dir: Path, metrics: dict[str, float], examples: list[Any]) -> None:
    print()
    shown = {key: value for key, value in metrics.items() if key.startswith(("eval_", "test_")) and "runtime" not in key
             and "per_second" not in key}
    if shown:
        print("Evaluation:")
        for key, value in sorted(shown.items()):
            print(f"  {key:<28} {value:.4f}" if isinstance(value, float) else f"  {key:<28} {value}")
    print(f"Saved to: {output_dir}")
    if examples:
        print("Predictions of the saved model (pipeline):")
        for text, result in examples:
            shown_result = ", ".join(f"{item['label']} {item['score']:.3f}" for item in result)
            print(f"  {text!r}: {shown_result}")
