"""How a pooled model holds and runs its backbone: the inputs the backbone takes (token type ids, position ids, a
cache switch), positions counted from the mask, the position budget, and packed batches (``packing.py``); and the
plain object a pooler runs the backbone through (:class:`BackboneCall`).

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from .backbone import (
    POSITION_IDS_REFUSED,
    build_backbone,
    position_ids_from_mask,
    position_offset,
    states_mask,
    token_states_module,
)
from .configuration_pooled import PooledConfig
from .packing import packing_refusal, run_packed
from .text_config import max_positions_of

__all__ = ["BackboneRunner", "BackboneCall"]


class BackboneRunner:
    """Mixed into ``PooledPreTrainedModel``: the model's backbone, set up and run with the inputs it takes."""

    def _set_backbone(self, config: PooledConfig, backbone: PreTrainedModel | None) -> None:
        if backbone is None:
            backbone = build_backbone(config.backbone_config, per_token=self._reads_every_token(config))
        else:
            config.backbone_config = backbone.config  # one config object for the backbone we hold
        self.backbone = backbone
        # What runs: the backbone, or an encoder-decoder's encoder (backbone.token_states_module says why, and refuses
        # a backbone without token states).
        accepted = inspect.signature(token_states_module(backbone).forward).parameters
        self._backbone_takes = {
            name for name in ("token_type_ids", "position_ids", "use_cache") if name in accepted
        }
        if getattr(backbone.config, "model_type", None) in POSITION_IDS_REFUSED:
            self._backbone_takes.discard("position_ids")
        self._position_offset = position_offset(self.backbone)
        max_positions = max_positions_of(config)
        # How many positions a sequence may use (RoBERTa-style embeddings reserve padding_idx + 1 of them).
        self.position_budget = None if max_positions is None else max_positions - self._position_offset
        if getattr(config, "packed_batches", False):
            self.check_packable()  # refused when built, not at the first batch

    def run_backbone(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        **kwargs,
    ):
        """Call the backbone with the inputs it takes; position ids come from the mask unless given. With
        ``config.packed_batches`` the backbone runs on the packed rows and its hidden states come back padded."""
        backbone_inputs: dict[str, Any] = {"attention_mask": attention_mask}
        # A tokenizer may return token_type_ids that the backbone (DistilBERT, ModernBERT...) has no use for.
        if token_type_ids is not None and "token_type_ids" in self._backbone_takes:
            backbone_inputs["token_type_ids"] = token_type_ids
        if (
            position_ids is None
            and self.config.position_ids_from_mask
            and "position_ids" in self._backbone_takes
        ):
            position_ids = position_ids_from_mask(attention_mask, self._position_offset)
        if position_ids is not None:
            backbone_inputs["position_ids"] = position_ids
        if "use_cache" in self._backbone_takes:
            backbone_inputs["use_cache"] = False  # decoders would otherwise build a KV cache nobody reads
        # Packing reads the batch's lengths (data-dependent shapes): compiled and exported graphs run the padded
        # batch, which gives the same outputs.
        if getattr(self.config, "packed_batches", False) and not torch.compiler.is_compiling():
            if self.__dict__.get("_packable_backbone") != id(self.backbone):
                self.check_packable()  # once per backbone, not at every batch
                self._packable_backbone = id(self.backbone)
            return run_packed(
                self.backbone,
                {
                    "input_ids": input_ids,
                    "inputs_embeds": inputs_embeds,
                    "output_hidden_states": output_hidden_states,
                    **backbone_inputs,
                    **kwargs,
                },
                self.pad_token_id,
                padding_position=max(self._position_offset - 1, 0),
            )
        return token_states_module(self.backbone, checked=True)(
            input_ids=input_ids,
            inputs_embeds=inputs_embeds,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **backbone_inputs,
            **kwargs,
        )

    def check_packable(self) -> None:
        """Raise ``ValueError`` if ``packed_batches=True`` cannot work with this model's backbone."""
        refusal = packing_refusal(self.backbone)
        if refusal is None and "position_ids" not in self._backbone_takes:
            refusal = f"{type(self.backbone).__name__} takes no position_ids"
        if refusal is not None:
            raise ValueError(
                f"packed_batches=True: {refusal}. Set packed_batches=False for this backbone (batches are then "
                "padded; train.py groups texts of similar length, which keeps the padding small)."
            )

    def _backbone_call(self) -> BackboneCall:
        return BackboneCall(self.run_backbone, self.backbone, self.position_budget, self.pad_token_id)


class BackboneCall:
    """What a pooler needs of the model to run the backbone itself. A plain object, not the model: a module passed
    to a forward would be moved as a whole by accelerate's device hooks (they call ``.to`` on every argument)."""

    def __init__(self, run, backbone: nn.Module, position_budget: int | None, pad_token_id: int):
        self.run_backbone = run
        self.backbone = backbone
        self.position_budget = position_budget
        self.pad_token_id = pad_token_id

    def states_mask(self, attention_mask: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """The mask of the backbone's output states (the input's, pooled where the backbone pools the sequence)."""
        return states_mask(self.backbone, attention_mask, states)
