"""The backbone: building it without unused modules, loading its pretrained weights, feeding it positions.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_MAPPING

__all__ = [
    "backbone_class",
    "pools_the_sequence",
    "states_mask",
    "build_backbone",
    "load_backbone",
    "input_embeddings_of",
    "is_encoder_decoder",
    "POSITION_IDS_REFUSED",
    "token_states_module",
    "position_offset",
    "position_ids_from_mask",
]

# Submodules some backbones build but never call in forward. A parameter that never gets a gradient
# makes DistributedDataParallel (find_unused_parameters=False) fail, so they are dropped.
UNUSED_BACKBONE_MODULES = ("contact_head",)  # ESM's contact predictor, only run by predict_contacts()


# Where transformers maps a type to a full-length and a pooled base model (Funnel: FunnelModel and FunnelBaseModel), the
# pooled one, which its own sequence classifier reads (FunnelForSequenceClassification: FunnelBaseModel's first state);
# its token classifier reads the full-length one, which keeps a state per token.
SEQUENCE_BASE_MODELS = {"funnel": "FunnelBaseModel"}


def backbone_class(backbone_config, per_token: bool = True) -> type[PreTrainedModel]:
    """AutoModel's class for the config. Where transformers maps a type to several base models (Funnel), the one
    transformers' own task model of the kind builds: the full-length one for a model that reads every token
    (``per_token``: token classification, multi-task with a token task), the pooled one for a sequence model, whose
    states (Funnel's first token) do not move with the padding where the full-length model's upsampled states do."""
    if type(backbone_config) not in MODEL_MAPPING:
        raise ValueError(
            f"transformers has no AutoModel class for backbone model_type {backbone_config.model_type!r}."
        )
    classes = MODEL_MAPPING[type(backbone_config)]
    if not isinstance(classes, (list, tuple)):
        return classes
    wanted = None if per_token else SEQUENCE_BASE_MODELS.get(backbone_config.model_type)
    return next((model_class for model_class in classes if model_class.__name__ == wanted), classes[0])


def pools_the_sequence(backbone: nn.Module) -> bool:
    """The backbone gives fewer states than input tokens (FunnelBaseModel)."""
    return type(backbone).__name__ in SEQUENCE_BASE_MODELS.values()


def states_mask(backbone: nn.Module, attention_mask: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """The mask of the backbone's output states: the input's, or, where the backbone pools the sequence
    (FunnelBaseModel), the input's pooled as its blocks pool it (each block after the first halves the sequence while
    it is longer than the separate CLS and one more, a pair counting as real only if both tokens are)."""
    if states.shape[1] == attention_mask.shape[1] or not pools_the_sequence(backbone):
        return attention_mask
    config, structure = backbone.config, backbone.encoder.attention_structure
    mask = attention_mask.to(states.dtype)
    for _ in config.block_sizes[1:]:
        if mask.shape[1] > (2 if config.separate_cls else 1):
            mask = structure.pool_tensor(mask, mode="min")
    return mask.to(attention_mask.dtype)


def _backbone_init_kwargs(backbone_config, per_token: bool = True) -> dict[str, Any]:
    # BERT-style backbones build a dense+tanh pooler on the first token; no pooling here calls it.
    parameters = inspect.signature(backbone_class(backbone_config, per_token).__init__).parameters
    return {"add_pooling_layer": False} if "add_pooling_layer" in parameters else {}


def _drop_unused_modules(backbone: PreTrainedModel) -> PreTrainedModel:
    for name in UNUSED_BACKBONE_MODULES:
        if isinstance(getattr(backbone, name, None), nn.Module):
            setattr(backbone, name, None)
    return backbone


def build_backbone(backbone_config, per_token: bool = True) -> PreTrainedModel:
    """A randomly initialised backbone (weights come later from ``from_pretrained``)."""
    # The class's own _from_config, which AutoModel.from_config calls once it has picked the class.
    return _drop_unused_modules(
        backbone_class(backbone_config, per_token)._from_config(
            backbone_config, **_backbone_init_kwargs(backbone_config, per_token)
        )
    )


_UNSET = object()


@contextlib.contextmanager
def _expect_dropped_weights(model_class: type[PreTrainedModel], init_kwargs: dict[str, Any]):
    """Keep the load report quiet about the checkpoint weights of the modules we chose not to build."""
    dropped = list(UNUSED_BACKBONE_MODULES) + (
        ["pooler"] if init_kwargs.get("add_pooling_layer") is False else []
    )
    if model_class.__name__ in SEQUENCE_BASE_MODELS.values():
        dropped.append("decoder")  # a full-length checkpoint's decoder, which the pooled model has not
    patterns = [rf"(^|\.){name}\." for name in dropped]
    saved = model_class.__dict__.get("_keys_to_ignore_on_load_unexpected", _UNSET)
    model_class._keys_to_ignore_on_load_unexpected = (
        list(model_class._keys_to_ignore_on_load_unexpected or []) + patterns
    )
    try:
        yield
    finally:
        if saved is _UNSET:
            del model_class._keys_to_ignore_on_load_unexpected
        else:
            model_class._keys_to_ignore_on_load_unexpected = saved


def load_backbone(
    name_or_path: str | os.PathLike, backbone_config, per_token: bool = True, **kwargs
) -> PreTrainedModel:
    """The pretrained backbone, read from safetensors only."""
    model_class = backbone_class(backbone_config, per_token)
    init_kwargs = _backbone_init_kwargs(backbone_config, per_token)
    with _expect_dropped_weights(model_class, init_kwargs):
        backbone = model_class.from_pretrained(
            name_or_path, config=backbone_config, use_safetensors=True, **init_kwargs, **kwargs
        )
    return _drop_unused_modules(backbone)


# Backbones given no position ids: transformers' ReformerModel fails on given ones whenever it pads a batch to its
# chunk length (_pad_to_mult_of_chunk_length builds their padding from the padded length), so it counts its own.
POSITION_IDS_REFUSED = ("reformer",)


def is_encoder_decoder(backbone_config) -> bool:
    return bool(getattr(backbone_config, "is_encoder_decoder", False))


def token_states_module(backbone: PreTrainedModel, checked: bool = False) -> nn.Module:
    """The module whose forward gives one state per input token, which every pooling reads: the backbone itself, or
    the encoder of an encoder-decoder (BART, T5, T5Gemma). Their decoder would need decoder inputs and gives states
    that each see only the tokens before them; the encoder reads the whole text under its own mask, as
    sentence-transformers reads T5. The decoder stays in the model (a checkpoint saved from it is the whole
    backbone's) but never runs: Trainer's DDP needs ``find_unused_parameters`` for it, or freeze it.

    Refused (``ValueError``) when the backbone takes no token ids at all (Perceiver, whose forward takes ``inputs``
    through a preprocessor and returns latents rather than one state per token); ``checked``: the model was built,
    so the backbone passed this check."""
    module = backbone.get_encoder() if is_encoder_decoder(backbone.config) else backbone
    if not checked and "input_ids" not in inspect.signature(module.forward).parameters:
        raise ValueError(
            f"{type(backbone).__name__} takes no input_ids and gives no hidden state per input token (its forward "
            f"takes {', '.join(list(inspect.signature(module.forward).parameters)[:3])}, ...), so no pooling applies "
            "to it: every pooling reduces one state per token under the attention mask. Poolings that work with it: "
            "none; use the backbone's own task model instead."
        )
    return module


def input_embeddings_of(backbone: nn.Module) -> nn.Module | None:
    """The input embedding module the backbone runs (an encoder-decoder's: its encoder's, a module of its own that
    shares the weight of ``get_input_embeddings()``); None where it has none to give (Canine hashes characters, and
    its ``get_input_embeddings`` raises): only a pooler that writes into the input needs one."""
    if is_encoder_decoder(getattr(backbone, "config", None)):
        encoder = backbone.get_encoder()
        if isinstance(getattr(encoder, "embed_tokens", None), nn.Module):
            return encoder.embed_tokens
    try:
        return backbone.get_input_embeddings()
    except (NotImplementedError, AttributeError):
        return None


def position_offset(backbone: nn.Module) -> int:
    """First position id of a real token: padding_idx + 1 for RoBERTa-style embeddings, else 0."""
    embeddings = getattr(backbone, "embeddings", None)
    position_embeddings = getattr(embeddings, "position_embeddings", None)
    if isinstance(position_embeddings, nn.Embedding) and position_embeddings.padding_idx is not None:
        return position_embeddings.padding_idx + 1
    return 0


def position_ids_from_mask(attention_mask: torch.Tensor, offset: int) -> torch.Tensor:
    """Positions counted over real tokens only, so left and right padding give a text the same positions.

    Padding gets the padding index where the backbone reserves one (``offset - 1``), else 0.
    """
    real = attention_mask != 0
    positions = (real.long().cumsum(dim=-1) - 1).clamp(min=0) + offset
    return positions.masked_fill(~real, max(offset - 1, 0))
