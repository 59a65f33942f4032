"""What a finished run writes besides its model and card: each task's predictions on its test split, in input order
(``predictions.jsonl``, or ``predictions_<task>.jsonl`` for a task among several), ``all_results.json`` with
``training_args.json``; and the saved model's answers for the example texts, loaded as a user would load it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..modeling.configuration_multitask import TOKEN
from ..modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from ..thresholds import predict_label_sets
from .data.sequence import kept_columns, text_columns
from .data.token import entities_of, word_predictions
from .evaluation import logits_of, probabilities

__all__ = [
    "PREDICTIONS_FILE",
    "RESULTS_FILE",
    "predictions_file",
    "write_predictions",
    "json_safe",
    "write_results",
    "example_answers",
]

PREDICTIONS_FILE = "predictions.jsonl"


RESULTS_FILE = "all_results.json"


def predictions_file(task: str, single: bool) -> str:
    return PREDICTIONS_FILE if single else f"predictions_{task}.jsonl"


def write_predictions(path: Path, task, predictions, config, tokenizer) -> None:
    """One JSON object per test row of ``task`` (a TaskData), in input order: a sequence task's kept columns
    (``keep_columns``, else ``id``), text(s), label if known, prediction and scores by label name; a token task's words, tags if known and the predicted tag of each word
    (its first sub-token's). ``config`` is the task's head config: multi-label predictions are the labels at or above
    its ``decision_threshold``, as ``predict_label_sets`` gives them to users of the saved model."""
    split = task.splits["test"]
    logits = logits_of(predictions)
    records = (
        _token_records(task, split, logits, tokenizer)
        if task.kind == TOKEN
        else _sequence_records(task, split, logits, config)
    )
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(json_safe(record), ensure_ascii=False) + "\n")


def _sequence_records(task, split, logits, config):
    labels, data = task.labels, task.spec.data
    scores = probabilities(logits, labels.problem_type)
    label_sets = (
        predict_label_sets(scores, config, from_logits=False) if labels.problem_type == MULTI_LABEL else None
    )
    rows = split.dataset
    columns = kept_columns(data, rows.column_names) + text_columns(
        data
    )  # the row's key first (an id), to join on
    for index in range(len(rows)):
        row = rows[index]
        record = {column: row[column] for column in columns}
        if split.labelled:
            record["label"] = row[data.label_column]
        if labels.problem_type == REGRESSION:
            record["prediction"] = float(scores[index])
        else:
            if labels.problem_type == SINGLE_LABEL:
                record["prediction"] = labels.names[int(scores[index].argmax())]
            else:
                record["prediction"] = label_sets[index]
            record["scores"] = dict(
                zip(labels.names, (round(float(score), 6) for score in scores[index]), strict=True)
            )
        yield record


def _token_records(task, split, logits, tokenizer):
    words_column, tags_column = task.columns
    predicted = np.asarray(logits).argmax(axis=-1)
    for index in range(len(split.dataset)):
        row = split.dataset[index]
        record = {"words": row[words_column]}
        if split.labelled:
            record["tags"] = row[tags_column]
        record["prediction"] = word_predictions(
            tokenizer, row[words_column], predicted[index], task.labels.names, task.max_length
        )
        yield record


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


Answers = list[tuple[str, dict[str, list[dict[str, Any]]]]]


def example_answers(output_dir: Path, texts: list[str], kinds: dict[str, str], single: bool) -> Answers:
    """The saved model's answers, ``[(text, {task: answers})]``, loaded as a user would load it: ``pipeline()`` for
    the model of one task (``single``), ``PooledForMultiTask`` for a multi-task model (``kinds``: task -> kind). A
    sequence task's answers are
    ``{"label", "score"}`` (the best label; each predicted label of a multi-label task), a regression's ``{"score"}``,
    a token task's entities ``{"entity_group", "word", "score"}``."""
    if single:
        ((task, kind),) = kinds.items()
        return [
            (text, {task: answer})
            for text, answer in zip(texts, _pipeline_answers(output_dir, texts, kind), strict=True)
        ]
    return _multitask_answers(output_dir, texts)


def _pipeline_answers(output_dir: Path, texts: list[str], kind: str) -> list[list[dict[str, Any]]]:
    from transformers import AutoConfig, pipeline

    if kind == TOKEN:
        ner = pipeline("token-classification", model=str(output_dir), aggregation_strategy="simple")
        return [
            [
                {"entity_group": group["entity_group"], "word": group["word"], "score": float(group["score"])}
                for group in ner(text)
            ]
            for text in texts
        ]
    config = AutoConfig.from_pretrained(output_dir)
    top_k = None if config.problem_type == MULTI_LABEL else 1
    classify = pipeline("text-classification", model=str(output_dir), tokenizer=str(output_dir), top_k=top_k)
    results = classify(list(texts))
    return [result if isinstance(result, list) else [result] for result in results]


def _multitask_answers(output_dir: Path, texts: list[str]) -> Answers:
    import torch
    from transformers import AutoTokenizer

    from ..modeling.modeling_multitask import PooledForMultiTask

    model = PooledForMultiTask.from_pretrained(output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    answers = []
    for text in texts:
        with torch.no_grad():
            out = model(**tokenizer([text], return_tensors="pt", truncation=True))
        logits = {name: output.logits[0].float().numpy() for name, output in out.items()}
        answers.append(
            (
                text,
                {
                    name: _answers(
                        model.task_configs[name], model.config.kind(name), logits[name], text, tokenizer
                    )
                    for name in out
                },
            )
        )
    return answers


def _answers(config, kind: str, logits, text: str, tokenizer) -> list[dict[str, Any]]:
    if kind == TOKEN:
        return [
            {"entity_group": entity, "word": span, "score": score}
            for entity, span, score in entities_of(text, tokenizer, logits, config.id2label)
        ]
    if config.problem_type == REGRESSION:
        return [{"score": float(logits[0])}]
    scores = probabilities(logits[None, :], config.problem_type)[0]
    if config.problem_type == SINGLE_LABEL:
        best = int(scores.argmax())
        return [{"label": config.id2label[best], "score": float(scores[best])}]
    chosen = predict_label_sets(scores[None, :], config, from_logits=False)[0]
    label2id = {name: index for index, name in config.id2label.items()}
    return [{"label": name, "score": float(scores[label2id[name]])} for name in chosen]
