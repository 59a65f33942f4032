"""What every backbone family of the plugin answers: how to build, run and load its module (backbones.py holds vLLM's
families, transformers_backbone.py the transformers route)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from vllm.config import VllmConfig

__all__ = ["Backbone"]


class Backbone:
    """One family's way to build, run and load a backbone."""

    def __init__(self, pooled_config, architecture: str, layers: list[int] | None):
        self.pooled_config = pooled_config
        self.architecture = architecture
        self.layers = layers
        self.model_type = pooled_config.backbone_config.model_type

    def backbone_config(self):
        """The config vLLM's implementation reads: the backbone's (Gemma 3's composite config: its text config)."""
        backbone = self.pooled_config.backbone_config
        return backbone.text_config if self.model_type == "gemma3" else backbone

    def build(self, vllm_config: VllmConfig, prefix: str) -> nn.Module:
        config = vllm_config.with_hf_config(self.backbone_config(), architectures=[self.architecture])
        return self.model_class()(vllm_config=config, prefix=prefix)

    def model_class(self) -> type[nn.Module]:
        raise NotImplementedError

    def run(
        self,
        module: nn.Module,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``[tokens, hidden]`` (the last layer), or the states of ``self.layers`` concatenated on the last dim;
        ``inputs_embeds``: the token embeddings to use instead of looking ``input_ids`` up (label markers)."""
        raise NotImplementedError

    def connect_label_pooling(self, module: nn.Module, pooling: nn.Module) -> None:
        """Fit a label pooling (label text, label tokens) to the backbone as transformers does, and make ``module``
        read its label markers (ids at or past the vocabulary) where the family reads them from the ids themselves
        (the transformers route); vLLM's families take them as input embeddings in ``run_marked`` instead."""

    def transformers_state(
        self, module: nn.Module, weights: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """The backbone's weights under the names of transformers' module (what the checkpoint's own transformers
        model loads), from the checkpoint's ``weights`` or the loaded ``module``."""
        return weights

    def run_marked(
        self, module: nn.Module, input_ids: torch.Tensor, positions: torch.Tensor, markers: nn.Module
    ) -> torch.Tensor:
        """``run`` on a prompt whose ids at or past the vocabulary are label markers (label text) or label tokens:
        their learned vectors (``markers.marked_embeddings``) replace the looked-up token embeddings, as transformers'
        ``LabelTokenInput`` replaces the output of the backbone's token embedding table (before anything the backbone
        adds: positions, token types, a norm, a scale)."""
        inputs_embeds = markers.marked_embeddings(self.token_embeddings(module), input_ids)
        return self.run(module, input_ids.clamp(max=markers.vocabulary - 1), positions, inputs_embeds)

    def token_embeddings(self, module: nn.Module):
        """The function vLLM's model looks ids up with: what transformers' token embedding table gives (its
        ``get_input_embeddings()``, Gemma's scale included), before positions, token types or a norm are added."""
        return module.embed_input_ids

    def load_weights(self, module: nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load the checkpoint's backbone weights (names as transformers saves them); the parameters loaded."""
        return set(module.load_weights(weights))

    def _side_by_side(self, states: dict[int, torch.Tensor]) -> torch.Tensor:
        return torch.cat([states[index] for index in self.layers], dim=-1)
