"""Scoring, per task: the metrics of each problem type (accuracy and macro-F1, micro/macro-F1 and exact match,
Pearson/Spearman/MSE, entity-level F1 for token tasks), each task's main metric and the mean of them that sums up
several tasks, the metric that chooses the best model, and the decision thresholds of multi-label tasks: how each is
chosen (planned before the run writes anything) and tuned on its validation split."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from transformers import EvalPrediction

from ..errors import UsageError
from ..modeling.configuration_multitask import TOKEN
from ..modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from ..thresholds import DEFAULT_THRESHOLD, sigmoid, tune_thresholds

if TYPE_CHECKING:  # annotations only: scoring needs no data reader at import
    from .data.sequence import Labels, Split

__all__ = [
    "MEAN_SCORE",
    "main_metric",
    "BEST_MODEL_METRIC",
    "best_model_metric",
    "task_config",
    "task_metrics_function",
    "summary_metrics",
    "compute_metrics",
    "probabilities",
    "logits_of",
    "ENTITY_TAG",
    "uses_entity_tags",
    "tag_sequences",
    "token_metrics",
    "ThresholdPlan",
    "plan_thresholds",
    "at_default_name",
    "tune_decision_thresholds",
]

logger = logging.getLogger("pooled_models.train")


# The metric that sums up several tasks: the mean of each task's main metric (all "higher is better").
MEAN_SCORE = "mean_score"


def main_metric(kind: str, problem_type: str | None, names: list[str]) -> str:
    """The metric that sums up one task, higher being better: macro-F1 (single-label), micro-F1 (multi-label),
    Pearson's r (regression), entity F1 (token tasks with entity tags), token accuracy (other tags)."""
    if kind == TOKEN:
        return "f1" if uses_entity_tags(names) else "accuracy"
    return {SINGLE_LABEL: "f1_macro", MULTI_LABEL: "f1_micro", REGRESSION: "pearson"}[problem_type]


# What --load_best_model_at_end and early stopping compare in a run of one sequence task when metric_for_best_model is
# not set: the metric that summarises each problem type best, and whether larger is better.
BEST_MODEL_METRIC = {
    SINGLE_LABEL: ("f1_macro", True),
    MULTI_LABEL: ("f1_micro", True),
    REGRESSION: ("mse", False),
}


def best_model_metric(labels: Mapping[str, Any], single: bool) -> tuple[str, bool]:
    """``(metric, greater is better)`` that chooses the best model: for one sequence task BEST_MODEL_METRIC, for one
    token task its main metric (entity F1), for several tasks the mean of their main metrics (``mean_score``).
    ``labels``: task -> its label space (a token task's is a TokenLabels)."""
    if not single:
        return MEAN_SCORE, True
    (task_labels,) = labels.values()
    if _is_token(task_labels):
        return main_metric(TOKEN, None, task_labels.names), True
    return BEST_MODEL_METRIC[task_labels.problem_type]


def _is_token(labels) -> bool:
    return type(labels).__name__ == "TokenLabels"


def task_config(model, task: str):
    """The config a task's head reads: its own in a multi-task model, the model's in a single-task one."""
    configs = getattr(model, "task_configs", None)
    return configs[task] if configs is not None else model.config


def task_metrics_function(model, task: str, kind: str) -> Callable[[EvalPrediction], dict[str, float]]:
    """The metrics of one task's predictions: read from the task's config when they are computed, so a threshold
    tuned after training counts."""

    def compute(prediction: EvalPrediction) -> dict[str, float]:
        config = task_config(model, task)
        logits = logits_of(prediction.predictions)
        if kind == TOKEN:
            names = [config.id2label[index] for index in range(config.num_labels)]
            return token_metrics(logits, prediction.label_ids, names)
        threshold = getattr(config, "decision_threshold", None)  # a vanilla model's config may not have one
        return compute_metrics(logits, prediction.label_ids, config.problem_type, threshold)

    return compute


def summary_metrics(
    model, kinds: Mapping[str, str], metrics: dict[str, float], prefix: str
) -> dict[str, float]:
    """``<prefix>_mean_score`` (the mean of each task's main metric; an undefined one, such as Pearson's r of a
    constant prediction, counts 0) and ``<prefix>_loss`` (the mean of the tasks' losses), from the metrics of each
    task named ``<prefix>_<task>_<metric>``."""
    scores, losses = [], []
    for task, kind in kinds.items():
        config = task_config(model, task)
        names = [config.id2label[index] for index in range(config.num_labels)]
        value = metrics.get(f"{prefix}_{task}_{main_metric(kind, config.problem_type, names)}")
        scores.append(0.0 if value is None or math.isnan(value) else value)
        if f"{prefix}_{task}_loss" in metrics:
            losses.append(metrics[f"{prefix}_{task}_loss"])
    summary = {f"{prefix}_{MEAN_SCORE}": float(np.mean(scores))}
    if losses:
        summary[f"{prefix}_loss"] = float(np.mean(losses))
    return summary


def logits_of(predictions: Any) -> np.ndarray:
    """The logits of what ``Trainer.predict`` returns: a model that outputs more than logits gives a tuple."""
    return predictions[0] if isinstance(predictions, tuple) else predictions


def probabilities(logits: np.ndarray, problem_type: str) -> np.ndarray:
    """Scores as the pipeline reports them: softmax (single-label), sigmoid (multi-label), the value (regression)."""
    logits = np.asarray(logits, dtype=np.float64)
    if problem_type == SINGLE_LABEL:
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True)
    if problem_type == MULTI_LABEL:
        return sigmoid(logits)
    return logits.reshape(len(logits), -1)[:, 0] if logits.ndim > 1 else logits


def compute_metrics(
    logits: np.ndarray, labels: np.ndarray, problem_type: str, threshold: float | list[float] | None = None
) -> dict[str, float]:
    """accuracy and macro-F1 (single-label); micro/macro-F1 at ``threshold`` (one for all labels or one per label,
    0.5 when unset) and exact-match accuracy (multi-label); MSE, Pearson and Spearman (regression)."""
    from sklearn.metrics import accuracy_score, f1_score

    if problem_type == SINGLE_LABEL:
        predicted = np.asarray(logits).argmax(axis=-1)
        return {
            "accuracy": float(accuracy_score(labels, predicted)),
            "f1_macro": float(f1_score(labels, predicted, average="macro", zero_division=0)),
        }
    if problem_type == MULTI_LABEL:
        threshold = DEFAULT_THRESHOLD if threshold is None else np.asarray(threshold, dtype=float)
        predicted = (probabilities(logits, problem_type) >= threshold).astype(int)
        truth = np.asarray(labels).astype(int)
        return {
            "f1_micro": float(f1_score(truth, predicted, average="micro", zero_division=0)),
            "f1_macro": float(f1_score(truth, predicted, average="macro", zero_division=0)),
            "exact_match": float(accuracy_score(truth, predicted)),
        }
    return _regression_metrics(probabilities(logits, problem_type), np.asarray(labels, dtype=np.float64))


def _regression_metrics(predicted: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    from scipy.stats import pearsonr, spearmanr

    metrics = {"mse": float(np.mean((predicted - truth) ** 2))}
    # A correlation is undefined when either side is constant (e.g. a model that predicts one value): report NaN
    # rather than let scipy warn and return it unexplained.
    if np.ptp(predicted) == 0 or np.ptp(truth) == 0:
        metrics.update(pearson=math.nan, spearman=math.nan)
    else:
        metrics.update(
            pearson=float(pearsonr(predicted, truth)[0]), spearman=float(spearmanr(predicted, truth)[0])
        )
    return metrics


IGNORED = -100


# B-/I- (IOB2, IOB1), E-/S- (IOBES), L-/U- (BILOU) prefixes, or the O of words outside every entity.
ENTITY_TAG = re.compile(r"^([BIESLU][-_].+|O)$")


def uses_entity_tags(names: list[str]) -> bool:
    """Whether the tags name entities (``B-ORG``, ``I-ORG``, ``O``...) rather than word classes (``NOUN``, ``VERB``),
    so that entity-level metrics mean something."""
    return all(ENTITY_TAG.match(name) for name in names) and any(name != "O" for name in names)


def tag_sequences(
    predictions: np.ndarray, labels: np.ndarray, names: list[str]
) -> tuple[list[list[str]], list[list[str]]]:
    """(true tags, predicted tags) of every row, over the positions that carry a label (not -100)."""
    truth, predicted = [], []
    for row_predictions, row_labels in zip(predictions, labels, strict=True):
        kept = row_labels != IGNORED
        truth.append([names[int(label)] for label in row_labels[kept]])
        predicted.append([names[int(label)] for label in row_predictions[kept]])
    return truth, predicted


def token_metrics(logits: np.ndarray, labels: np.ndarray, names: list[str]) -> dict[str, float]:
    """``accuracy`` over the labelled tokens, and for entity tags ``precision``, ``recall`` and ``f1`` of the
    entities (micro-averaged over entity types)."""
    predictions = np.asarray(logits).argmax(axis=-1)
    labels = np.asarray(labels)
    kept = labels != IGNORED
    metrics = {"accuracy": float((predictions[kept] == labels[kept]).mean()) if kept.any() else 0.0}
    if uses_entity_tags(names):
        from seqeval.metrics import f1_score, precision_score, recall_score

        truth, predicted = tag_sequences(predictions, labels, names)
        metrics.update(
            precision=float(precision_score(truth, predicted, zero_division=0)),
            recall=float(recall_score(truth, predicted, zero_division=0)),
            f1=float(f1_score(truth, predicted, zero_division=0)),
        )
    return metrics


@dataclass
class ThresholdPlan:
    """How a multi-label run's decision threshold(s) are chosen."""

    tuning: str  # "global", "per_label" or "none"
    average: str  # the F1 that tuning maximises: "micro" or "macro"
    # where config.json's threshold comes from: "tuned", "given", "saved", "default" or "asymmetric default"
    origin: str

    @property
    def tunes(self) -> bool:
        return self.tuning != "none"

    def describe(self, validation_rows: int | None = None) -> str:
        """How the threshold was chosen, as the model card says it (completes "The threshold was ...")."""
        if self.origin == "tuned":
            rows = f" ({validation_rows} rows)" if validation_rows else ""
            return f"tuned on the validation split{rows} to maximise {self.average}-F1"
        return {
            "given": "set with `--decision_threshold`",
            "saved": "kept from the model this run started from",
            "default": "the default (no threshold was set or tuned)",
            "asymmetric default": "train.py's default for the asymmetric loss without validation data (none was set "
            "or tuned)",
        }[self.origin]


def plan_thresholds(
    training_args, labels: Labels, splits: dict[str, Split], given: bool, saved: bool, where: str = ""
) -> ThresholdPlan | None:
    """A task's threshold plan (None unless it is multi-label), from ``--tune_thresholds``.

    ``given``: the user set ``decision_threshold``; ``saved``: the model the run starts from carries one; ``where``
    names the task among several in messages. An explicit ``global``/``per_label`` that cannot be honoured is a
    UsageError (raised before anything is written); ``auto`` tunes one global threshold whenever it can and says why
    when it does not. Among several tasks, an explicit request concerns the multi-label ones.
    """
    requested = training_args.tune_thresholds
    multi_label = labels.problem_type == MULTI_LABEL
    if requested in ("global", "per_label"):
        if not multi_label:
            if where:
                return None
            raise UsageError(
                f"tune_thresholds={requested} chooses the decision thresholds of a multi-label classifier; this run's "
                f"labels are {labels.problem_type}. Leave tune_thresholds out."
            )
        if "validation" not in splits:
            raise UsageError(
                f"{where}tune_thresholds={requested} tunes on the validation split: give validation data and --do_eval."
            )
        if given:
            raise UsageError(
                f"{where}decision_threshold is set and tune_thresholds={requested} would replace it: choose one "
                "(tune_thresholds none keeps the threshold you set)."
            )
        tuning = requested
    elif requested == "auto":
        reason = _why_auto_does_not_tune(training_args, labels, splits, given)
        tuning = "none" if reason else "global"
        if reason:
            # Single-label and regression tasks have no decision threshold: saying so is noise (debug level).
            level = logging.INFO if multi_label else logging.DEBUG
            logger.log(
                level, "%sDecision thresholds are not tuned (tune_thresholds=auto): %s.", where, reason
            )
    else:
        tuning = "none"
    if not multi_label:
        return None
    origin = "tuned" if tuning != "none" else "given" if given else "saved" if saved else "default"
    return ThresholdPlan(tuning=tuning, average=training_args.threshold_average, origin=origin)


def _why_auto_does_not_tune(
    training_args, labels: Labels, splits: dict[str, Split], given: bool
) -> str | None:
    if labels.problem_type != MULTI_LABEL:
        return f"the labels are {labels.problem_type}"
    if not training_args.do_train:
        return "the run does not train"
    if "validation" not in splits:
        return "there is no validation split (--do_eval)"
    if given:
        return "decision_threshold is set"
    return None


def at_default_name(metric: str, prefix: str = "eval") -> str:
    """The name under which a validation metric at the default threshold is reported: ``eval_f1_micro_at_0.5`` (a
    task among several: ``eval_<task>_f1_micro_at_0.5``)."""
    return f"{prefix}_{metric}_at_{DEFAULT_THRESHOLD}"


def tune_decision_thresholds(
    trainer, validations: Mapping[str, Any], plans: Mapping[str, Any]
) -> dict[str, float]:
    """Tune each multi-label task's decision thresholds on its validation split (``validations``: task -> its rows;
    ``plans``: task -> its TaskPlan), set them on the model, and return the validation metrics at 0.5 they replace.

    ``trainer.predict_task`` gathers the predictions of every process onto every process, so under ``accelerate
    launch`` each process tunes on the same scores and ends with the same thresholds.
    """
    at_default: dict[str, float] = {}
    for name, plan in plans.items():
        thresholds = plan.thresholds
        if thresholds is None or not thresholds.tunes:
            continue
        prediction = trainer.predict_task(name, validations[name], "eval")
        logits, targets = logits_of(prediction.predictions), prediction.label_ids
        tuned = tune_thresholds(
            probabilities(logits, MULTI_LABEL),
            targets,
            per_label=thresholds.tuning == "per_label",
            average=thresholds.average,
        )
        set_decision_threshold(trainer.model, name, tuned)
        before = compute_metrics(logits, targets, MULTI_LABEL, DEFAULT_THRESHOLD)
        _log_tuned(
            name if len(plans) > 1 else None,
            thresholds,
            tuned,
            len(targets),
            before,
            compute_metrics(logits, targets, MULTI_LABEL, tuned),
        )
        prefix = trainer.metric_prefix("eval", name)
        at_default.update({at_default_name(metric, prefix): value for metric, value in before.items()})
    return at_default


def set_decision_threshold(model, task: str, thresholds) -> None:
    """Set a task's decision threshold(s) on the model, where its metrics and its saved config read them."""
    if hasattr(model, "update_task"):
        model.update_task(task, decision_threshold=thresholds)
    else:
        model.config.decision_threshold = thresholds


def _log_tuned(task: str | None, plan: ThresholdPlan, tuned, rows: int, before: dict, after: dict) -> None:
    metric = f"f1_{plan.average}"
    logger.info(
        "%sDecision threshold%s tuned on %d validation rows for %s-F1: %s. Validation %s: %.4f at %s, %.4f tuned "
        "(optimistic: tuned on these rows; the test metrics are the honest ones).",
        f"Task {task!r}: " if task else "",
        "s" if plan.tuning == "per_label" else "",
        rows,
        plan.average,
        _shown(tuned),
        metric,
        before[metric],
        DEFAULT_THRESHOLD,
        after[metric],
    )


def _shown(thresholds: float | list[float]) -> str:
    if isinstance(thresholds, list):
        return "[" + ", ".join(f"{value:.4f}" for value in thresholds) + "]"
    return f"{thresholds:.4f}"
