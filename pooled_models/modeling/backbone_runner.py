"""How a pooled model holds and runs its backbone: the inputs the backbone takes (token type ids, position ids, a
cache switch), positions counted from the mask, the position budget, and packed batches (``packing.py``); and the
plain object a pooler runs the backbone through (:class:`BackboneCall`).

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from .backbone import (
    POSITION_IDS_REFUSED,
    build_backbone,
    position_ids_from_mask,
    position_offset,
    states_mask,
    token_states_module,
)
from .configuration_pooled import PooledConfig
from .packing import VARLEN_IMPLEMENTATIONS, packing_refusal, run_packed
from .padding_free import FlatBatch
from .text_config import max_positions_of
from .varlen_attention import TORCH_VARLEN

__all__ = ["BackboneRunner", "BackboneCall", "FLAT_BATCH"]

# Where _model_inputs puts a padding-free batch's layout among a forward's inputs, for _backbone_call to take out.
FLAT_BATCH = "_flat_batch"


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
        flat_batch: FlatBatch | None = None,
        **kwargs,
    ):
        """Call the backbone with the inputs it takes; position ids come from the mask unless given. With
        ``config.packed_batches`` the backbone runs on the packed rows and its hidden states come back padded. A
        padding-free batch's padded inputs (``flat_batch`` given, the inputs it padded passed on unchanged) run as its
        one row, where the backbone's attention reads the texts' boundaries (:meth:`runs_flat_rows`)."""
        padded = {"input_ids": input_ids, "inputs_embeds": inputs_embeds, "attention_mask": attention_mask}
        padded["token_type_ids"] = token_type_ids
        if flat_batch is not None and self.runs_flat_rows() and flat_batch.passes_unchanged(padded):
            self._check_packable_once()
            return self._run_flat(flat_batch, position_ids, output_hidden_states, kwargs)
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
        # batch, which gives the same outputs. torch_varlen takes no mask, so a padded batch is packed for it.
        packs = getattr(self.config, "packed_batches", False) or self._takes_no_mask()
        if packs and not torch.compiler.is_compiling():
            self._check_packable_once()
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

    def runs_flat_rows(self) -> bool:
        """Whether the backbone's attention takes a padding-free row (torch_varlen, flash attention); elsewhere a
        padding-free batch runs padded, with the same outputs."""
        return self.backbone.config._attn_implementation in VARLEN_IMPLEMENTATIONS

    def _takes_no_mask(self) -> bool:
        return self.backbone.config._attn_implementation == TORCH_VARLEN

    def _check_packable_once(self) -> None:
        # Once per backbone and attention implementation, not at every batch.
        key = (id(self.backbone), self.backbone.config._attn_implementation)
        if self.__dict__.get("_packable_backbone") != key:
            self.check_packable()
            self._packable_backbone = key

    def _run_flat(self, flat: FlatBatch, position_ids, output_hidden_states: bool, kwargs):
        """The backbone on the batch's one row, its hidden states put back in the padded layout."""
        row = dict(flat.flat_inputs)
        if "token_type_ids" not in self._backbone_takes:
            row.pop("token_type_ids", None)
        if "position_ids" in self._backbone_takes and "position_ids" not in row:
            if position_ids is not None:  # given padded: the row's own, read back from the padded layout
                row["position_ids"] = position_ids.reshape(-1)[flat.slot].unsqueeze(0)
            elif self.config.position_ids_from_mask:
                row["position_ids"] = flat.positions(self._position_offset)
        if "use_cache" in self._backbone_takes:
            row["use_cache"] = False
        outputs = token_states_module(self.backbone, checked=True)(
            **row,
            attention_mask=None,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **flat.backbone_arguments(),
            **kwargs,
        )
        states = outputs.hidden_states
        if states is not None:
            states = tuple(None if state is None else flat.padded(state[0], 0.0) for state in states)
        return BaseModelOutput(
            last_hidden_state=flat.padded(outputs.last_hidden_state[0], 0.0), hidden_states=states
        )

    def check_packable(self) -> None:
        """Raise ``ValueError`` if ``packed_batches=True`` cannot work with this model's backbone."""
        refusal = packing_refusal(self.backbone, varlen=self.runs_flat_rows())
        if refusal is None and "position_ids" not in self._backbone_takes:
            refusal = f"{type(self.backbone).__name__} takes no position_ids"
        if refusal is not None:
            if self._takes_no_mask():
                raise ValueError(
                    f"attn_implementation='torch_varlen' runs padding-free rows, and {refusal}. Use "
                    "attn_implementation='sdpa' for this backbone (train.py: --padding_free false)."
                )
            raise ValueError(
                f"packed_batches=True: {refusal}. Set packed_batches=False for this backbone (batches are then "
                "padded; train.py groups texts of similar length, which keeps the padding small)."
            )

    def _backbone_call(self, inputs: dict[str, Any] | None = None) -> BackboneCall:
        """The call poolers run the backbone through; a padding-free batch's layout (``inputs[FLAT_BATCH]``, taken
        out of ``inputs``) goes with it."""
        flat = None if inputs is None else inputs.pop(FLAT_BATCH, None)
        run = self.run_backbone if flat is None else functools.partial(self.run_backbone, flat_batch=flat)
        return BackboneCall(run, self.backbone, self.position_budget, self.pad_token_id)


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
