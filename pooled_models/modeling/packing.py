"""Padding-free (packed) batches: a batch's texts concatenated into a few rows, each text with its own positions and
attention that cannot cross from one text to another.

One layout, two ways of telling the backbone's attention where the texts are:

* every attention implementation that takes a mask (``sdpa``, ``eager``, ``flex_attention``): texts are packed
  first-fit, longest first, into rows as long as the batch's longest text, and a block-diagonal mask (built by
  transformers' own mask helpers, in the format each implementation takes) keeps every text to itself. A row is
  never longer than the padded batch, so its attention never costs more than a padded row's.
* ``flash_attention_*`` (varlen kernels, GPU only): every text in one row without padding, no mask, and the
  ``cu_seq_lens_*`` / ``max_length_*`` arguments transformers hands to ``flash_attn_varlen_func``. This path is
  written to transformers' documented arguments but not tested here (no GPU, no flash-attn).

After the backbone, every hidden state is put back in the padded ``[batch, seq_len, hidden]`` layout (zeros at the
padding), so every pooling, layer poolings and label tokens included, reads it unchanged.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import torch
from torch import nn
from transformers.masking_utils import (
    create_bidirectional_mask,
    create_bidirectional_sliding_window_mask,
    create_causal_mask,
    create_sliding_window_causal_mask,
    packed_sequence_mask_function,
)
from transformers.modeling_outputs import BaseModelOutput

from .varlen_attention import TORCH_VARLEN

__all__ = ["PackedLayout", "packing_refusal", "run_packed", "VARLEN_IMPLEMENTATIONS"]

# Attention implementations that take the texts' boundaries as cumulative lengths (no mask at all).
VARLEN_IMPLEMENTATIONS = ("flash_attention_2", "flash_attention_3", "flash_attention_4", TORCH_VARLEN)
# Layer types whose packed mask transformers' helpers build: name -> (bidirectional, causal) helper.
MASK_HELPERS = {
    "full_attention": (create_bidirectional_mask, create_causal_mask),
    "sliding_attention": (create_bidirectional_sliding_window_mask, create_sliding_window_causal_mask),
}
# Row padding's text id: it attends to itself only, so no query row of the mask is empty (an empty row is NaN in sdpa).
ROW_PADDING = -1


class PackedLayout:
    """Where each real token of a padded ``[B, T]`` batch sits in the packed ``[R, C]`` rows.

    Built from the attention mask alone, so left and right padding pack alike.
    """

    def __init__(self, attention_mask: torch.Tensor, one_row: bool = False):
        real = attention_mask != 0
        batch, length = real.shape
        device = real.device
        lengths = real.sum(dim=1).tolist()
        rows, starts, self.num_rows, width = _first_fit(
            lengths, sum(lengths) if one_row else max(lengths, default=0)
        )
        self.batch, self.length, self.width = batch, length, width
        self.real = real
        rank = real.long().cumsum(dim=1) - 1
        first_slot = torch.tensor(rows, device=device) * width + torch.tensor(starts, device=device)
        # [B, T]: the flat packed slot (row * width + column) of each real token; 0 for padding (masked on unpacking).
        self.slot_of_token = torch.where(real, first_slot.unsqueeze(1) + rank, 0)
        slots = self.slot_of_token[real]
        flat = self.num_rows * width
        # [R * C]: the flat padded index (b * T + t) of the token at each slot; 0 in the row padding.
        self.source = torch.zeros(flat, dtype=torch.long, device=device)
        self.source[slots] = torch.arange(batch * length, device=device).view(batch, length)[real]
        self.filled = torch.zeros(flat, dtype=torch.bool, device=device)
        self.filled[slots] = True
        self.text_ids = torch.full((flat,), ROW_PADDING, dtype=torch.long, device=device)
        self.text_ids[slots] = torch.arange(batch, device=device).unsqueeze(1).expand(batch, length)[real]
        self.text_ids = self.text_ids.view(self.num_rows, width)
        # The texts in packing order with their lengths: the cumulative lengths of varlen attention (one row).
        order = sorted(zip(rows, starts, lengths, strict=True))
        self.packed_lengths = [size for _, _, size in order if size]

    def pack(self, values: torch.Tensor, fill: Any) -> torch.Tensor:
        """``[B, T, ...]`` -> ``[R, C, ...]``, with ``fill`` in the row padding."""
        tail = values.shape[2:]
        gathered = values.reshape(self.batch * self.length, *tail)[self.source]
        filled = self.filled.view(-1, *([1] * len(tail)))
        packed = torch.where(
            filled, gathered, torch.as_tensor(fill, dtype=values.dtype, device=values.device)
        )
        return packed.view(self.num_rows, self.width, *tail)

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """``[R, C, H]`` -> ``[B, T, H]``, zeros at the padding (no pooling reads it)."""
        hidden = packed.shape[-1]
        tokens = packed.reshape(-1, hidden)[self.slot_of_token.view(-1)].view(self.batch, self.length, hidden)
        return tokens.masked_fill(~self.real.unsqueeze(-1), 0.0)

    def varlen_arguments(self, device: torch.device) -> dict[str, Any]:
        """The texts' boundaries as flash-attention varlen takes them (one row, no padding)."""
        lengths = torch.tensor(self.packed_lengths or [0], dtype=torch.int32, device=device)
        cumulative = torch.nn.functional.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
        longest = max(self.packed_lengths, default=0)
        return {
            "cu_seq_lens_q": cumulative,
            "cu_seq_lens_k": cumulative,
            "max_length_q": longest,
            "max_length_k": longest,
        }


def _first_fit(lengths: list[int], capacity: int) -> tuple[list[int], list[int], int, int]:
    """Row and start column of each text, first-fit, longest first, in rows of ``capacity`` tokens; the number of
    rows and their width (at least one row of one slot, so a batch without a real token still has a row to run)."""
    rows, starts = [0] * len(lengths), [0] * len(lengths)
    used: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if not lengths[index]:
            continue  # a text without a real token takes no slot; unpacking gives it zeros
        row = next((r for r, filled in enumerate(used) if filled + lengths[index] <= capacity), len(used))
        if row == len(used):
            used.append(0)
        rows[index], starts[index] = row, used[row]
        used[row] += lengths[index]
    return rows, starts, max(len(used), 1), max(capacity, 1)


# ----------------------------------------------------------------------------------------------------
# Which backbones can run packed
# ----------------------------------------------------------------------------------------------------


def packing_refusal(backbone: nn.Module, varlen: bool = False) -> str | None:
    """Why ``backbone`` cannot run packed rows, or None when it can; ``varlen``: rows whose texts' boundaries go to a
    varlen attention kernel (``torch_varlen``, flash attention) rather than into a mask.

    Packing needs a backbone that (1) keeps its texts apart: with a mask, by building it with transformers' mask
    helpers, which pass a prepared 4-D mask through unchanged (DeBERTa-v2 builds its own from a 2-D mask); with a
    varlen kernel, by computing attention through transformers' ``AttentionInterface``, which hands the kernel the
    boundaries (DeBERTa-v2 and MPNet compute it in their own modules); (2) takes position ids, so each text's
    positions restart in its row (relative schemes like rotary then see the same distances), and (3) has only layer
    types that both ways handle (full and sliding-window attention). Its embeddings must not read the 2-D mask
    either (ESM's do).
    """
    name = type(backbone).__name__
    refusal = _attention_backend_refusal(backbone) if varlen else _mask_helpers_refusal(backbone)
    if refusal is not None:
        return refusal
    embeddings = getattr(backbone, "embeddings", None)
    if (
        isinstance(embeddings, nn.Module)
        and "attention_mask" in inspect.signature(embeddings.forward).parameters
    ):
        return (
            f"{name}'s embeddings read the [batch, seq_len] attention mask (ESM scales each text's embeddings by it), "
            "which a packed row does not have"
        )
    if "position_ids" not in inspect.signature(backbone.forward).parameters:
        return f"{name} takes no position_ids, so the texts of a packed row cannot each start at position 0"
    unknown = sorted(set(getattr(backbone.config, "layer_types", None) or ()) - set(MASK_HELPERS))
    if unknown:
        return f"{name} has layers of type {', '.join(unknown)}, whose packed attention is not built here"
    return None


def _mask_helpers_refusal(backbone: nn.Module) -> str | None:
    module = sys.modules.get(type(backbone).__module__)
    if not any(hasattr(module, helper) for helper in ("create_bidirectional_mask", "create_causal_mask")):
        return (
            f"{type(backbone).__name__} builds its attention mask itself from a [batch, seq_len] mask, so it cannot "
            "take the block-diagonal mask that keeps packed texts apart"
        )
    return None


def _attention_backend_refusal(backbone: nn.Module) -> str | None:
    if not getattr(type(backbone), "_supports_attention_backend", False):
        return (
            f"{type(backbone).__name__} computes attention in its own modules, not through transformers' "
            "AttentionInterface (its class does not set _supports_attention_backend), so no varlen kernel can be "
            "given the texts' boundaries"
        )
    return None


def _is_causal(backbone: nn.Module) -> bool:
    # Attention modules say whether they are causal (BERT's says False unless is_decoder, Llama's and GPT-2's True).
    return any(getattr(module, "is_causal", False) is True for module in backbone.modules())


def _attention_arguments(
    backbone: nn.Module, layout: PackedLayout, embeddings: torch.Tensor
) -> dict[str, Any]:
    config = backbone.config
    if config._attn_implementation in VARLEN_IMPLEMENTATIONS:
        return {"attention_mask": None, **layout.varlen_arguments(embeddings.device)}
    same_text = packed_sequence_mask_function(layout.text_ids)
    causal = _is_causal(backbone)

    def mask_for(layer_type: str):
        helper = MASK_HELPERS[layer_type][1 if causal else 0]
        arguments = {"config": config, "inputs_embeds": embeddings, "attention_mask": None}
        if causal:
            arguments["past_key_values"] = None
        return helper(**arguments, and_mask_function=same_text)

    layer_types = set(getattr(config, "layer_types", None) or ())
    if layer_types - {"full_attention"}:
        # Backbones with sliding-window layers (ModernBERT) take one mask per layer type.
        return {"attention_mask": {layer_type: mask_for(layer_type) for layer_type in sorted(layer_types)}}
    return {"attention_mask": mask_for("full_attention")}


def run_packed(backbone: nn.Module, inputs: dict[str, Any], pad_token_id: int, padding_position: int):
    """Run ``backbone`` on the packed rows of the padded ``inputs`` (``attention_mask``, ``position_ids`` and
    ``input_ids`` or ``inputs_embeds``, optional ``token_type_ids``, and other keyword arguments for the backbone);
    its outputs with every hidden state back in the padded layout."""
    inputs = dict(inputs)
    if inputs.get("output_attentions"):
        raise ValueError(
            "output_attentions is not available with packed_batches=True: the attention maps are those of the packed "
            "rows, not of each text. Set model.config.packed_batches = False to read them."
        )
    attention_mask = inputs.pop("attention_mask")
    varlen = backbone.config._attn_implementation in VARLEN_IMPLEMENTATIONS
    layout = PackedLayout(attention_mask, one_row=varlen)
    input_ids, inputs_embeds = inputs.pop("input_ids", None), inputs.pop("inputs_embeds", None)
    if input_ids is not None:
        inputs["input_ids"] = layout.pack(input_ids, pad_token_id)
    else:
        inputs["inputs_embeds"] = layout.pack(inputs_embeds, 0.0)
    inputs["position_ids"] = layout.pack(inputs["position_ids"], padding_position)
    if inputs.get("token_type_ids") is not None:
        inputs["token_type_ids"] = layout.pack(inputs["token_type_ids"], 0)
    # Only the shape, dtype and device of the embeddings are read by the mask helpers.
    reference = inputs.get("inputs_embeds")
    if reference is None:
        dtype = backbone.get_input_embeddings().weight.dtype
        reference = torch.empty(layout.num_rows, layout.width, 0, dtype=dtype, device=input_ids.device)
    inputs.update(_attention_arguments(backbone, layout, reference))
    outputs = backbone(**inputs, return_dict=True)
    hidden_states = outputs.hidden_states
    if hidden_states is not None:
        hidden_states = tuple(None if state is None else layout.unpack(state) for state in hidden_states)
    return BaseModelOutput(
        last_hidden_state=layout.unpack(outputs.last_hidden_state), hidden_states=hidden_states
    )
