"""The loss of a sequence classifier, chosen by ``problem_type``; multi-label losses registered by name.

A multi-label loss is a :class:`MultiLabelLoss` registered with ``@MULTI_LABEL_LOSSES.register(name)``: its
``config_options`` are the ``PooledConfig`` settings it reads (with their defaults), ``check_config`` checks them,
and ``compute`` gives the loss, so ``PooledConfig(multi_label_loss=name)`` validates, fills and saves its settings
like those of a built-in one.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import torch
from torch import nn

from .problem_types import REGRESSION, SINGLE_LABEL
from .registry import MULTI_LABEL_LOSSES, Component
from .targets import IGNORE_INDEX

__all__ = [
    "MULTI_LABEL_LOSSES",
    "MultiLabelLoss",
    "BCELoss",
    "FocalLoss",
    "AsymmetricLoss",
    "register_multi_label_loss",
    "classification_loss",
]

register_multi_label_loss = MULTI_LABEL_LOSSES.register
EPS = 1e-8


def classification_loss(
    logits: torch.Tensor, labels: torch.Tensor, config, problem_type: str | None = None
) -> torch.Tensor:
    """The loss for ``problem_type`` (default ``config.problem_type``), in float32, on labels that passed
    ``targets.check_labels``."""
    logits = logits.float()
    problem_type = problem_type or config.problem_type
    if problem_type == REGRESSION:
        predictions = logits.squeeze(-1) if labels.ndim == 1 else logits
        return nn.functional.mse_loss(predictions, labels)
    if problem_type == SINGLE_LABEL:
        return nn.functional.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX)
    pos_weight = None
    if config.pos_weight is not None:
        pos_weight = torch.tensor(config.pos_weight, dtype=logits.dtype, device=logits.device)
    return MULTI_LABEL_LOSSES.lookup(config.multi_label_loss).compute(logits, labels, pos_weight, config)


class MultiLabelLoss(Component):
    """A loss over ``[B, L]`` logits and 0/1 targets, averaged over every (row, label) like BCE so that the same
    learning rates apply. Its settings are numbers in [0, 100) unless ``check_config`` says otherwise."""

    @classmethod
    def check_config(cls, config) -> None:
        for name in cls.config_options:
            value = getattr(config, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 100:
                raise ValueError(f"{name} must be a number in [0, 100), got {value!r}.")

    @staticmethod
    def compute(
        logits: torch.Tensor, targets: torch.Tensor, pos_weight: torch.Tensor | None, config
    ) -> torch.Tensor:
        raise NotImplementedError


def _focusing(probability: torch.Tensor, gamma: float) -> torch.Tensor:
    # x^0 is 1 with a zero gradient; pow() would give 0 * inf = nan at x = 0.
    return torch.ones_like(probability) if gamma == 0 else probability.clamp(min=EPS).pow(gamma)


@MULTI_LABEL_LOSSES.register("bce")
class BCELoss(MultiLabelLoss):
    """Binary cross-entropy on each label's sigmoid."""

    @staticmethod
    def compute(logits, targets, pos_weight, config):
        return nn.functional.binary_cross_entropy_with_logits(logits, targets, pos_weight=pos_weight)


@MULTI_LABEL_LOSSES.register("focal")
class FocalLoss(MultiLabelLoss):
    """Focal loss (Lin et al., 2017), sigmoid form: BCE scaled by (1 - p_t)^gamma, so easy cases count less."""

    config_options = {"focal_gamma": 2.0}

    @staticmethod
    def compute(logits, targets, pos_weight, config):
        bce = nn.functional.binary_cross_entropy_with_logits(
            logits, targets, pos_weight=pos_weight, reduction="none"
        )
        probability = torch.sigmoid(logits)
        p_true = probability * targets + (1 - probability) * (1 - targets)
        return (_focusing(1 - p_true, config.focal_gamma) * bce).mean()


@MULTI_LABEL_LOSSES.register("asymmetric")
class AsymmetricLoss(MultiLabelLoss):
    """Asymmetric loss (Ridnik et al., 2021): negatives are focused harder and shifted by ``asymmetric_clip``.

    Positives: (1 - p)^gamma_pos * log(p); negatives: p_m^gamma_neg * log(1 - p_m) with p_m = max(p - clip, 0),
    so easy negatives (p < clip) add nothing.
    """

    config_options = {"asymmetric_gamma_neg": 4.0, "asymmetric_gamma_pos": 0.0, "asymmetric_clip": 0.05}

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        if not config.asymmetric_clip < 1:
            raise ValueError(f"asymmetric_clip must be in [0, 1), got {config.asymmetric_clip!r}.")

    @staticmethod
    def compute(logits, targets, pos_weight, config):
        probability = torch.sigmoid(logits)
        shifted = (probability - config.asymmetric_clip).clamp(min=0)
        positive = _focusing(1 - probability, config.asymmetric_gamma_pos) * nn.functional.logsigmoid(logits)
        if pos_weight is not None:
            positive = positive * pos_weight
        negative = _focusing(shifted, config.asymmetric_gamma_neg) * torch.log((1 - shifted).clamp(min=EPS))
        return -(targets * positive + (1 - targets) * negative).mean()
