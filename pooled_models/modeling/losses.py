"""Problem types, label checks and the loss of a sequence classifier.

Labels are checked before the loss is computed, so a wrong shape, dtype or class id raises a
``ValueError`` that names what was expected and what arrived, instead of a broadcast warning, a silent
wrong loss or a device-side assert on GPU.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["PROBLEM_TYPES", "MULTI_LABEL_LOSSES", "infer_problem_type", "check_labels", "classification_loss"]

PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")

# Cross-entropy skips these targets (transformers' convention for padding labels).
IGNORE_INDEX = -100


def infer_problem_type(labels: torch.Tensor, num_labels: int) -> str:
    """The problem type transformers infers from the first labels it sees.

    One addition: integer labels shaped ``[batch, num_labels]`` are multi-hot targets, not class ids.
    """
    if num_labels == 1:
        return "regression"
    is_integer = not labels.is_floating_point() and labels.dtype != torch.bool
    if is_integer and not (labels.ndim == 2 and labels.shape[-1] == num_labels):
        return "single_label_classification"
    return "multi_label_classification"


def check_labels(labels: torch.Tensor, problem_type: str, num_labels: int, batch_size: int) -> torch.Tensor:
    """Validate ``labels`` for ``problem_type`` and return them in the shape and dtype the loss takes."""
    if problem_type not in PROBLEM_TYPES:
        raise ValueError(f"Unknown problem_type {problem_type!r}. Valid choices: {', '.join(PROBLEM_TYPES)}.")
    if labels.ndim == 0 or labels.shape[0] != batch_size:
        raise ValueError(
            f"labels has shape {tuple(labels.shape)} but the batch has {batch_size} rows; "
            "the first dimension of labels must be the batch."
        )
    if problem_type == "single_label_classification":
        return _check_class_ids(labels, num_labels, batch_size)
    if problem_type == "multi_label_classification":
        return _check_multi_hot(labels, num_labels, batch_size)
    return _check_regression_targets(labels, num_labels, batch_size)


def _check_class_ids(labels, num_labels, batch_size):
    if num_labels < 2:
        raise ValueError(
            f"single_label_classification needs num_labels >= 2, got num_labels={num_labels}: use "
            "num_labels=2 for a binary classifier, or problem_type='regression' for one output."
        )
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(
            f"single_label_classification expects integer class ids (torch.long), got dtype {labels.dtype}."
        )
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels.squeeze(1)
    if labels.ndim != 1:
        raise ValueError(
            f"single_label_classification expects labels of shape ({batch_size},), one class id per row, "
            f"got shape {tuple(labels.shape)}."
        )
    out_of_range = (labels != IGNORE_INDEX) & ((labels < 0) | (labels >= num_labels))
    if out_of_range.any():
        row = int(out_of_range.nonzero()[0, 0])
        raise ValueError(
            f"labels[{row}] = {int(labels[row])} is not a class id: with num_labels={num_labels} class ids "
            f"must be in [0, {num_labels - 1}] (or {IGNORE_INDEX} to ignore the row)."
        )
    return labels.long()


def _check_multi_hot(labels, num_labels, batch_size):
    if labels.ndim != 2 or labels.shape[1] != num_labels:
        raise ValueError(
            f"multi_label_classification expects labels of shape ({batch_size}, {num_labels}), one 0/1 column "
            f"per label, got shape {tuple(labels.shape)}."
        )
    labels = labels.float()
    outside = (labels < 0) | (labels > 1) | labels.isnan()
    if outside.any():
        row, column = (int(i) for i in outside.nonzero()[0])
        raise ValueError(
            f"labels[{row}, {column}] = {float(labels[row, column])}: multi-label targets must lie in [0, 1]."
        )
    return labels


def _check_regression_targets(labels, num_labels, batch_size):
    expected = (batch_size,) if num_labels == 1 else (batch_size, num_labels)
    if num_labels == 1 and labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels.squeeze(1)
    if tuple(labels.shape) != expected:
        raise ValueError(f"regression expects labels of shape {expected}, got shape {tuple(labels.shape)}.")
    if labels.dtype == torch.bool:
        raise ValueError("regression expects numeric targets, got dtype torch.bool.")
    labels = labels.float()
    if not torch.isfinite(labels).all():
        row = int((~torch.isfinite(labels)).nonzero()[0, 0])
        raise ValueError(
            f"regression targets must be finite numbers; row {row} holds {labels[row].tolist()}."
        )
    return labels


# Multi-label losses and the settings each reads, with their defaults.
MULTI_LABEL_LOSSES: dict[str, dict[str, float]] = {
    "bce": {},
    "focal": {"focal_gamma": 2.0},
    "asymmetric": {"asymmetric_gamma_neg": 4.0, "asymmetric_gamma_pos": 0.0, "asymmetric_clip": 0.05},
}
EPS = 1e-8


def classification_loss(logits: torch.Tensor, labels: torch.Tensor, config) -> torch.Tensor:
    """The loss for ``config.problem_type`` (in float32), on labels that passed :func:`check_labels`."""
    logits = logits.float()
    if config.problem_type == "regression":
        predictions = logits.squeeze(-1) if labels.ndim == 1 else logits
        return nn.functional.mse_loss(predictions, labels)
    if config.problem_type == "single_label_classification":
        return nn.functional.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX)
    pos_weight = None
    if config.pos_weight is not None:
        pos_weight = torch.tensor(config.pos_weight, dtype=logits.dtype, device=logits.device)
    return _MULTI_LABEL_LOSS_FUNCTIONS[config.multi_label_loss](logits, labels, pos_weight, config)


def _bce(logits, targets, pos_weight, config):
    return nn.functional.binary_cross_entropy_with_logits(logits, targets, pos_weight=pos_weight)


def _focusing(probability: torch.Tensor, gamma: float) -> torch.Tensor:
    # x^0 is 1 with a zero gradient; pow() would give 0 * inf = nan at x = 0.
    return torch.ones_like(probability) if gamma == 0 else probability.clamp(min=EPS).pow(gamma)


def _focal(logits, targets, pos_weight, config):
    """Focal loss (Lin et al., 2017), sigmoid form: BCE scaled by (1 - p_t)^gamma, so easy cases count less."""
    bce = nn.functional.binary_cross_entropy_with_logits(
        logits, targets, pos_weight=pos_weight, reduction="none"
    )
    probability = torch.sigmoid(logits)
    p_true = probability * targets + (1 - probability) * (1 - targets)
    return (_focusing(1 - p_true, config.focal_gamma) * bce).mean()


def _asymmetric(logits, targets, pos_weight, config):
    """Asymmetric loss (Ridnik et al., 2021): negatives are focused harder and shifted by ``asymmetric_clip``.

    Positives: (1 - p)^gamma_pos * log(p); negatives: p_m^gamma_neg * log(1 - p_m) with p_m = max(p - clip, 0),
    so easy negatives (p < clip) add nothing. Averaged over every (row, label) like BCE, so the same
    learning rates apply.
    """
    probability = torch.sigmoid(logits)
    shifted = (probability - config.asymmetric_clip).clamp(min=0)
    positive = _focusing(1 - probability, config.asymmetric_gamma_pos) * nn.functional.logsigmoid(logits)
    if pos_weight is not None:
        positive = positive * pos_weight
    negative = _focusing(shifted, config.asymmetric_gamma_neg) * torch.log((1 - shifted).clamp(min=EPS))
    return -(targets * positive + (1 - targets) * negative).mean()


_MULTI_LABEL_LOSS_FUNCTIONS = {"bce": _bce, "focal": _focal, "asymmetric": _asymmetric}
