"""What a multi-task or token-classification run writes and shows: each task's predictions, the model card that
describes every head and its metrics, and the saved model's answers for a few texts."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..modeling.configuration_multitask import TOKEN
from ..modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from ..thresholds import predict_label_sets
from .metrics import logits_of, probabilities
from .model_card import TEMPLATES_DIR, code_span
from .multitask_trainer import MEAN_SCORE, main_metric
from .outputs import PREDICTIONS_FILE, chosen_training_options, json_safe, print_evaluation, write_predictions
from .token_data import OUTSIDE, word_predictions
from .token_metrics import uses_entity_tags

__all__ = [
    "TASK_TEMPLATE",
    "predictions_file",
    "write_task_predictions",
    "write_task_card",
    "entities_of",
    "task_examples",
    "print_task_summary",
]

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


# ----------------------------------------------------------------------------------------------------
# Predictions
# ----------------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------------
# The model card
# ----------------------------------------------------------------------------------------------------


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


def _rounded(value: float) -> float | str:
    return (
        "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 4)
    )


def _training_settings(args, single: bool) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    if args.do_train:
        if not single:
            settings["task sampling"] = args.task_sampling + (
                f" (alpha {args.sampling_alpha})" if args.task_sampling == "temperature" else ""
            )
        settings.update(
            {
                "learning rate (backbone)": args.learning_rate,
                "learning rate (heads)": args.head_learning_rate or args.learning_rate,
                "backbone frozen": args.freeze_backbone,
                "epochs": args.num_train_epochs if args.max_steps <= 0 else f"{args.max_steps} steps",
                "batch size per device": args.per_device_train_batch_size,
                "devices": args.world_size,
                "warmup": args.warmup_steps,
                "weight decay": args.weight_decay,
                "seed": args.seed,
            }
        )
        settings.update(chosen_training_options(args))
        if args.load_best_model_at_end:
            settings["best model by"] = args.metric_for_best_model
    return settings


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
        eval_results=_eval_results(evaluation, single) or None,
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
        training_settings=_training_settings(training_args, single),
        evaluation=evaluation,
        metric_notes=" ".join(notes),
        usage=_usage(repo, single, tasks, example_text),
        code=code_span,
    )
    card.save(folder / "README.md")


# ----------------------------------------------------------------------------------------------------
# Example texts, through the saved model
# ----------------------------------------------------------------------------------------------------


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


def print_task_summary(output_dir: Path, metrics: dict[str, float], examples) -> None:
    print_evaluation(output_dir, metrics, width=32)  # task names make the metric names longer
    if examples:
        print("The saved model's answers:")
        for text, answers in examples:
            print(f"  {text!r}")
            for task, answer in answers.items():
                print(f"      {task}: {answer}")
