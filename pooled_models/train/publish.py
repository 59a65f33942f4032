"""What a finished run writes besides the model: predictions in input order, all_results.json, the model card
(rendered from the templates with the run's facts: one builder of training-settings rows for every kind of run), the
push of the finished folder, and the summary printed at the end."""

from __future__ import annotations

import inspect
import json
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..modeling.configuration_multitask import TOKEN
from ..modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from ..modeling.registry import MULTI_LABEL_LOSSES, POOLINGS
from ..thresholds import DEFAULT_THRESHOLD, predict_label_sets
from .console import shown_metrics
from .data.sequence import Labels, Split, text_columns
from .data.token import OUTSIDE, word_predictions
from .evaluation import (
    MEAN_SCORE,
    ThresholdPlan,
    at_default_name,
    logits_of,
    main_metric,
    probabilities,
    uses_entity_tags,
)
from .options import TRAINING_OPTIONS

__all__ = [
    "TEMPLATES_DIR",
    "DEFAULT_TEMPLATE",
    "METRIC_IDS",
    "CardFacts",
    "code_span",
    "render_model_card",
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
    "TASK_TEMPLATE",
    "predictions_file",
    "write_task_predictions",
    "write_task_card",
    "entities_of",
    "task_examples",
    "print_task_summary",
]


def _model_cards_dir() -> Path:
    """The card templates: the repository's top-level model_cards/ folder, which the wheel ships as
    pooled_models/model_cards (setup.py maps it), so a pip-installed pooled-train finds them too."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "model_cards"
    return installed if installed.is_dir() else package.parent / "model_cards"


TEMPLATES_DIR = _model_cards_dir()


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
        training_settings=training_settings(training_args, problem_type=labels.problem_type),
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


def training_settings(args, problem_type: str | None = None, task_sampling: bool = False) -> dict[str, Any]:
    """The card's "Training settings" rows, written once for every kind of run: a sequence run (``problem_type``
    given) names its problem type, gradient accumulation, scheduler and early stopping; a run of tasks names its
    heads' rate and, with several tasks, its task sampling."""
    sequence = problem_type is not None
    settings: dict[str, Any] = {"problem type": problem_type} if sequence else {}
    if not args.do_train:
        return settings
    if task_sampling:
        settings["task sampling"] = args.task_sampling + (
            f" (alpha {args.sampling_alpha})" if args.task_sampling == "temperature" else ""
        )
    settings.update(
        {
            "learning rate (backbone)": args.learning_rate,
            f"learning rate ({'pooler and head' if sequence else 'heads'})": args.head_learning_rate
            or args.learning_rate,
            "backbone frozen": args.freeze_backbone,
            "epochs": args.num_train_epochs if args.max_steps <= 0 else f"{args.max_steps} steps",
            "batch size per device": args.per_device_train_batch_size,
            "devices": args.world_size,
        }
    )
    if sequence:
        settings["gradient accumulation steps"] = args.gradient_accumulation_steps
    settings.update({"warmup": args.warmup_steps, "weight decay": args.weight_decay})
    if sequence:
        settings["scheduler"] = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    settings["seed"] = args.seed
    settings.update(chosen_training_options(args))
    if args.load_best_model_at_end:
        settings["best model by"] = args.metric_for_best_model
    if sequence and args.early_stopping_patience:
        settings["early stopping patience"] = args.early_stopping_patience
    return settings


def chosen_training_options(args) -> dict[str, Any]:
    """The training options a run turned on (off by default), as the model card names them."""
    options: dict[str, Any] = {}
    for option in TRAINING_OPTIONS.values():
        options.update(option.card_row(args))
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
    """How training went, the evaluation and test scores (not the timings), then where the model is: the start of
    every run's summary."""
    shown = shown_metrics(metrics)
    print()
    if "train_runtime" in metrics:
        print(
            f"Trained {metrics.get('epoch', 0):g} epochs on {metrics.get('train_rows', 0)} rows in "
            f"{metrics['train_runtime']:.0f} s; final training loss {metrics.get('train_loss', float('nan')):.4g}"
        )
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
    print_usage(
        [
            "from transformers import pipeline",
            f'classify = pipeline("text-classification", model={model_literal(output_dir)})',
            'print(classify("Your text here"))',
        ]
    )


def model_literal(output_dir: Path) -> str:
    """The saved model's folder as the user would type it: relative when under the current folder."""
    try:
        shown = output_dir.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        shown = output_dir
    return json.dumps(str(shown), ensure_ascii=False)


def print_usage(code: list[str]) -> None:
    """The last lines of a run's summary: how to use the saved model."""
    print("Use it:")
    for line in ["import pooled_models  # registers the pooled model types with transformers", *code]:
        print(f"  {line}")


TASK_TEMPLATE = TEMPLATES_DIR / "pooled_tasks.md"


TASK_METRICS = (
    "accuracy",
    "f1",
    "precision",
    "recall",
    "f1_macro",
    "f1_micro",
    "exact_match",
    "mse",
    "pearson",
    "spearman",
    "loss",
)


def predictions_file(task: str, single: bool) -> str:
    return PREDICTIONS_FILE if single else f"predictions_{task}.jsonl"


def write_task_predictions(
    folder: Path, name: str, task, predictions, model, tokenizer, single: bool
) -> None:
    """One JSON object per test row: for a sequence task as a single run writes them, for a token task the words,
    their tags if known and the predicted tag of each word (its first sub-token's)."""
    path = folder / predictions_file(name, single)
    split = task.splits["test"]
    logits = logits_of(predictions)
    if task.kind != TOKEN:
        write_predictions(path, split, logits, task.labels, task.spec.data, model.task_configs[name])
        return
    words_column, tags_column = task.columns
    predicted = np.asarray(logits).argmax(axis=-1)
    with open(path, "w", encoding="utf-8") as handle:
        for index in range(len(split.dataset)):
            row = split.dataset[index]
            record = {"words": row[words_column]}
            if split.labelled:
                record["tags"] = row[tags_column]
            record["prediction"] = word_predictions(
                tokenizer, row[words_column], predicted[index], task.labels.names, task.max_length
            )
            handle.write(json.dumps(json_safe(record), ensure_ascii=False) + "\n")


def _head(config, kind: str) -> str:
    head = f"`{config.classifier_head}` head"
    return head + (" on every token" if kind == TOKEN else f", `{config.pooling}` pooling")


def _task_rows(model, tasks: dict[str, Any], single: bool) -> list[dict[str, Any]]:
    rows = []
    for name, task in tasks.items():
        config = model.task_configs[name]
        problem_type = "token classification" if task.kind == TOKEN else config.problem_type
        names = (
            []
            if config.problem_type == REGRESSION
            else [config.id2label[index] for index in range(config.num_labels)]
        )
        threshold = config.decision_threshold if config.problem_type == MULTI_LABEL else None
        rows.append(
            {
                "name": name,
                "kind": task.kind,
                "head": _head(config, task.kind),
                "label_count": len(names) or "one number",
                "labels": names,
                "problem_type": problem_type,
                "loss_weight": task.spec.loss_weight,
                "head_learning_rate": task.spec.head_learning_rate
                if task.spec.head_learning_rate is not None
                else "the run's",
                "start_epoch": task.spec.start_epoch,
                "freeze_head": task.spec.freeze_head,
                "threshold": json.dumps(threshold) if threshold is not None else None,
                "loss": config.multi_label_loss,
            }
        )
    return rows


def _data_rows(tasks: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name, task in tasks.items():
        files = task.spec.data.files()
        for split in task.splits.values():
            source = task.spec.data.dataset_name or Path(files[split.name]).name
            rows.append(
                {
                    "task": name,
                    "split": split.name,
                    "source": source,
                    "rows": len(split.encoded),
                    "truncated": split.truncated,
                }
            )
    return rows


def _evaluation(metrics: dict[str, float], tasks: dict[str, Any], single: bool) -> list[dict[str, Any]]:
    rows = []
    for prefix, split in (("eval", "validation"), ("test", "test")):
        for name in tasks:
            task_prefix = prefix if single else f"{prefix}_{name}"
            for metric in TASK_METRICS:
                value = metrics.get(f"{task_prefix}_{metric}")
                if value is not None and metric != "loss":
                    rows.append({"task": name, "split": split, "metric": metric, "value": _rounded(value)})
        mean = metrics.get(f"{prefix}_{MEAN_SCORE}")
        if mean is not None and not single:
            rows.append({"task": "(all)", "split": split, "metric": MEAN_SCORE, "value": _rounded(mean)})
    return rows


def _usage(repo: str, single: bool, tasks: dict[str, Any], example: str) -> str:
    literal = json.dumps(repo, ensure_ascii=False)
    if single:
        return (
            "With `pooled_models` installed, the Auto classes and `pipeline` know this model:\n\n```python\n"
            "import pooled_models  # registers the pooled model types with transformers\n"
            "from transformers import pipeline\n\n"
            f'ner = pipeline("token-classification", model={literal}, aggregation_strategy="simple")\n'
            f"print(ner({example!r}))\n```\n\n"
            "Without the package, the model's code ships with it (`modeling_token.py` and the files it imports); read "
            "it, then allow it to run:\n\n```python\nfrom transformers import pipeline\n\n"
            f'ner = pipeline("token-classification", model={literal}, trust_remote_code=True, '
            'aggregation_strategy="simple")\n```'
        )
    first_token = next((name for name, task in tasks.items() if task.kind == TOKEN), None)
    first = next(iter(tasks))
    lines = [
        "```python",
        "from pooled_models import PooledForMultiTask",
        "from transformers import AutoTokenizer",
        "",
        f"model = PooledForMultiTask.from_pretrained({literal})",
        f"tokenizer = AutoTokenizer.from_pretrained({literal})",
        f'out = model(**tokenizer([{example!r}], return_tensors="pt"))  # every head: '
        + ", ".join(f'out["{name}"].logits' for name in tasks),
        "",
        "# one head as a standalone model, for pipeline(...)",
        f'model.export_head("{first_token or first}", "{first_token or first}_only")',
        "```",
        "",
        "Without the package, the model's code ships with it (`modeling_multitask.py` and the files it imports); read "
        f"it, then allow it to run: `AutoModel.from_pretrained({literal}, trust_remote_code=True)`.",
    ]
    return "\n".join(lines)


def _task_eval_results(rows: list[dict[str, Any]], single: bool) -> list[EvalResult]:
    results = []
    for row in rows:
        if row["task"] == "(all)" or isinstance(row["value"], str):
            continue
        results.append(
            EvalResult(
                task_type="token-classification" if single else "text-classification",
                dataset_type=row["task"],
                dataset_name=row["task"],
                dataset_split=row["split"],
                metric_type=row["metric"],
                metric_name=f"{row['task']} {row['metric']} ({row['split']})",
                metric_value=row["value"],
            )
        )
    return results


def write_task_card(
    folder: Path,
    final_dir: Path,
    model,
    training_args,
    base_model: str,
    tasks: dict[str, Any],
    metrics: dict[str, float],
    single: bool,
    pushed: bool,
    example_text: str | None = None,
) -> None:
    name = training_args.hub_model_id or final_dir.name
    repo = name if pushed else str(final_dir)
    evaluation = _evaluation(metrics, tasks, single)
    task_rows = _task_rows(model, tasks, single)
    if example_text is None:
        first = next(iter(tasks.values()))
        column = first.columns[0] if first.kind == TOKEN else first.spec.data.text_column
        value = next(iter(first.splits.values())).dataset[0][column]
        example_text = " ".join(value) if isinstance(value, list) else value
    if single:
        summary = (
            f"A token-classification model (NER, tagging): **{base_model}** with a head over every token, fine-tuned "
            "with the `train.py` of `pooled_models`. Each word is tagged by its first sub-token."
        )
    else:
        summary = (
            f"A multi-task model: one **{base_model}** backbone shared by {len(tasks)} heads ("
            + ", ".join(f"`{row['name']}`: {row['kind']}" for row in task_rows)
            + "), fine-tuned together with the `train.py` of `pooled_models`. Every batch held one task's rows."
        )
    token_tasks = [task for task in tasks.values() if task.kind == TOKEN]
    alignment = ""
    if token_tasks:
        every = [task.spec.name for task in token_tasks if task.spec.data.label_all_subtokens]
        alignment = (
            "Token tasks: each word's tag is learned on its first sub-token"
            + (f" (on every sub-token for {', '.join(every)})" if every else "")
            + "; special tokens carry no label."
        )
    notes = []
    if any(task.kind == TOKEN and uses_entity_tags(task.labels.names) for task in token_tasks):
        notes.append(
            "Token tasks with entity tags: precision, recall and F1 of whole entities (seqeval, as conlleval)."
        )
    if not single:
        notes.append(
            f"`{MEAN_SCORE}`: the mean of each task's main metric ("
            + ", ".join(
                f"{row['name']}: {main_metric(row['kind'], model.task_configs[row['name']].problem_type, row['labels'])}"
                for row in task_rows
            )
            + ")."
        )
    card_data = ModelCardData(
        library_name="transformers",
        pipeline_tag="token-classification" if single else None,
        base_model=base_model if not Path(base_model).exists() else None,
        tags=["pooled_models", "token-classification" if single else "multi-task"],
        model_name=name.split("/")[-1],
        eval_results=_task_eval_results(evaluation, single) or None,
    )
    card = ModelCard.from_template(
        card_data,
        template_path=str(TASK_TEMPLATE),
        model_title=name.split("/")[-1],
        summary=summary,
        single=single,
        tasks=task_rows,
        data_rows=_data_rows(tasks),
        token_alignment=alignment,
        training_settings=training_settings(training_args, task_sampling=not single),
        evaluation=evaluation,
        metric_notes=" ".join(notes),
        usage=_usage(repo, single, tasks, example_text),
        code=code_span,
    )
    card.save(folder / "README.md")


def entities_of(text: str, tokenizer, token_logits, id2label: dict[int, str]) -> list[tuple[str, str, float]]:
    """``(type, text, score)`` of the entities in ``text``: each word tagged by its first sub-token, ``B-X`` (or an
    ``I-X`` after another type) opening an entity that ``I-X`` continues, the score the mean of its words'."""
    encoding = tokenizer(text, return_offsets_mapping=True, truncation=True)
    scores = np.exp(token_logits - token_logits.max(axis=-1, keepdims=True))
    scores = scores / scores.sum(axis=-1, keepdims=True)
    words: dict[int, list[int]] = {}
    for position, word in enumerate(encoding.word_ids()):
        if word is not None:
            words.setdefault(word, []).append(position)
    entities: list[list[Any]] = []  # [type, start, end, scores]
    for positions in words.values():
        first = positions[0]
        label = id2label[int(scores[first].argmax())]
        start, end = encoding["offset_mapping"][first][0], encoding["offset_mapping"][positions[-1]][1]
        kind = label[2:] if label[:2] in ("B-", "I-") else None
        if kind is None or label == OUTSIDE:
            continue
        if label.startswith("I-") and entities and entities[-1][0] == kind and entities[-1][4] == "open":
            entities[-1][2] = end
            entities[-1][3].append(float(scores[first].max()))
            continue
        if entities:
            entities[-1][4] = "closed"
        entities.append([kind, start, end, [float(scores[first].max())], "open"])
        continue
    return [(kind, text[start:end], float(np.mean(values))) for kind, start, end, values, _ in entities]


def _described(config, kind: str, logits, text: str, tokenizer) -> str:
    if kind == TOKEN:
        found = entities_of(text, tokenizer, logits, config.id2label)
        return ", ".join(f"{entity} {span!r}" for entity, span, _ in found) or "(none)"
    if config.problem_type == REGRESSION:
        return f"{float(logits[0]):.3f}"
    scores = probabilities(logits[None, :], config.problem_type)[0]
    if config.problem_type == SINGLE_LABEL:
        best = int(scores.argmax())
        return f"{config.id2label[best]} {scores[best]:.3f}"
    labels = predict_label_sets(scores[None, :], config, from_logits=False)[0]
    return ", ".join(labels) or "(none)"


def task_examples(output_dir: Path, texts: list[str], single: bool) -> list[tuple[str, dict[str, str]]]:
    """The saved model's answers, loaded as a user would: ``(text, {task: answer})``."""
    import torch
    from transformers import AutoTokenizer, pipeline

    if single:
        ner = pipeline("token-classification", model=str(output_dir), aggregation_strategy="simple")
        return [
            (
                text,
                {"entities": ", ".join(f"{g['entity_group']} {g['word']!r}" for g in ner(text)) or "(none)"},
            )
            for text in texts
        ]
    from ..modeling.modeling_multitask import PooledForMultiTask

    model = PooledForMultiTask.from_pretrained(output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    answers = []
    for text in texts:
        with torch.no_grad():
            out = model(**tokenizer([text], return_tensors="pt", truncation=True))
        answers.append(
            (
                text,
                {
                    name: _described(
                        model.task_configs[name],
                        model.config.kind(name),
                        output.logits[0].float().numpy(),
                        text,
                        tokenizer,
                    )
                    for name, output in out.items()
                },
            )
        )
    return answers


def print_task_summary(
    output_dir: Path, metrics: dict[str, float], examples, kinds: dict[str, str], single: bool
) -> None:
    """The summary of a token or multi-task run; ``kinds`` is task name -> kind."""
    print_evaluation(output_dir, metrics, width=32)  # task names make the metric names longer
    if examples:
        print("The saved model's answers:")
        for text, answers in examples:
            print(f"  {text!r}")
            for task, answer in answers.items():
                print(f"      {task}: {answer}")
    model = model_literal(output_dir)
    if single:
        print_usage(
            [
                "from transformers import pipeline",
                f'ner = pipeline("token-classification", model={model}, aggregation_strategy="simple")',
                'print(ner("Your text here"))',
            ]
        )
        return
    first = next((name for name, kind in kinds.items() if kind == TOKEN), next(iter(kinds)))
    print_usage(
        [
            f"model = pooled_models.PooledForMultiTask.from_pretrained({model})  # model(**inputs)[task].logits",
            f'model.export_head("{first}", "{first}_only")  # one task as a model that pipeline() loads',
        ]
    )
