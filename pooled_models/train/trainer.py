"""Training pieces for train.py: a Trainer with a separate learning rate for the pooler and head, backbone freezing
and early stopping."""

from __future__ import annotations

from transformers import EarlyStoppingCallback, Trainer, TrainerCallback

from ..modeling.modeling_pooled import PooledForSequenceClassification
from .model_setup import backbone_of

__all__ = [
    "head_parameters",
    "freeze_backbone",
    "PooledTrainer",
    "callbacks_for",
]

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
