"""Padding-free batches in transformers' format: every text of the batch in one row, back to back, and where each
begins as cumulative lengths (what ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)`` gives, and
train.py's padding-free collator):

* ``input_ids`` (or ``inputs_embeds``, ``token_type_ids``) ``[1, total tokens]``, no attention mask;
* ``cu_seq_lens_q`` ``[texts + 1]`` (int32), ``cu_seq_lens_k`` the same, and ``max_length_q`` / ``max_length_k``,
  the longest text's length, as a Python int.

A pooled model takes such a batch as it takes a padded one. :class:`FlatBatch` lays it out both ways, on the device
and without reading a value back to the host (the longest length is an int the caller gives, the rest comes from
tensor shapes): the backbone runs the one row with the boundaries passed to its attention (``torch_varlen`` or
flash attention, which read them), and every hidden state it returns is put in the padded ``[texts, longest,
hidden]`` layout the poolers read, with the mask of real tokens. Each text gets its own positions from its offset in
the row, plus the backbone's position offset (RoBERTa and XLM-R count from ``padding_idx + 1``: transformers#47496
is what 0-based positions do to them). A pooler that edits the input (label tokens and label text insert their
labels) gets the padded ids and mask and runs the backbone itself, as for any padded batch.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["FLAT_KEYS", "FlatBatch", "flat_batch_from"]

# The keyword arguments of a padding-free batch (transformers' FlashAttentionKwargs).
FLAT_KEYS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


class FlatBatch:
    """One padding-free row of ``texts`` texts, laid out for the backbone (the row) and for the poolers (padded)."""

    def __init__(self, boundaries: torch.Tensor, longest: int, total: int):
        self.boundaries = boundaries.to(torch.int32)
        self.texts = boundaries.numel() - 1
        self.longest = longest
        self.total = total
        token = torch.arange(total, device=boundaries.device)
        starts = boundaries.long()
        # [tokens]: each token's text (a text without tokens has none: searchsorted steps over it) and its place in it.
        text = torch.searchsorted(starts[1:], token, right=True)
        self.place = token - starts[text]
        self.slot = text * longest + self.place  # the token's index in the padded [texts * longest] layout
        self.attention_mask = self.padded(torch.ones(total, dtype=torch.long, device=boundaries.device), 0)
        # The padded inputs handed to the pooler: the backbone runs the row only while a pooler passes these on.
        self.padded_inputs: dict[str, torch.Tensor | None] = {}
        self.flat_inputs: dict[
            str, torch.Tensor
        ] = {}  # the row's own input_ids (or embeddings), token types...

    def padded(self, flat: torch.Tensor, fill: Any) -> torch.Tensor:
        """``[tokens, ...]`` -> ``[texts, longest, ...]``, ``fill`` at the padding."""
        tail = flat.shape[1:]
        padded = torch.full((self.texts * self.longest, *tail), fill, dtype=flat.dtype, device=flat.device)
        return padded.index_copy(0, self.slot, flat).view(self.texts, self.longest, *tail)

    def positions(self, offset: int) -> torch.Tensor:
        """``[1, tokens]``: each token's position in its own text, from ``offset``."""
        return (self.place + offset).unsqueeze(0)

    def backbone_arguments(self) -> dict[str, Any]:
        return {
            "cu_seq_lens_q": self.boundaries,
            "cu_seq_lens_k": self.boundaries,
            "max_length_q": self.longest,
            "max_length_k": self.longest,
        }

    def passes_unchanged(self, inputs: dict[str, Any]) -> bool:
        """Whether ``inputs`` are the padded inputs this batch gave the pooler, not a pooler's edit of them."""
        return all(inputs.get(name) is value for name, value in self.padded_inputs.items())


def flat_batch_from(inputs: dict[str, Any], pad_token_id: int) -> tuple[FlatBatch, dict[str, Any]]:
    """``(FlatBatch, the padded inputs)`` of a padding-free call's keyword arguments ``inputs`` (``input_ids`` or
    ``inputs_embeds``, ``cu_seq_lens_q``...; the ``FLAT_KEYS`` are taken out). The batch keeps the row's own inputs
    (``flat_inputs``) for the backbone."""
    given = {name: inputs.pop(name) for name in FLAT_KEYS if name in inputs}
    boundaries, longest = given["cu_seq_lens_q"], given.get("max_length_q")
    row = inputs["input_ids"] if inputs.get("input_ids") is not None else inputs.get("inputs_embeds")
    _check_flat(inputs, row, boundaries, longest, given.get("cu_seq_lens_k"))
    flat = FlatBatch(boundaries.to(row.device), int(longest), row.shape[1])
    flat_inputs = {
        name: inputs.get(name)
        for name in ("input_ids", "inputs_embeds", "token_type_ids", "position_ids")
        if inputs.get(name) is not None
    }
    fills = {"input_ids": pad_token_id, "inputs_embeds": 0.0, "token_type_ids": 0, "position_ids": 0}
    padded = dict(inputs)
    for name, value in flat_inputs.items():
        padded[name] = flat.padded(value[0], fills[name])
    padded["attention_mask"] = flat.attention_mask
    flat.padded_inputs = {
        name: padded.get(name) for name in ("input_ids", "inputs_embeds", "attention_mask", "token_type_ids")
    }
    flat.flat_inputs = flat_inputs
    return flat, padded


def _check_flat(inputs, row, boundaries, longest, boundaries_k) -> None:
    if row is None or row.shape[0] != 1:
        shape = None if row is None else tuple(row.shape)
        raise ValueError(
            f"A padding-free batch (cu_seq_lens_q given) holds every text in one row: input_ids [1, tokens], got "
            f"{shape}. Pad the batch instead, or flatten it (transformers' DataCollatorWithFlattening)."
        )
    mask = inputs.get("attention_mask")
    if mask is not None and tuple(mask.shape) != tuple(row.shape[:2]):
        raise ValueError(
            f"A padding-free batch has no padding to mask: attention_mask must be left out (or all ones, "
            f"[1, {row.shape[1]}]), got shape {tuple(mask.shape)}."
        )
    if not isinstance(boundaries, torch.Tensor) or boundaries.dim() != 1 or boundaries.numel() < 2:
        raise ValueError(
            "cu_seq_lens_q must be a 1-D tensor of the texts' cumulative lengths, [0, len(text 1), ...], one more "
            "entry than the batch has texts."
        )
    # Compared by shape only: reading the values would wait for the device at every step (bench/gpu.py counted it).
    # Its values are not read: the attention gets cu_seq_lens_q as the keys' boundaries too (FlatBatch).
    if boundaries_k is not None and tuple(boundaries_k.shape) != tuple(boundaries.shape):
        raise ValueError(
            f"cu_seq_lens_k must be cu_seq_lens_q's boundaries, shape {tuple(boundaries.shape)}, got "
            f"{tuple(boundaries_k.shape)}: a pooled model's texts attend within themselves (the keys' boundaries "
            "are the queries')."
        )
    if isinstance(longest, bool) or not isinstance(longest, int) or longest < 1:
        raise ValueError(
            f"max_length_q must be the longest text's length as a Python int (it sizes the padded layout without "
            f"reading the device), got {longest!r}."
        )
