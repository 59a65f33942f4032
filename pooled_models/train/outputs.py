"""What a finished train.py run writes and shows: predictions, results, the model card, the Hub upload, the
pipeline's answers for a few texts and the closing summary."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from ..modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from ..thresholds import predict_label_sets
from .data import Split, text_columns
from .label_space import Labels
from .metrics import probabilities
from .model_card import METRIC_IDS, CardFacts, code_span, render_model_card
from .threshold_tuning import ThresholdPlan, at_default_name

__all__ = [
    "PREDICTIONS_FILE",
    "json_safe",
    "RESULTS_FILE",
    "write_predictions",
    "write_results",
    "write_model_card",
    "push_folder",
    "classify_examples",
    "print_evaluation",
    "print_summary",
]

logger = logging.getLogger(__name__)

PREDICTIONS_FILE = "predictions.jsonl"
RESULTS_FILE = "all_results.json"

# Where a multi-label model's pos_weight came from (run._pos_weight_source), as the model card says it.
POS_WEIGHT_ORIGINS = {
    "computed": "negatives / positives per label, counted in the training split",
    "given": "set with `--pos_weight`",
    "saved": "kept from the model this run started from",
}


def write_predictions(path: Path, split: Split, logits, labels: Labels, data_args, config) -> None:
    """One JSON object per test row: its text(s), its label if known, the prediction and the scores by label name.

    Multi-label predictions are the labels at or above the model's ``decision_threshold``, as ``predict_label_sets``
    gives them to users of the saved model."""
    scores = probabilities(logits, labels.problem_type)
    label_sets = (
        predict_label_sets(scores, config, from_logits=False) if config.problem_type == MULTI_LABEL else None
    )
    rows = split.dataset
    with open(path, "w", encoding="utf-8") as handle:
        for index in range(len(rows)):
            row = rows[index]
            record = {column: row[column] for column in text_columns(data_args)}
            if split.labelled:
                record["label"] = json_safe(row[data_args.label_column])
            if labels.problem_type == REGRESSION:
                record["prediction"] = float(scores[index])
            else:
                by_name = dict(
                    zip(labels.names, (round(float(score), 6) for score in scores[index]), strict=True)
                )
                if labels.problem_type == SINGLE_LABEL:
                    record["prediction"] = labels.names[int(scores[index].argmax())]
                else:
                    record["prediction"] = label_sets[index]
                record["scores"] = by_name
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def json_safe(value: Any) -> Any:
    """NaN and infinities (an undefined correlation, a missing float label) become null: JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def write_results(folder: Path, metrics: dict[str, float], training_args) -> None:
    (folder / RESULTS_FILE).write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    # The arguments as JSON (tokens masked); Trainer's own training_args.bin is a pickle and is not published.
    (folder / "training_args.json").write_text(training_args.to_json_string() + "\n")


# ----------------------------------------------------------------------------------------------------
# Model card
# ----------------------------------------------------------------------------------------------------


def write_model_card(
    folder: Path,
    final_dir: Path,
    model,
    training_args,
    base_model: str,
    data_args,
    splits: dict[str, Split],
    labels: Labels,
    max_length: int,
    metrics: dict[str, float],
    pushed: bool,
    threshold_plan: ThresholdPlan | None = None,
    pos_weight_source: str | None = None,
) -> None:
    name = training_args.hub_model_id or final_dir.name
    validation = splits.get("validation")
    facts = CardFacts(
        model_name=name.split("/")[-1],
        repo_id=name if pushed else str(final_dir),
        base_model=base_model,
        base_model_on_hub=not Path(base_model).exists(),
        config=model.config,
        head_class=type(model.classifier.head),  # the head itself: model.classifier also holds the pooler
        data_description=_data_description(data_args, splits),
        dataset_name=data_args.dataset_name if _on_hub(data_args.dataset_name) else None,
        dataset_config=data_args.dataset_config_name,
        data_format=_data_format(data_args),
        split_sources=_split_sources(data_args, splits),
        splits=[
            {"name": split.name, "rows": len(split.encoded), "truncated": split.truncated}
            for split in splits.values()
        ],
        max_seq_length=max_length,
        training_settings=_training_settings(training_args, labels),
        evaluation=_evaluation_by_split(metrics),
        example_text=(
            data_args.example_texts or [next(iter(splits.values())).dataset[0][data_args.text_column]]
        )[0],
        threshold_origin=threshold_plan.describe(len(validation.encoded) if validation else None)
        if threshold_plan
        else None,
        pos_weight_origin=POS_WEIGHT_ORIGINS.get(pos_weight_source),
        threshold_comparison=_threshold_comparison(metrics)
        if threshold_plan and threshold_plan.tunes
        else {},
    )
    render_model_card(facts).save(folder / "README.md")


def _data_description(data_args, splits: dict[str, Split]) -> str:
    # File and column names are the user's text: shown as code spans that no pipe or backtick in them can break.
    if data_args.dataset_name:
        name = data_args.dataset_name
        config = (
            f" (configuration {code_span(data_args.dataset_config_name)})"
            if data_args.dataset_config_name
            else ""
        )
        where = (
            f"the Hub dataset [{code_span(name)}](https://huggingface.co/datasets/{name})"
            if _on_hub(name)
            else f"the dataset {code_span(name)}"
        )
        source = where + config
    else:
        files = data_args.files()
        source = "local files: " + ", ".join(
            f"{code_span(Path(files[name]).name)} ({name})" for name in splits
        )
    columns = f"text column {code_span(data_args.text_column)}"
    if data_args.text_pair_column:
        columns += f" paired with {code_span(data_args.text_pair_column)}"
    return f"From {source}; {columns}, labels from {code_span(data_args.label_column)}."


def _on_hub(name: str | None) -> bool:
    # load_dataset also reads local dataset folders; only Hub ids belong in the card's metadata.
    return bool(name) and not Path(name).exists()


def _split_sources(data_args, splits: dict[str, Split]) -> dict[str, str]:
    """What the model-index calls each evaluated split's dataset: the Hub id, or the file's name."""
    if data_args.dataset_name:
        config = f" ({data_args.dataset_config_name})" if data_args.dataset_config_name else ""
        return {name: data_args.dataset_name + config for name in splits}
    files = data_args.files()
    return {name: Path(files[name]).name for name in splits}


def _data_format(data_args) -> str:
    if data_args.dataset_name:
        return data_args.dataset_name
    first = data_args.train_file or data_args.validation_file or data_args.test_file
    return {".jsonl": "json", ".tsv": "csv"}.get(Path(first).suffix, Path(first).suffix.lstrip("."))


def _training_settings(args, labels: Labels) -> dict[str, Any]:
    settings: dict[str, Any] = {"problem type": labels.problem_type}
    if args.do_train:
        settings.update(
            {
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
            }
        )
        settings.update(chosen_training_options(args))
        if args.load_best_model_at_end:
            settings["best model by"] = args.metric_for_best_model
        if args.early_stopping_patience:
            settings["early stopping patience"] = args.early_stopping_patience
    return settings


def chosen_training_options(args) -> dict[str, Any]:
    """The training options a run turned on (off by default), as the model card names them."""
    options: dict[str, Any] = {}
    if getattr(args, "layerwise_lr_decay", 1.0) != 1.0:
        options["layer-wise learning-rate decay"] = args.layerwise_lr_decay
    if getattr(args, "label_smoothing_factor", 0.0):
        options["label smoothing"] = args.label_smoothing_factor
    if getattr(args, "label_embedding_learning_rate", None) is not None:
        options["learning rate (label embeddings)"] = args.label_embedding_learning_rate
    if getattr(args, "label_embedding_weight_decay", None) is not None:
        options["weight decay (label embeddings)"] = args.label_embedding_weight_decay
    return options


def _threshold_comparison(metrics: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Validation metric -> (at 0.5, at the tuned threshold), for the metrics a tuned run reports both ways."""
    return {
        metric: (metrics[at_default_name(metric)], metrics[f"eval_{metric}"])
        for metric in ("f1_micro", "f1_macro", "exact_match")
        if at_default_name(metric) in metrics and f"eval_{metric}" in metrics
    }


def _evaluation_by_split(metrics: dict[str, float]) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {}
    for prefix, split in (("eval_", "validation"), ("test_", "test")):
        values = {
            key.removeprefix(prefix): value
            for key, value in metrics.items()
            if key.startswith(prefix) and key.removeprefix(prefix) in METRIC_IDS
        }
        if values:
            table[split] = values
    return table


# ----------------------------------------------------------------------------------------------------
# After publishing
# ----------------------------------------------------------------------------------------------------


def push_folder(output_dir: Path, training_args) -> str:
    """Upload the finished folder (model, tokenizer, card, results, predictions) to the Hub; returns the repo id."""
    import huggingface_hub

    api = huggingface_hub.HfApi(token=training_args.hub_token)
    repo = api.create_repo(
        training_args.hub_model_id or output_dir.name, private=training_args.hub_private_repo, exist_ok=True
    )
    api.upload_folder(
        repo_id=repo.repo_id,
        folder_path=str(output_dir),
        commit_message="Upload model trained with pooled_models",
        ignore_patterns=["checkpoint-*"],
    )
    logger.info("Pushed %s to https://huggingface.co/%s", output_dir, repo.repo_id)
    return repo.repo_id


def classify_examples(output_dir: Path, texts: list[str]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The saved model's answers through ``pipeline`` (as a user would load it): ``(text, [{label, score}, ...])``."""
    from transformers import AutoConfig, pipeline

    config = AutoConfig.from_pretrained(output_dir)
    top_k = None if config.problem_type == MULTI_LABEL else 1
    classify = pipeline("text-classification", model=str(output_dir), tokenizer=str(output_dir), top_k=top_k)
    results = classify(list(texts))
    return [
        (text, result if isinstance(result, list) else [result])
        for text, result in zip(texts, results, strict=True)
    ]


def print_evaluation(output_dir: Path, metrics: dict[str, float], width: int = 28) -> None:
    """The evaluation and test scores (not the timings), then where the model is: the start of every run's summary."""
    shown = {
        key: value
        for key, value in metrics.items()
        if key.startswith(("eval_", "test_")) and not key.endswith(("runtime", "per_second"))
    }
    print()
    if shown:
        print("Evaluation:")
        for key, value in sorted(shown.items()):
            print(
                f"  {key:<{width}} {value:.4f}" if isinstance(value, float) else f"  {key:<{width}} {value}"
            )
    print(f"Saved to: {output_dir}")


def print_summary(output_dir: Path, metrics: dict[str, float], examples) -> None:
    print_evaluation(output_dir, metrics)
    if examples:
        print("The saved model, loaded with pipeline():")
        for text, result in examples:
            print(f"  {text!r}: " + ", ".join(f"{item['label']} {item['score']:.3f}" for item in result))
