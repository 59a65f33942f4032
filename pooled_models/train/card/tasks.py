"""``pooled_tasks.md``'s variables: the card of a run that publishes a token classifier or a multi-task model (each
task's head, labels and settings, the data by task and split, the training settings, the evaluation by task, how to
use it)."""

from __future__ import annotations

import json
from typing import Any

from huggingface_hub import EvalResult, ModelCardData

from ...modeling.configuration_multitask import SEQUENCE, TOKEN
from ...modeling.problem_types import MULTI_LABEL
from ..evaluation import MEAN_SCORE, uses_entity_tags
from .data import CardData, TaskCard
from .markdown import rounded

__all__ = ["TASK_METRICS", "tasks_variables"]

# The metrics the card reports for each task.
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
)


def tasks_variables(card: CardData) -> dict[str, Any]:
    """The template's variables, ``card_data`` (the Hub metadata) among them."""
    evaluation = _evaluation(card)
    rows = [_task_row(task) for task in card.tasks]
    single = card.single
    return {
        "card_data": ModelCardData(
            library_name="transformers",
            pipeline_tag="token-classification" if single else None,
            base_model=card.base_model if card.base_model_on_hub else None,
            tags=["pooled_models", "token-classification" if single else "multi-task"],
            model_name=card.model_name,
            eval_results=_eval_results(evaluation, single) or None,
        ),
        "model_title": card.model_name,
        "summary": _summary(card, rows),
        "single": single,
        "tasks": rows,
        "data_rows": [
            {"task": task.name, "split": split["name"], **split}
            for task in card.tasks
            for split in task.splits
        ],
        "token_alignment": _token_alignment(card),
        "training_settings": card.training_settings,
        "evaluation": evaluation,
        "metric_notes": _metric_notes(card),
        "usage": _usage(card),
    }


def _task_row(task: TaskCard) -> dict[str, Any]:
    config = task.config
    head = f"`{config.classifier_head}` head"
    head += " on every token" if task.kind == TOKEN else f", `{config.pooling}` pooling"
    multi_label = task.kind == SEQUENCE and task.problem_type == MULTI_LABEL
    threshold = config.decision_threshold if multi_label else None
    return {
        "name": task.name,
        "kind": task.kind,
        "head": head,
        "label_count": len(task.labels) or "one number",
        "labels": task.labels,
        "problem_type": "token classification" if task.kind == TOKEN else task.problem_type,
        "loss_weight": task.loss_weight,
        "head_learning_rate": task.head_learning_rate if task.head_learning_rate is not None else "the run's",
        "start_epoch": task.start_epoch,
        "freeze_head": task.freeze_head,
        "threshold": json.dumps(threshold) if threshold is not None else None,
        "threshold_origin": task.threshold_origin,
        "loss": config.multi_label_loss,
    }


def _summary(card: CardData, rows: list[dict[str, Any]]) -> str:
    if card.single:
        return (
            f"A token-classification model (NER, tagging): **{card.base_model}** with a head over every token, "
            "fine-tuned with the `train.py` of `pooled_models`. Each word is tagged by its first sub-token."
        )
    return (
        f"A multi-task model: one **{card.base_model}** backbone shared by {len(rows)} heads ("
        + ", ".join(f"`{row['name']}`: {row['kind']}" for row in rows)
        + "), fine-tuned together with the `train.py` of `pooled_models`. Every batch held one task's rows."
    )


def _token_alignment(card: CardData) -> str:
    token_tasks = [task for task in card.tasks if task.kind == TOKEN]
    if not token_tasks:
        return ""
    every = [task.name for task in token_tasks if task.data.label_all_subtokens]
    return (
        "Token tasks: each word's tag is learned on its first sub-token"
        + (f" (on every sub-token for {', '.join(every)})" if every else "")
        + "; special tokens carry no label."
    )


def _metric_notes(card: CardData) -> str:
    notes = []
    if any(task.kind == TOKEN and uses_entity_tags(task.labels) for task in card.tasks):
        notes.append(
            "Token tasks with entity tags: precision, recall and F1 of whole entities (seqeval, as conlleval)."
        )
    if not card.single:
        notes.append(
            f"`{MEAN_SCORE}`: the mean of each task's main metric ("
            + ", ".join(f"{task.name}: {task.main_metric}" for task in card.tasks)
            + ")."
        )
    return " ".join(notes)


def _evaluation(card: CardData) -> list[dict[str, Any]]:
    rows = []
    for prefix, split in (("eval", "validation"), ("test", "test")):
        for task in card.tasks:
            for metric in TASK_METRICS:
                value = card.metrics.get(card.metric_name(prefix, task.name, metric))
                if value is not None:
                    rows.append(
                        {"task": task.name, "split": split, "metric": metric, "value": rounded(value)}
                    )
        mean = card.metrics.get(f"{prefix}_{MEAN_SCORE}")
        if mean is not None and not card.single:
            rows.append({"task": "(all)", "split": split, "metric": MEAN_SCORE, "value": rounded(mean)})
    return rows


def _eval_results(rows: list[dict[str, Any]], single: bool) -> list[EvalResult]:
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


def _usage(card: CardData) -> str:
    literal = json.dumps(card.repo_id, ensure_ascii=False)
    example = card.example_text
    if card.single:
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
    names = [task.name for task in card.tasks]
    shown = next((task.name for task in card.tasks if task.kind == TOKEN), names[0])
    lines = [
        "```python",
        "from pooled_models import PooledForMultiTask",
        "from transformers import AutoTokenizer",
        "",
        f"model = PooledForMultiTask.from_pretrained({literal})",
        f"tokenizer = AutoTokenizer.from_pretrained({literal})",
        f'out = model(**tokenizer([{example!r}], return_tensors="pt"))  # every head: '
        + ", ".join(f'out["{name}"].logits' for name in names),
        "",
        "# one head as a standalone model, for pipeline(...)",
        f'model.export_head("{shown}", "{shown}_only")',
        "```",
        "",
        "Without the package, the model's code ships with it (`modeling_multitask.py` and the files it imports); read "
        f"it, then allow it to run: `AutoModel.from_pretrained({literal}, trust_remote_code=True)`.",
    ]
    return "\n".join(lines)
