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


def backbone_class(backbone_config) -> type[PreTrainedModel]:
    """AutoModel's class for the config. Where transformers maps a type to several base models (Funnel: the
    full-length ``FunnelModel`` and the pooled ``FunnelBaseModel``), the one the config's ``architectures`` names,
    else the first: transformers' own ``_get_model_class`` rule, which fails on a config whose ``architectures`` is
    None (``TypeError: 'NoneType' object is not iterable``), as every config built in code has."""
    if type(backbone_config) not in MODEL_MAPPING:
        raise ValueError(
            f"transformers has no AutoModel class for backbone model_type {backbone_config.model_type!r}."
        )
    classes = MODEL_MAPPING[type(backbone_config)]
    if not isinstance(classes, (list, tuple)):
        return classes
    named = set(getattr(backbone_config, "architectures", None) or [])
    return next((model_class for model_class in classes if model_class.__name__ in named), classes[0])


def _backbone_init_kwargs(backbone_config) -> dict[str, Any]:
    # BERT-style backbones build a dense+tanh pooler on the first token; no pooling here calls it.
    parameters = inspect.signature(backbone_class(backbone_config).__init__).parameters
    return {"add_pooling_layer": False} if "add_pooling_layer" in parameters else {}


def _drop_unused_modules(backbone: PreTrainedModel) -> PreTrainedModel:
    for name in UNUSED_BACKBONE_MODULES:
        if isinstance(getattr(backbone, name, None), nn.Module):
            setattr(backbone, name, None)
    return backbone


def build_backbone(backbone_config) -> PreTrainedModel:
    """A randomly initialised backbone (weights come later from ``from_pretrained``)."""
    # The class's own _from_config, which AutoModel.from_config calls once it has picked the class.
    return _drop_unused_modules(
        backbone_class(backbone_config)._from_config(
            backbone_config, **_backbone_init_kwargs(backbone_config)
        )
    )


_UNSET = object()


@contextlib.contextmanager
def _expect_dropped_weights(model_class: type[PreTrainedModel], init_kwargs: dict[str, Any]):
    """Keep the load report quiet about the checkpoint weights of the modules we chose not to build."""
    dropped = list(UNUSED_BACKBONE_MODULES) + (
        ["pooler"] if init_kwargs.get("add_pooling_layer") is False else []
    )
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


def load_backbone(name_or_path: str | os.PathLike, backbone_config, **kwargs) -> PreTrainedModel:
    """The pretrained backbone, read from safetensors only."""
    model_class = backbone_class(backbone_config)
    init_kwargs = _backbone_init_kwargs(backbone_config)
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
