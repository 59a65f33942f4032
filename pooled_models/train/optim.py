"""The parameter groups' shared pieces: which parameters are the head (new weights), which are label-token
embeddings (with their own rate and weight decay), and which module is the backbone."""

from __future__ import annotations

import logging

from ..modeling.label_tokens import LabelEmbeddings
from ..modeling.modeling_pooled import PooledPreTrainedModel
from .errors import UsageError

__all__ = ["backbone_of", "head_parameters"]

# Training settings of the label-token embeddings (unset: the pooler's and head's rate, the run's weight decay).
LABEL_EMBEDDING_OPTIONS = ("label_embedding_learning_rate", "label_embedding_weight_decay")


def given_label_embedding_options(training_args) -> list[str]:
    """The label-embedding settings a run gives (LABEL_EMBEDDING_OPTIONS that are set)."""
    return [name for name in LABEL_EMBEDDING_OPTIONS if getattr(training_args, name, None) is not None]


logger = logging.getLogger(__name__)


def backbone_of(model):
    """The encoder of a pooled model, or of any other Transformers model (the sweep's vanilla baseline)."""
    return model.get_backbone() if isinstance(model, PooledPreTrainedModel) else model.base_model


def head_parameters(model) -> set[int]:
    """ids of the parameters that start from random weights: the pooler's and the classification head's (every
    head's, for a multi-task model).

    For another model (the sweep's vanilla baseline) they are the ones named in its
    ``newly_initialized_parameters``: those ``from_pretrained`` found no weights for.
    """
    if isinstance(model, PooledPreTrainedModel) and hasattr(model, "head_parameters"):
        return {id(parameter) for parameter in model.head_parameters()}
    new = set(getattr(model, "newly_initialized_parameters", ()))
    return {id(parameter) for name, parameter in model.named_parameters() if name in new}


def label_embedding_parameters(model) -> set[int]:
    """ids of the parameters of every label-token embedding module in ``model`` (PEFT's trained copies included)."""
    return {
        id(parameter)
        for module in model.modules()
        if isinstance(module, LabelEmbeddings)
        for parameter in module.parameters()
    }


def check_label_embedding_options(model, training_args) -> None:
    """A UsageError when a label-embedding setting is given to a model without label-token embeddings."""
    given = given_label_embedding_options(training_args)
    if given and not label_embedding_parameters(model):
        raise UsageError(
            f"{' and '.join(given)} set how the label-token embeddings train, but this model has none (they come "
            "with pooling='label_tokens'): leave them unset, or choose that pooling."
        )
