"""The backbone's input embeddings reading learned marker vectors: label tokens and label-text markers travel
through the backbone as marker ids past the vocabulary, which the embedding module (its class extended with
:class:`LabelTokenInput`) replaces with the pooler's learned vectors; and why a backbone cannot take such markers.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import torch
from torch import nn

from .backbone import input_embeddings_of, pools_the_sequence

__all__ = ["LabelTokenInput", "enable_label_token_input", "marker_input_refusal"]


class LabelTokenInput:
    """Mixed into the backbone's own input embedding class (its weights and checkpoint keys stay as they are): an id
    at or past the vocabulary size is a marker for label ``id - vocabulary``, and gets that label's learned vector
    from the model's label-token pooler; the other ids are looked up as before.

    The markers travel in ``input_ids`` through the backbone, so everything it does with the ids besides the lookup
    (ESM's token dropout counts mask tokens, for one) sees ids, as for any input. Nothing is registered or changed
    per call, so the forward pass compiles (``torch.compile(fullgraph=True)``) and exports. The vectors come from
    ``model.pooler`` at each call: under PEFT that is the trained copy of the pooler.
    """

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        vocabulary = self.num_embeddings
        is_label = input_ids >= vocabulary
        looked_up = super().forward(input_ids.masked_fill(is_label, 0))
        owner = self.__dict__.get("_label_token_model")
        if owner is None:
            return looked_up
        vectors = owner.pooler.label_embeddings
        label_ids = (input_ids - vocabulary).clamp(min=0, max=vectors.weight.shape[0] - 1)
        labels = vectors(label_ids).to(looked_up.dtype)
        return torch.where(is_label.unsqueeze(-1), labels, looked_up)


_LABEL_TOKEN_CLASSES: dict[type, type] = {}


def enable_label_token_input(embeddings: nn.Embedding, model: nn.Module) -> None:
    """Make ``embeddings`` (the backbone's input embedding module) read label markers for ``model``."""
    base = type(embeddings)
    if not issubclass(base, LabelTokenInput):
        if base not in _LABEL_TOKEN_CLASSES:
            _LABEL_TOKEN_CLASSES[base] = type(f"LabelToken{base.__name__}", (LabelTokenInput, base), {})
        embeddings.__class__ = _LABEL_TOKEN_CLASSES[base]
    # A plain attribute, not a registered submodule: the model holds the backbone, not the other way round.
    object.__setattr__(embeddings, "_label_token_model", model)


def marker_input_refusal(backbone: nn.Module, reads: str, writes: str) -> str | None:
    """Why a pooling that puts learned marker vectors into the input (``writes``, through the token embedding table)
    and reads the markers' own final states (``reads``) cannot run on ``backbone``; None: it can."""
    if pools_the_sequence(backbone):
        return f"reads {reads}, but {type(backbone).__name__} pools the sequence to fewer states than tokens"
    embeddings = input_embeddings_of(backbone)
    if isinstance(embeddings, nn.Embedding):
        return None
    kind = (
        "has no input embedding table"
        if embeddings is None
        else f"embeds ids with {type(embeddings).__name__}"
    )
    return (
        f"writes {writes} into the backbone's token embedding table (an nn.Embedding), but "
        f"{type(backbone).__name__} {kind} (get_input_embeddings())"
    )


def _word_embeddings(backbone: nn.Module) -> nn.Embedding:
    """The backbone's token embedding table (``check_backbone`` refused a backbone without one)."""
    return input_embeddings_of(backbone)
