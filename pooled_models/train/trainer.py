"""Training pieces for train.py: metrics per problem type, a Trainer with a separate learning rate for the
pooler and head, backbone freezing, early stopping and checkpoint checks."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from transformers import EarlyStoppingCallback, EvalPrediction, Trainer, TrainerCallback

from ..modeling.modeling_pooled import PooledForSequenceClassification
from ..thresholds import DEFAULT_THRESHOLD
from .model_setup import backbone_of

__all__ = [
    "BEST_MODEL_METRIC",
    "compute_metrics",
    "metrics_function",
    "probabilities",
    "head_parameters",
    "freeze_backbone",
    "PooledTrainer",
    "callbacks_for",
]

# What --load_best_model_at_end and early stopping compare when metric_for_best_model is not set: the metric that
# summarises each problem type best, and whether larger is better.
BEST_MODEL_METRIC = {
    "single_label_classification": ("f1_macro", True),
    "multi_label_classification": ("f1_micro", True),
    "regression": ("mse", False),
}


# ----------------------------------------------------------------------------------------------------
# Metrics
# ----------------------------------------------------------------------------------------------------


def probabilities(logits: np.ndarray, problem_type: str) -> np.ndarray:
    """Scores as the pipeline reports them: softmax (single-label), sigmoid (multi-label), the value (regression)."""
    logits = np.asarray(logits, dtype=np.float64)
    if problem_type == "single_label_classification":
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True)
    if problem_type == "multi_label_classification":
        return 1.0 / (1.0 + np.exp(-logits))
    return logits.reshape(len(logits), -1)[:, 0] if logits.ndim > 1 else logits


def compute_metrics(
    logits: np.ndarray, labels: np.ndarray, problem_type: str, threshold: float | list[float] | None = None
) -> dict[str, float]:
    """accuracy and macro-F1 (single-label); micro/macro-F1 at ``threshold`` (one for all labels or one per label,
    0.5 when unset) and exact-match accuracy (multi-label); MSE, Pearson and Spearman (regression)."""
    from sklearn.metrics import accuracy_score, f1_score

    if problem_type == "single_label_classification":
        predicted = np.asarray(logits).argmax(axis=-1)
        return {
            "accuracy": float(accuracy_score(labels, predicted)),
            "f1_macro": float(f1_score(labels, predicted, average="macro", zero_division=0)),
        }
    if problem_type == "multi_label_classification":
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
        logits = (
            prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        )
        threshold = getattr(config, "decision_threshold", None)  # a vanilla model's config may not have one
        return compute_metrics(logits, prediction.label_ids, config.problem_type, threshold)

    return compute


# ----------------------------------------------------------------------------------------------------
# Optimisation: head learning rate and a frozen backbone
# ----------------------------------------------------------------------------------------------------


def head_parameters(model) -> set[int]:
    """ids of the parameters that start from random weights: the pooler's and the classification head's.

    For another model (the sweep's vanilla baseline) they are the ones named in its
    ``newly_initialized_parameters``: those ``from_pretrained`` found no weights for.
    """
    if isinstance(model, PooledForSequenceClassification):
        return {id(parameter) for parameter in model.head_parameters()}
    new = set(getattr(model, "newly_initialized_parameters", ()))
    return {id(parameter) for name, parameter in model.named_parameters() if name in new}


def freeze_backbone(model) -> int:
    """Stop the backbone's gradients; returns the number of frozen parameters."""
    frozen = 0
    for parameter in backbone_of(model).parameters():
        parameter.requires_grad_(False)
        frozen += parameter.numel()
    return frozen


class PooledTrainer(Trainer):
    """A Trainer whose optimizer gives the pooler and head their own learning rate (``args.head_learning_rate``).

    The pooler and head start from random weights while the backbone is pretrained, so the head usually wants a
    larger step than the backbone can take without forgetting. The scheduler scales both rates alike.
    """

    def create_optimizer(self, model=None):
        head_learning_rate = getattr(self.args, "head_learning_rate", None)
        if self.optimizer is not None or head_learning_rate is None:
            return super().create_optimizer(model)
        opt_model = self.model if model is None else model
        head = head_parameters(self.accelerator.unwrap_model(opt_model))
        decay = set(self.get_decay_parameter_names(opt_model))
        groups: dict[tuple[bool, bool], list] = {}
        for name, parameter in opt_model.named_parameters():
            if parameter.requires_grad:
                groups.setdefault((id(parameter) in head, name in decay), []).append(parameter)
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, opt_model)
        self.optimizer = optimizer_cls(
            [
                {
                    "params": parameters,
                    "lr": head_learning_rate if is_head else self.args.learning_rate,
                    "weight_decay": self.args.weight_decay if decays else 0.0,
                }
                for (is_head, decays), parameters in groups.items()
            ],
            **optimizer_kwargs,
        )
        return self.optimizer


# ----------------------------------------------------------------------------------------------------
# Callbacks and checkpoints
# ----------------------------------------------------------------------------------------------------


def callbacks_for(training_args) -> list[TrainerCallback]:
    if training_args.early_stopping_patience is None:
        return []
    return [EarlyStoppingCallback(early_stopping_patience=training_args.early_stopping_patience)]
