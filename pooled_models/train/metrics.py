"""Metrics for train.py and the sweep: scores as the pipeline reports them, the metrics of each problem type, and
which metric picks the best checkpoint. A small shared piece: numpy and the problem-type names, scikit-learn and
scipy imported where used."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from transformers import EvalPrediction

from ..modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from ..thresholds import DEFAULT_THRESHOLD, sigmoid

__all__ = ["BEST_MODEL_METRIC", "compute_metrics", "metrics_function", "probabilities", "logits_of"]


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
