"""Scoring: the metrics of each problem type (accuracy and macro-F1, micro/macro-F1 and exact match,
Pearson/Spearman/MSE, entity-level F1 for token tasks), the metric that chooses the best model, and the decision
thresholds of multi-label models tuned on the validation split (one run's plan, each task of a run of tasks)."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from transformers import EvalPrediction

from ..errors import UsageError
from ..modeling.configuration_multitask import SEQUENCE, TOKEN
from ..modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from ..thresholds import DEFAULT_THRESHOLD, sigmoid, tune_thresholds
from .data.batching import TaskRows
from .data.sequence import Labels, Split

if TYPE_CHECKING:  # an annotation only: evaluation needs no data reader at import
    from .data import TaskData

__all__ = [
    "tune_task_thresholds",
    "MEAN_SCORE",
    "main_metric",
    "task_metrics_function",
    "BEST_MODEL_METRIC",
    "compute_metrics",
    "metrics_function",
    "probabilities",
    "logits_of",
    "ENTITY_TAG",
    "uses_entity_tags",
    "tag_sequences",
    "token_metrics",
    "ThresholdPlan",
    "plan_thresholds",
    "tune_on_validation",
    "at_default_name",
]

logger = logging.getLogger("pooled_models.train")


def tune_task_thresholds(trainer, tasks: dict[str, TaskData]) -> None:
    """Each multi-label task's decision threshold, tuned on its validation split for ``threshold_average``-F1 (one
    for every label, or one per label with ``--tune_thresholds per_label``; not with ``none``)."""
    args = trainer.args
    if args.tune_thresholds == "none":
        return
    model = trainer.model
    for name, task in tasks.items():
        config = model.task_configs[name]
        if task.kind != SEQUENCE or config.problem_type != MULTI_LABEL or "validation" not in task.splits:
            continue
        if config.decision_threshold is not None and task.spec.model.get("decision_threshold") is not None:
            continue  # given in the config file
        prediction = trainer.predict_task(name, TaskRows(name, task.splits["validation"].encoded), "eval")
        thresholds = tune_thresholds(
            probabilities(logits_of(prediction.predictions), MULTI_LABEL),
            prediction.label_ids,
            per_label=args.tune_thresholds == "per_label",
            average=args.threshold_average,
        )
        model.update_task(name, decision_threshold=thresholds)
        task.extra["threshold"] = thresholds
        logger.info(
            "Task %r: decision threshold tuned on validation for %s-F1: %s",
            name,
            args.threshold_average,
            thresholds,
        )


# The metric that sums up the tasks: the mean of each task's main metric (all "higher is better").
MEAN_SCORE = "mean_score"


def main_metric(kind: str, problem_type: str | None, names: list[str]) -> str:
    """The metric that sums up one task, higher being better: macro-F1 (single-label), micro-F1 (multi-label),
    Pearson's r (regression), entity F1 (token tasks with entity tags), token accuracy (other tags)."""
    if kind == TOKEN:
        return "f1" if uses_entity_tags(names) else "accuracy"
    return {SINGLE_LABEL: "f1_macro", MULTI_LABEL: "f1_micro", REGRESSION: "pearson"}[problem_type]


def task_metrics_function(model, task: str) -> Callable[[EvalPrediction], dict[str, float]]:
    """The metrics of one task's predictions: read from the model's task config when they are computed, so a
    threshold tuned after training counts."""

    def compute(prediction: EvalPrediction) -> dict[str, float]:
        config = model.task_configs[task]
        logits = logits_of(prediction.predictions)
        if model.config.kind(task) == TOKEN:
            names = [config.id2label[index] for index in range(config.num_labels)]
            return token_metrics(logits, prediction.label_ids, names)
        return compute_metrics(logits, prediction.label_ids, config.problem_type, config.decision_threshold)

    return compute


def logits_of(predictions: Any) -> np.ndarray:
    """The logits of what ``Trainer.predict`` returns: a model that outputs more than logits gives a tuple."""
    return predictions[0] if isinstance(predictions, tuple) else predictions


# What --load_best_model_at_end and early stopping compare when metric_for_best_model is not set: the metric that
# summarises each problem type best, and whether larger is better.
BEST_MODEL_METRIC = {
    SINGLE_LABEL: ("f1_macro", True),
    MULTI_LABEL: ("f1_micro", True),
    REGRESSION: ("mse", False),
}


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


def metrics_function(config) -> Callable[[EvalPrediction], dict[str, float]]:
    """``compute_metrics`` for the Trainer of a model with this config (multi-label: at its ``decision_threshold``,
    read when the metrics are computed, so a threshold set after training counts)."""

    def compute(prediction: EvalPrediction) -> dict[str, float]:
        logits = logits_of(prediction.predictions)
        threshold = getattr(config, "decision_threshold", None)  # a vanilla model's config may not have one
        return compute_metrics(logits, prediction.label_ids, config.problem_type, threshold)

    return compute


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
    origin: str  # where config.json's threshold comes from: "tuned", "given", "saved" or "default"

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
        }[self.origin]


def plan_thresholds(
    training_args, labels: Labels, splits: dict[str, Split], given: bool, saved: bool
) -> ThresholdPlan | None:
    """The run's threshold plan (None unless the problem is multi-label), from ``--tune_thresholds``.

    ``given``: the user set ``decision_threshold``; ``saved``: the model the run starts from carries one. An explicit
    ``global``/``per_label`` that cannot be honoured is a UsageError (raised before anything is written); ``auto``
    tunes one global threshold whenever it can and says why when it does not.
    """
    requested = training_args.tune_thresholds
    multi_label = labels.problem_type == MULTI_LABEL
    if requested in ("global", "per_label"):
        if not multi_label:
            raise UsageError(
                f"tune_thresholds={requested} chooses the decision thresholds of a multi-label classifier; this run's "
                f"labels are {labels.problem_type}. Leave tune_thresholds out."
            )
        if "validation" not in splits:
            raise UsageError(
                f"tune_thresholds={requested} tunes on the validation split: give validation data and --do_eval."
            )
        if given:
            raise UsageError(
                f"decision_threshold is set and tune_thresholds={requested} would replace it: choose one "
                "(tune_thresholds none keeps the threshold you set)."
            )
        tuning = requested
    elif requested == "auto":
        reason = _why_auto_does_not_tune(training_args, labels, splits, given)
        tuning = "none" if reason else "global"
        if reason:
            # Single-label and regression runs have no decision threshold: saying so is noise (debug level).
            level = logging.INFO if multi_label else logging.DEBUG
            logger.log(level, "Decision thresholds are not tuned (tune_thresholds=auto): %s.", reason)
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


def at_default_name(metric: str) -> str:
    """The name under which a validation metric at the default threshold is reported: ``eval_f1_micro_at_0.5``."""
    return f"eval_{metric}_at_{DEFAULT_THRESHOLD}"


def tune_on_validation(
    trainer, validation: Split, plan: ThresholdPlan
) -> tuple[float | list[float], dict[str, float]]:
    """The thresholds tuned on the validation split's predictions, and the validation metrics at 0.5.

    ``trainer.predict`` gathers the predictions of every process onto every process, so under ``accelerate launch``
    each process tunes on the same scores and ends with the same thresholds.
    """
    prediction = trainer.predict(validation.encoded, metric_key_prefix="eval")
    logits = logits_of(prediction.predictions)
    targets = prediction.label_ids
    thresholds = tune_thresholds(
        probabilities(logits, MULTI_LABEL),
        targets,
        per_label=plan.tuning == "per_label",
        average=plan.average,
    )
    at_default = compute_metrics(logits, targets, MULTI_LABEL, DEFAULT_THRESHOLD)
    tuned = compute_metrics(logits, targets, MULTI_LABEL, thresholds)
    metric = f"f1_{plan.average}"
    logger.info(
        "Decision threshold%s tuned on %d validation rows for %s-F1: %s. Validation %s: %.4f at %s, %.4f tuned "
        "(optimistic: tuned on these rows; the test metrics are the honest ones).",
        "s" if plan.tuning == "per_label" else "",
        len(targets),
        plan.average,
        _shown(thresholds),
        metric,
        at_default[metric],
        DEFAULT_THRESHOLD,
        tuned[metric],
    )
    return thresholds, {at_default_name(name): value for name, value in at_default.items()}


def _shown(thresholds: float | list[float]) -> str:
    if isinstance(thresholds, list):
        return "[" + ", ".join(f"{value:.4f}" for value in thresholds) + "]"
    return f"{thresholds:.4f}"
