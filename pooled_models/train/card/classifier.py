"""``pooled_classifier.md``'s variables: the card of a run that publishes one sequence task's classifier (its pooling
and head, its labels, the multi-label decisions, its data, its settings, its evaluation by split, how to use it)."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCardData

from ...modeling.document_settings import DOCUMENT_FIELDS
from ...modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from ...modeling.registry import MULTI_LABEL_LOSSES, POOLINGS
from ...thresholds import DEFAULT_THRESHOLD
from ..zero_shot_eval import GENERALIZED, scores_any_labels
from .data import CardData, TaskCard
from .markdown import code_span, rounded

__all__ = ["METRIC_IDS", "classifier_variables"]

# Our metric names -> (Hub metric id, pretty name, arguments) for the card's model-index.
METRIC_IDS = {
    "accuracy": ("accuracy", "Accuracy", None),
    "f1_macro": ("f1", "F1 (macro)", {"average": "macro"}),
    "f1_micro": ("f1", "F1 (micro)", {"average": "micro"}),
    "exact_match": ("accuracy", "Exact-match accuracy", {"subset": True}),
    "mse": ("mse", "MSE", None),
    "pearson": ("pearsonr", "Pearson r", None),
    "spearman": ("spearmanr", "Spearman rho", None),
}


TASK_DESCRIPTIONS = {
    SINGLE_LABEL: "text classification",
    MULTI_LABEL: "multi-label text classification",
    REGRESSION: "text regression",
}


def classifier_variables(card: CardData) -> dict[str, Any]:
    """The template's variables, ``card_data`` (the Hub metadata) among them."""
    (task,) = card.tasks
    config = task.config
    evaluation = _evaluation_by_split(card)
    metrics = sorted({metric for split in evaluation.values() for metric in split})
    data = task.data
    return {
        "card_data": ModelCardData(
            library_name="transformers",
            pipeline_tag="text-classification",
            base_model=card.base_model if card.base_model_on_hub else None,
            datasets=[data.dataset_name] if _on_hub(data.dataset_name) else None,
            metrics=sorted({METRIC_IDS[metric][0] for metric in metrics}) or None,
            tags=["pooled_models", f"pooling-{config.pooling}", config.problem_type.replace("_", "-")],
            model_name=card.model_name,
            eval_results=_eval_results(task, evaluation) or None,
        ),
        "model_title": card.model_name,
        "task_description": TASK_DESCRIPTIONS[config.problem_type],
        "base_model": card.base_model,
        "pooling": config.pooling,
        "pooling_description": _summary(POOLINGS.lookup(config.pooling)),
        "pooling_settings": _pooling_settings(config),
        "head": _head_name(config),
        "head_description": _head_description(task),
        "problem_type": config.problem_type,
        "labels": task.labels,
        "data_description": _data_description(task),
        "splits": task.splits,
        "max_seq_length": task.max_seq_length,
        "training_settings": card.training_settings,
        "evaluation": {
            split: {m: rounded(v) for m, v in values.items()} for split, values in evaluation.items()
        },
        "evaluation_metrics": metrics,
        "repo_id": card.repo_id,
        "repo_id_literal": json.dumps(card.repo_id, ensure_ascii=False),  # a Python string: "C:\\Users" too
        "example_text_literal": repr(card.example_text),
        "decisions": _decisions(task),
        "zero_shot": _zero_shot(card.zero_shot),
        "any_labels": scores_any_labels(config),
    }


def _head_name(config) -> str:
    """The head as the card names it: a label-text model's scorer (its head; classifier_head is not read), else
    classifier_head."""
    if config.pooling == "label_text":
        return f"{config.label_text_scorer} scorer"
    return config.classifier_head


def _zero_shot(result) -> dict[str, Any] | None:
    """The card's zero-shot section: the file, its labels, and each model's scores (rounded)."""
    if result is None:
        return None
    rows = result.rows
    return {
        "file": rows.file_name,
        "rows": len(rows.texts),
        "labels": rows.labels,
        "unseen": rows.unseen,
        "scores": [
            (model, rounded(scores["accuracy"]), rounded(scores["f1_macro"]))
            for model, scores in result.scores.items()
        ],
        # The generalized setting (trained and unseen labels asked together), where the run scored it.
        "generalized": [
            (model, *(rounded(scores[metric]) for metric in GENERALIZED))
            for model, scores in result.scores.items()
            if all(metric in scores for metric in GENERALIZED)
        ],
        "seen_source": result.seen_source,
        "margin": rounded(result.margin) if result.margin else None,
    }


def _summary(cls: type) -> str:
    """The first paragraph of a class's docstring, as Markdown."""
    first_paragraph = (inspect.getdoc(cls) or cls.__name__).split("\n\n")[0]
    return " ".join(first_paragraph.split()).replace("``", "`")


def _on_hub(name: str | None) -> bool:
    # load_dataset also reads local dataset folders; only Hub ids belong in the card's metadata.
    return bool(name) and not Path(name).exists()


def _pooling_settings(config) -> dict[str, Any]:
    options = POOLINGS.lookup(config.pooling).options_for(config)
    # Long values (the label-token pooling's token ids of every label name) are left to config.json.
    settings = {
        name: value if len(repr(value)) <= 60 else "(see config.json)"
        for name, value in ((name, getattr(config, name)) for name in sorted(options))
    }
    return {**settings, **_document_settings(config)}


def _document_settings(config) -> dict[str, Any]:
    """Document mode's settings (the window, the stride, the cross-window pooling and its own), as rows of the
    pooling's table: how the model reads a text longer than a window. Empty outside document mode."""
    if not config.reads_documents:
        return {}
    return {name: getattr(config, name) for name in DOCUMENT_FIELDS if getattr(config, name) is not None}


def _head_description(task: TaskCard) -> str:
    config = task.config
    details = [f"dropout {config.classifier_dropout}"]
    if config.classifier_dropout_samples > 1:
        details.append(
            f"multi-sample dropout: in training, the logits averaged over {config.classifier_dropout_samples} dropout "
            "samples"
        )
    if config.classifier_head == "dense":
        details += [f"width {config.classifier_hidden_size}", f"activation `{config.classifier_activation}`"]
    return f"{_summary(task.head_class).rstrip('.')} ({', '.join(details)})"


def _loss_description(config) -> str:
    settings = [
        f"`{name}` {getattr(config, name)}"
        for name in MULTI_LABEL_LOSSES.lookup(config.multi_label_loss).options_for(config)
    ]
    return f"`{config.multi_label_loss}`" + (f" ({', '.join(settings)})" if settings else "")


def _decisions(task: TaskCard) -> dict[str, Any] | None:
    """The card's multi-label section: loss, positive weights, decision threshold(s) and how they were chosen."""
    config = task.config
    if config.problem_type != MULTI_LABEL:
        return None
    threshold = DEFAULT_THRESHOLD if config.decision_threshold is None else config.decision_threshold
    per_label = isinstance(threshold, list)
    columns = {}
    if per_label:
        columns["Threshold"] = threshold
    if config.pos_weight is not None:
        columns["Positive weight"] = config.pos_weight
    return {
        "loss": _loss_description(config),
        "pos_weight": task.pos_weight_origin if config.pos_weight is not None else None,
        "threshold": "one per label (in the table below)"
        if per_label
        else f"**{rounded(threshold)}** for every label",
        "origin": task.threshold_origin or "",
        "comparison": [
            (metric, rounded(before), rounded(after))
            for metric, (before, after) in task.threshold_comparison.items()
        ],
        "default_threshold": DEFAULT_THRESHOLD,
        "columns": list(columns),
        "rows": [
            [name, *(rounded(values[index]) for values in columns.values())]
            for index, name in enumerate(task.labels)
        ],
    }


def _data_description(task: TaskCard) -> str:
    # File and column names are the user's text: shown as code spans that no pipe or backtick in them can break.
    data = task.data
    if data.dataset_name:
        name = data.dataset_name
        config = f" (configuration {code_span(data.dataset_config_name)})" if data.dataset_config_name else ""
        where = (
            f"the Hub dataset [{code_span(name)}](https://huggingface.co/datasets/{name})"
            if _on_hub(name)
            else f"the dataset {code_span(name)}"
        )
        source = where + config
    else:
        source = "local files: " + ", ".join(
            f"{code_span(split['source'])} ({split['name']})" for split in task.splits
        )
    columns = f"text column {code_span(data.text_column)}"
    if data.text_pair_column:
        columns += f" paired with {code_span(data.text_pair_column)}"
    return f"From {source}; {columns}, labels from {code_span(data.label_column)}."


def _evaluation_by_split(card: CardData) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {}
    for prefix, split in (("eval_", "validation"), ("test_", "test")):
        values = {
            key.removeprefix(prefix): value
            for key, value in card.metrics.items()
            if key.startswith(prefix) and key.removeprefix(prefix) in METRIC_IDS
        }
        if values:
            table[split] = values
    return table


def _split_source(task: TaskCard, split: str) -> str | None:
    """What the model-index calls an evaluated split's dataset: the Hub id (with its configuration), or the file's
    name."""
    data = task.data
    if data.dataset_name:
        config = f" ({data.dataset_config_name})" if data.dataset_config_name else ""
        return data.dataset_name + config
    return next((row["source"] for row in task.splits if row["name"] == split), None)


def _data_format(data) -> str:
    if data.dataset_name:
        return data.dataset_name
    first = data.train_file or data.validation_file or data.test_file
    return {".jsonl": "json", ".tsv": "csv"}.get(Path(first).suffix, Path(first).suffix.lstrip("."))


def _eval_results(task: TaskCard, evaluation: dict[str, dict[str, float]]) -> list[EvalResult]:
    data = task.data
    hub_name = data.dataset_name if _on_hub(data.dataset_name) else None
    data_format = _data_format(data)
    results = []
    for split, metrics in evaluation.items():
        for metric, value in metrics.items():
            if value is None or math.isnan(value):
                continue
            metric_id, pretty, arguments = METRIC_IDS[metric]
            results.append(
                EvalResult(
                    task_type="text-classification",
                    dataset_type=hub_name or data_format,
                    dataset_name=_split_source(task, split) or hub_name or data_format,
                    dataset_config=data.dataset_config_name,
                    dataset_split=split,
                    metric_type=metric_id,
                    metric_name=f"{pretty} ({split})",
                    metric_value=rounded(value),
                    metric_args=arguments,
                )
            )
    return results
