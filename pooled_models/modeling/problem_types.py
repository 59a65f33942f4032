"""The three problem types of a sequence classifier, as transformers names them, and how the first labels imply one.

A small shared piece: imports nothing of the package, so the model, the CLI and the sweep all name problem types
through these constants.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import torch

__all__ = ["REGRESSION", "SINGLE_LABEL", "MULTI_LABEL", "PROBLEM_TYPES", "infer_problem_type"]

REGRESSION = "regression"
SINGLE_LABEL = "single_label_classification"
MULTI_LABEL = "multi_label_classification"
PROBLEM_TYPES = (REGRESSION, SINGLE_LABEL, MULTI_LABEL)


def infer_problem_type(labels: torch.Tensor, num_labels: int) -> str:
    """The problem type transformers infers from the first labels it sees.

    One addition: integer labels shaped ``[batch, num_labels]`` are multi-hot targets, not class ids.
    """
    if num_labels == 1:
        return REGRESSION
    is_integer = not labels.is_floating_point() and labels.dtype != torch.bool
    if is_integer and not (labels.ndim == 2 and labels.shape[-1] == num_labels):
        return SINGLE_LABEL
    return MULTI_LABEL
