"""The model card (README.md) of a trained model, rendered from the template in ``templates/`` (package data) with
huggingface_hub's ``ModelCard``: Hub metadata (library, pipeline tag, datasets, metrics, evaluation results),
what the pooling does, the training settings, the evaluation table and code to load the model."""

from __future__ import annotations

import inspect
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from ..modeling.registry import MULTI_LABEL_LOSSES, POOLINGS
from ..thresholds import DEFAULT_THRESHOLD

__all__ = ["TEMPLATES_DIR", "DEFAULT_TEMPLATE", "METRIC_IDS", "CardFacts", "code_span", "render_model_card"]

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"  # package data: shipped in the wheel
DEFAULT_TEMPLATE = TEMPLATES_DIR / "pooled_classifier.md"

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


@dataclass
class CardFacts:
    """What the card reports about one run."""

    model_name: str  # the repository name, or the output folder's name
    repo_id: str  # what from_pretrained is given in the card's code (Hub id or local path)
    base_model: str
    base_model_on_hub: bool
    config: Any  # the trained model's PooledConfig
    head_class: type  # the class of the model's classification head (its docstring says what it does)
    data_description: str
    dataset_name: str | None  # a Hub dataset id, if the data came from the Hub
    dataset_config: str | None
    data_format: str  # "csv", "json", "parquet" or the Hub id, for the model-index
    split_sources: dict[
        str, str
    ]  # split -> the dataset name the model-index gives it (a file name, or the Hub id)
    splits: list[dict[str, Any]]  # {"name", "rows", "truncated"}
    max_seq_length: int
    training_settings: dict[str, Any]
    evaluation: dict[str, dict[str, float]] = field(default_factory=dict)  # split -> metric -> value
    example_text: str = "An example sentence to classify."
    # Multi-label only: how the decision threshold and the positive weights were chosen (phrases the card completes),
    # and validation metrics before and after tuning: metric -> (at 0.5, at the tuned threshold).
    threshold_origin: str | None = None
    pos_weight_origin: str | None = None
    threshold_comparison: dict[str, tuple[float, float]] = field(default_factory=dict)


LINE_BREAK = re.compile(r"\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # what str.splitlines() splits on
BACKTICKS = re.compile(r"`+")


def code_span(text: Any, table: bool = False) -> str:
    """``text`` as a Markdown code span that shows it as it is, for user text in the card (label names, settings).

    A backtick would end a span opened with one, so the span is fenced by one backtick more than the longest run
    inside, padded with spaces when the text starts or ends with a backtick or a space (CommonMark strips one space
    from each side). Line breaks, which would end a table row or start a new block, are shown escaped (``\\n``);
    train.py refuses labels holding them, but a config written by other code may have one. In a table cell (``table``)
    a ``|`` is escaped as ``\\|``, which GitHub-flavoured Markdown reads as a pipe even inside a code span."""
    text = LINE_BREAK.sub(lambda match: repr(match.group())[1:-1], str(text))
    if table:
        text = text.replace("|", "\\|")
    fence = "`" * (1 + max((len(run) for run in BACKTICKS.findall(text)), default=0))
    padding = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else ""
    return f"{fence}{padding}{text}{padding}{fence}"


def _summary(cls: type) -> str:
    """The first paragraph of a class's docstring, as Markdown."""
    first_paragraph = (inspect.getdoc(cls) or cls.__name__).split("\n\n")[0]
    return " ".join(first_paragraph.split()).replace("``", "`")


def _pooling_settings(config) -> dict[str, Any]:
    options = POOLINGS.lookup(config.pooling).options_for(config)
    # Long values (the label-token pooling's token ids of every label name) are left to config.json.
    return {
        name: value if len(repr(value)) <= 60 else "(see config.json)"
        for name, value in ((name, getattr(config, name)) for name in sorted(options))
    }


def _head_description(facts: CardFacts) -> str:
    config = facts.config
    details = [f"dropout {config.classifier_dropout}"]
    if config.classifier_dropout_samples > 1:
        details.append(
            f"multi-sample dropout: in training, the logits averaged over {config.classifier_dropout_samples} dropout "
            "samples"
        )
    if config.classifier_head == "dense":
        details += [f"width {config.classifier_hidden_size}", f"activation `{config.classifier_activation}`"]
    return f"{_summary(facts.head_class).rstrip('.')} ({', '.join(details)})"


def _loss_description(config) -> str:
    settings = [
        f"`{name}` {getattr(config, name)}"
        for name in MULTI_LABEL_LOSSES.lookup(config.multi_label_loss).options_for(config)
    ]
    return f"`{config.multi_label_loss}`" + (f" ({', '.join(settings)})" if settings else "")


def _comparison(facts: CardFacts) -> list[tuple[str, float | str, float | str]]:
    """``(metric, at 0.5, tuned)`` rows of the validation metrics a tuned run reports both ways."""
    return [
        (metric, _rounded(before), _rounded(after))
        for metric, (before, after) in facts.threshold_comparison.items()
    ]


def _decisions(facts: CardFacts) -> dict[str, Any] | None:
    """The card's multi-label section: loss, positive weights, decision threshold(s) and how they were chosen."""
    config = facts.config
    if config.problem_type != MULTI_LABEL:
        return None
    names = [config.id2label[index] for index in range(config.num_labels)]
    threshold = DEFAULT_THRESHOLD if config.decision_threshold is None else config.decision_threshold
    per_label = isinstance(threshold, list)
    columns = {}
    if per_label:
        columns["Threshold"] = threshold
    if config.pos_weight is not None:
        columns["Positive weight"] = config.pos_weight
    return {
        "loss": _loss_description(config),
        "pos_weight": facts.pos_weight_origin if config.pos_weight is not None else None,
        "threshold": "one per label (in the table below)"
        if per_label
        else f"**{_rounded(threshold)}** for every label",
        "origin": facts.threshold_origin or "",
        "comparison": _comparison(facts),
        "default_threshold": DEFAULT_THRESHOLD,
        "columns": list(columns),
        "rows": [
            [name, *(_rounded(values[index]) for values in columns.values())]
            for index, name in enumerate(names)
        ],
    }


def _rounded(value: float) -> float | str:
    return (
        "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 4)
    )


def _eval_results(facts: CardFacts) -> list[EvalResult]:
    task = "text-classification"
    results = []
    for split, metrics in facts.evaluation.items():
        for metric, value in metrics.items():
            if metric not in METRIC_IDS or value is None or math.isnan(value):
                continue
            metric_id, pretty, arguments = METRIC_IDS[metric]
            results.append(
                EvalResult(
                    task_type=task,
                    dataset_type=facts.dataset_name or facts.data_format,
                    dataset_name=facts.split_sources.get(split, facts.dataset_name or facts.data_format),
                    dataset_config=facts.dataset_config,
                    dataset_split=split,
                    metric_type=metric_id,
                    metric_name=f"{pretty} ({split})",
                    metric_value=_rounded(value),
                    metric_args=arguments,
                )
            )
    return results


def render_model_card(facts: CardFacts, template_path: str | Path = DEFAULT_TEMPLATE) -> ModelCard:
    config = facts.config
    metrics = sorted(
        {metric for split in facts.evaluation.values() for metric in split if metric in METRIC_IDS}
    )
    card_data = ModelCardData(
        library_name="transformers",
        pipeline_tag="text-classification",
        base_model=facts.base_model if facts.base_model_on_hub else None,
        datasets=[facts.dataset_name] if facts.dataset_name else None,
        metrics=sorted({METRIC_IDS[metric][0] for metric in metrics}) or None,
        tags=["pooled_models", f"pooling-{config.pooling}", config.problem_type.replace("_", "-")],
        model_name=facts.model_name,
        eval_results=_eval_results(facts) or None,
    )
    return ModelCard.from_template(
        card_data,
        template_path=str(template_path),
        model_title=facts.model_name,
        task_description=TASK_DESCRIPTIONS[config.problem_type],
        base_model=facts.base_model,
        pooling=config.pooling,
        pooling_description=_summary(POOLINGS.lookup(config.pooling)),
        pooling_settings=_pooling_settings(config),
        head=config.classifier_head,
        head_description=_head_description(facts),
        problem_type=config.problem_type,
        labels=[config.id2label[index] for index in range(config.num_labels)]
        if config.problem_type != REGRESSION
        else [],
        data_description=facts.data_description,
        splits=facts.splits,
        max_seq_length=facts.max_seq_length,
        training_settings=facts.training_settings,
        evaluation={
            split: {m: _rounded(v) for m, v in values.items()} for split, values in facts.evaluation.items()
        },
        evaluation_metrics=metrics,
        repo_id=facts.repo_id,
        repo_id_literal=json.dumps(facts.repo_id, ensure_ascii=False),  # a Python string: "C:\\Users" too
        example_text_literal=repr(facts.example_text),
        code=code_span,  # the template's user text (label names, settings) goes through code(text, table=...)
        decisions=_decisions(facts),
    )
