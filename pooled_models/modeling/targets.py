"""The targets a loss takes: labels checked against the problem type and the number of labels.

Labels are checked before the loss is computed, so a wrong shape, dtype or class id raises a ``ValueError`` that
names what was expected and what arrived, instead of a broadcast warning, a silent wrong loss or a device-side
assert on GPU.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from typing import Any

import torch

from .inputs import checks_values
from .problem_types import MULTI_LABEL, PROBLEM_TYPES, SINGLE_LABEL

__all__ = ["IGNORE_INDEX", "as_label_tensor", "check_labels"]


def _checking_values() -> bool:
    # Checks that read the labels' values branch on data, which compiled and exported graphs cannot hold: there
    # only the shape and dtype checks run (the same labels are checked in eager mode). A caller that checked its
    # labels (inputs.values_checked_by_caller) saves the host synchronisation each read costs.
    return checks_values()


# Cross-entropy skips these targets (transformers' convention for padding labels).
IGNORE_INDEX = -100


def as_label_tensor(labels: Any) -> torch.Tensor:
    """Labels as a tensor: a list or array of class ids / multi-hot rows / numbers is converted, like Trainer's."""
    if isinstance(labels, torch.Tensor):
        return labels
    try:
        return torch.as_tensor(labels)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(
            f"labels must be a tensor (or a list of class ids, multi-hot rows or numbers), got "
            f"{type(labels).__name__}: {error}"
        ) from error


def check_labels(labels: torch.Tensor, problem_type: str, num_labels: int, batch_size: int) -> torch.Tensor:
    """Validate ``labels`` for ``problem_type`` and return them in the shape and dtype the loss takes."""
    if problem_type not in PROBLEM_TYPES:
        raise ValueError(f"Unknown problem_type {problem_type!r}. Valid choices: {', '.join(PROBLEM_TYPES)}.")
    if labels.ndim == 0 or labels.shape[0] != batch_size:
        raise ValueError(
            f"labels has shape {tuple(labels.shape)} but the batch has {batch_size} rows; "
            "the first dimension of labels must be the batch."
        )
    if problem_type == SINGLE_LABEL:
        return _check_class_ids(labels, num_labels, batch_size)
    if problem_type == MULTI_LABEL:
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
    if _checking_values() and out_of_range.any():
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
    if _checking_values() and outside.any():
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
    if _checking_values() and not torch.isfinite(labels).all():
        row = int((~torch.isfinite(labels)).nonzero()[0, 0])
        raise ValueError(
            f"regression targets must be finite numbers; row {row} holds {labels[row].tolist()}."
        )
    return labels
