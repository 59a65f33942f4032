"""Multi-label decisions: positive weights from label frequencies, thresholds tuned for F1, label sets.

A multi-label classifier gives one sigmoid score per label; which labels it *predicts* depends on the
threshold. 0.5 is rarely right: with many labels and few positives per text, scores of true labels
often stay below it for a long time. ``tune_thresholds`` picks the threshold (one for every label, or
one per label) that maximises micro- or macro-F1 on validation data; the result goes into
``config.decision_threshold`` and ``predict_label_sets`` applies it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "sigmoid",
    "positive_weights",
    "tune_thresholds",
    "predict_label_sets",
    "AVERAGES",
    "DEFAULT_THRESHOLD",
]

AVERAGES = ("micro", "macro")
DEFAULT_THRESHOLD = 0.5


def sigmoid(logits: Any) -> np.ndarray:
    """The logistic function in float64: the score of each label, as ``pipeline`` reports it."""
    return 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))


def positive_weights(targets: Any) -> list[float]:
    """negatives / positives per label, from ``[rows, labels]`` 0/1 targets (the ``pos_weight`` of BCE).

    A label without positives counts one, so its weight stays finite (the number of negatives).
    """
    targets = _as_matrix(targets, "targets")
    positives = targets.sum(axis=0)
    negatives = targets.shape[0] - positives
    return (negatives / np.maximum(positives, 1)).astype(float).tolist()


def tune_thresholds(
    scores: Any, targets: Any, per_label: bool = False, average: str = "micro"
) -> float | list[float]:
    """The threshold(s) on ``scores`` (sigmoid probabilities, ``[rows, labels]``) that maximise ``average``-F1.

    Global: one threshold for every label. Per label: each label's own threshold; for macro-F1 each
    label maximises its own F1 (which maximises the mean exactly), for micro-F1 the labels are tuned in
    turn (two rounds), starting from the best global threshold. A label without positives keeps the
    global threshold. Candidates are the midpoints between consecutive distinct scores (a 2001-point
    quantile grid when there are more); among equally good candidates the one nearest 0.5 wins.
    """
    _check_average(average)
    scores, targets = _as_matrix(scores, "scores").astype(float), _as_matrix(targets, "targets") > 0.5
    if scores.shape != targets.shape:
        raise ValueError(f"scores have shape {scores.shape} but targets {targets.shape}; they must match.")
    actual = targets.sum(axis=0)
    candidates = _candidates(scores.ravel())
    counts = [_counts(scores[:, label], targets[:, label], candidates) for label in range(scores.shape[1])]
    true_positives = np.stack([tp for tp, _ in counts])  # [labels, candidates]
    predicted = np.stack([p for _, p in counts])
    if average == "micro":
        f1 = _f1_array(true_positives.sum(axis=0), predicted.sum(axis=0), actual.sum())
    else:
        f1 = _f1_array(true_positives, predicted, actual[:, None]).mean(axis=0)
    best_global = _pick(candidates, f1)
    if not per_label:
        return best_global

    thresholds = np.full(scores.shape[1], best_global)
    for _ in range(1 if average == "macro" else 2):
        for label in np.flatnonzero(actual):
            own_candidates = _candidates(scores[:, label])
            tp, pred = _counts(scores[:, label], targets[:, label], own_candidates)
            if average == "macro":
                f1 = _f1_array(tp, pred, actual[label])
            else:
                # Micro-F1 with every other label at its current threshold.
                others = np.arange(scores.shape[1]) != label
                chosen = scores[:, others] >= thresholds[others]
                f1 = _f1_array((chosen & targets[:, others]).sum() + tp, chosen.sum() + pred, actual.sum())
            thresholds[label] = _pick(own_candidates, f1)
    return thresholds.tolist()


def _candidates(scores: np.ndarray) -> np.ndarray:
    distinct = np.unique(scores)
    if len(distinct) > 2000:  # a fine grid is as good as every midpoint, and much cheaper
        distinct = np.unique(np.quantile(scores, np.linspace(0, 1, 2001)))
    midpoints = (distinct[:-1] + distinct[1:]) / 2
    candidates = np.concatenate([[distinct[0] - 1e-6], midpoints, [distinct[-1] + 1e-6]])
    return np.clip(candidates, 1e-6, 1 - 1e-6)


def _counts(scores: np.ndarray, targets: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each candidate threshold: true positives and predictions of ``scores >= candidate``."""
    above = len(scores) - np.searchsorted(np.sort(scores), candidates, side="left")
    positives = np.sort(scores[targets])
    true_positives = len(positives) - np.searchsorted(positives, candidates, side="left")
    return true_positives, above


def _f1_array(true_positives, predicted, actual) -> np.ndarray:
    total = np.asarray(predicted + actual, dtype=float)
    return np.divide(2.0 * true_positives, total, out=np.zeros_like(total), where=total > 0)


def _pick(candidates: np.ndarray, values: np.ndarray) -> float:
    best = np.flatnonzero(values >= values.max() - 1e-12)
    return float(candidates[best[np.argmin(np.abs(candidates[best] - DEFAULT_THRESHOLD))]])


def predict_label_sets(predictions: Any, config, from_logits: bool | None = None) -> list[list[str]]:
    """The predicted label names of each row, using ``config.decision_threshold`` (0.5 when unset).

    ``predictions``: logits or sigmoid scores ``[rows, labels]`` (a tensor or array; ``from_logits`` says
    which, by default logits unless every value lies in [0, 1]), or what ``pipeline("text-classification",
    top_k=None)`` returns (a list of ``{"label", "score"}`` lists, or one such list).
    """
    names = [config.id2label[index] for index in range(config.num_labels)]
    if _is_pipeline_output(predictions):
        rows = [predictions] if isinstance(predictions[0], Mapping) else predictions
        scores = np.array([[_score_of(row, name) for name in names] for row in rows])
    else:
        scores = _as_matrix(predictions, "predictions").astype(float)
        if from_logits is None:
            from_logits = not ((scores >= 0) & (scores <= 1)).all()
        if from_logits:
            scores = sigmoid(scores)
    if scores.shape[1] != len(names):
        raise ValueError(f"predictions have {scores.shape[1]} columns but the model has {len(names)} labels.")
    threshold = config.decision_threshold if config.decision_threshold is not None else DEFAULT_THRESHOLD
    chosen = scores >= np.asarray(threshold, dtype=float)
    return [[name for name, keep in zip(names, row, strict=True) if keep] for row in chosen]


def _is_pipeline_output(predictions: Any) -> bool:
    return (
        isinstance(predictions, Sequence)
        and len(predictions) > 0
        and (
            isinstance(predictions[0], Mapping)
            or (
                isinstance(predictions[0], Sequence)
                and len(predictions[0]) > 0
                and isinstance(predictions[0][0], Mapping)
            )
        )
    )


def _score_of(row: Sequence[Mapping[str, Any]], name: str) -> float:
    for item in row:
        if item["label"] == name:
            return float(item["score"])
    raise ValueError(f"the pipeline output has no score for label {name!r}: pass top_k=None to the pipeline.")


def _as_matrix(values: Any, name: str) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().float().cpu().numpy()
    array = np.asarray(values)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a [rows, labels] matrix, got shape {array.shape}.")
    return array


def _check_average(average: str) -> None:
    if average not in AVERAGES:
        raise ValueError(f"Unknown average {average!r}. Valid choices: {', '.join(AVERAGES)}.")
