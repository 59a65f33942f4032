"""vLLM's own implementations of the backbones the plugin serves: how to build one, run it, and load its weights.

An encoder (BERT and the RoBERTa family) is vLLM's ``BertModel``; the plugin runs its embeddings and layers itself so
that a layer pooling gets every hidden state it reads (``hidden_states[0]`` the embedding output, ``[i]`` layer i's
output, as transformers numbers them), side by side in one ``[tokens, k * hidden]`` tensor. A decoder is vLLM's own
``LlamaModel`` or ``Qwen2Model``, whose forward gives the last layer after its final norm (transformers'
``last_hidden_state``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from vllm.config import VllmConfig

from .support import DECODER_BACKBONES, ENCODER_BACKBONES

__all__ = ["Backbone", "backbone_for"]

# The class vLLM gives each backbone architecture; the backbone's vllm_config names it.
_ARCHITECTURES = {
    "bert": "BertModel",
    "roberta": "RobertaModel",
    "xlm-roberta": "XLMRobertaModel",
    "camembert": "CamembertModel",
    "llama": "LlamaModel",
    "qwen2": "Qwen2Model",
}


class Backbone:
    """One family's way to build, run and load vLLM's implementation of a backbone."""

    def build(self, vllm_config: VllmConfig, prefix: str) -> nn.Module:
        raise NotImplementedError

    def run(
        self,
        module: nn.Module,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        layers: list[int] | None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``[tokens, hidden]`` (the last layer), or the states of ``layers`` concatenated on the last dimension;
        ``inputs_embeds``: the token embeddings to use instead of looking ``input_ids`` up (label markers)."""
        raise NotImplementedError

    def load_weights(self, module: nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load the checkpoint's backbone weights (names as transformers saves them); the parameters loaded."""
        return set(module.load_weights(weights))


class EncoderBackbone(Backbone):
    """vLLM's BertModel, with RoBERTa's position offset (padding_idx + 1) for the RoBERTa family."""

    def __init__(self, roberta_positions: bool):
        self.roberta_positions = roberta_positions

    def build(self, vllm_config, prefix):
        from vllm.model_executor.models.bert import BertEmbedding, BertModel
        from vllm.model_executor.models.roberta import RobertaEmbedding

        embedding_class = RobertaEmbedding if self.roberta_positions else BertEmbedding
        return BertModel(vllm_config=vllm_config, prefix=prefix, embedding_class=embedding_class)

    def run(self, module, input_ids, positions, layers, inputs_embeds=None):
        hidden = module.embeddings(input_ids=input_ids, position_ids=positions, inputs_embeds=inputs_embeds)
        if layers is None:
            return module.encoder(hidden)
        states = [hidden]
        for layer in module.encoder.layer:
            hidden = layer(hidden)
            states.append(hidden)
        return torch.cat([states[index] for index in layers], dim=-1)


class DecoderBackbone(Backbone):
    """vLLM's own decoder model (Llama, Qwen2): its forward gives the final-norm states of the last layer."""

    def __init__(self, model_type: str):
        self.model_type = model_type

    def build(self, vllm_config, prefix):
        if self.model_type == "llama":
            from vllm.model_executor.models.llama import LlamaModel as model_class
        else:
            from vllm.model_executor.models.qwen2 import Qwen2Model as model_class
        return model_class(vllm_config=vllm_config, prefix=prefix)

    def run(self, module, input_ids, positions, layers, inputs_embeds=None):
        if layers is not None:  # support.refusal refuses layer poolings on decoders before anything is built
            raise ValueError("layer poolings are not served on decoder backbones")
        return module(
            input_ids=input_ids, positions=positions, intermediate_tensors=None, inputs_embeds=inputs_embeds
        )


def backbone_for(model_type: str) -> tuple[Backbone, str]:
    """The family of a backbone model type, and the architecture name vLLM knows it by."""
    if model_type in ENCODER_BACKBONES:
        return EncoderBackbone(roberta_positions=model_type != "bert"), _ARCHITECTURES[model_type]
    if model_type in DECODER_BACKBONES:
        return DecoderBackbone(model_type), _ARCHITECTURES[model_type]
    raise ValueError(f"no vLLM backbone for model type {model_type!r}")
