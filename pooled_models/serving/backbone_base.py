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

    def load_weights(self, module: nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load the checkpoint's backbone weights (names as transformers saves them); the parameters loaded."""
        return set(module.load_weights(weights))

    def _side_by_side(self, states: dict[int, torch.Tensor]) -> torch.Tensor:
        return torch.cat([states[index] for index in self.layers], dim=-1)
