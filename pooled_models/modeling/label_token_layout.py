"""Where every text token and label token of ``pooling="label_tokens"`` goes in the extended, right-padded
sequences (:class:`_Layout`): one row per text and group of labels, the text truncated to the positions left.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from typing import Any

import torch

from .pooling import Pooler

# Where the label tokens go: after this many leading tokens of the text; -1 puts them after the text.
AFTER_THE_TEXT = -1


class _Layout:
    """Where every text token and label token goes in the extended, right-padded sequences.

    Row ``b * num_passes + g`` holds text ``b`` with label group ``g``. The layout depends only on each
    text's own tokens, never on the batch's padding side or width, so the result is padding-invariant.
    The text alone (truncated, right-padded: what ``label_token_layers=k`` runs through the lower layers) has one
    row per text; ``insert`` spreads its states into the extended rows.
    """

    def __init__(
        self, text_source, text_keep, text_index, source, keep, label_slot, label_ids, label_index, passes
    ):
        self.text_source = text_source  # [B, T] index of the original token at each slot of the text alone
        self.text_keep = text_keep  # [B, T] a text token sits at the slot
        self.text_index = text_index  # [B', T'] slot of the text alone each extended slot reads
        self.source = source  # [B', T'] index of the original token at each extended slot (0 where none)
        self.keep = keep  # [B', T'] a text token sits at the extended slot
        self.label_slot = label_slot  # [B', G] slot of each label token
        # [B', G] label id of each label token, -1 for the slots that pad the last group
        self.label_ids = label_ids
        self.label_index = label_index  # [B', T'] label id at each slot, -1 elsewhere
        self.attention_mask = (keep | (label_index >= 0)).long()  # [B', T']
        self.num_passes, self.per_pass, self.num_labels = passes

    @classmethod
    def build(cls, attention_mask: torch.Tensor, pooler: Pooler, position_budget: int | None) -> _Layout:
        real = attention_mask != 0
        batch, length = real.shape
        device = real.device
        per_pass, num_passes = pooler.per_pass, pooler.num_passes
        counts = real.sum(dim=1)
        text_budget = length if position_budget is None else position_budget - per_pass
        kept = counts.clamp(max=text_budget)
        rank = real.long().cumsum(dim=1) - 1
        is_last = rank == (counts - 1).unsqueeze(1)
        # Truncation keeps the first kept - 1 tokens and the last one (the closing special token).
        keep_token = real & ((rank < (kept - 1).unsqueeze(1)) | is_last)
        text_slot = torch.where(is_last, (kept - 1).unsqueeze(1), rank)
        insert_at = kept if pooler.position == AFTER_THE_TEXT else kept.clamp(max=pooler.position)
        # A width known from the shapes (the text's room plus the label tokens), in eager mode as in compiled and
        # exported graphs, so that all give the same outputs (last_hidden_state included): a width read off the
        # mask (int(kept.max())) would be a data-dependent shape, which export cannot keep.
        longest = min(length, text_budget)
        width = longest + per_pass
        text_width = max(longest, 1)  # texts without tokens still get a (masked) column

        # The text alone: each kept token's original index at its slot; dropped tokens go to a spare last column.
        slot_or_spare = torch.where(keep_token, text_slot, torch.full_like(text_slot, text_width))
        text_source = torch.zeros(batch, text_width + 1, dtype=torch.long, device=device)
        text_source.scatter_(1, slot_or_spare, torch.arange(length, device=device).expand(batch, length))
        text_keep = torch.zeros(batch, text_width + 1, dtype=torch.bool, device=device)
        text_keep.scatter_(1, slot_or_spare, keep_token)
        text_source, text_keep = text_source[:, :text_width], text_keep[:, :text_width]

        # The extended rows: the text with room for the label tokens at insert_at.
        slots = torch.arange(width, device=device).unsqueeze(0)
        after_labels = slots >= (insert_at + per_pass).unsqueeze(1)
        text_index = torch.where(after_labels, slots - per_pass, slots).clamp(max=text_width - 1)  # [B, T']
        keep = text_keep.gather(1, text_index) & ((slots < insert_at.unsqueeze(1)) | after_labels)
        source = text_source.gather(1, text_index)

        # One row per (text, label group).
        text_index = text_index.repeat_interleave(num_passes, dim=0)
        source = source.repeat_interleave(num_passes, dim=0)
        keep = keep.repeat_interleave(num_passes, dim=0)
        offsets = torch.arange(per_pass, device=device)
        label_slot = insert_at.repeat_interleave(num_passes).unsqueeze(1) + offsets  # [B', G]
        group = torch.arange(num_passes, device=device).repeat(batch).unsqueeze(1)
        label_id = group * per_pass + offsets  # [B', G]; ids >= num_labels pad the last group
        label_ids = torch.where(label_id < pooler.num_labels, label_id, -1)
        label_index = torch.full((batch * num_passes, width), -1, dtype=torch.long, device=device)
        label_index.scatter_(1, label_slot, label_ids)
        return cls(
            text_source,
            text_keep,
            text_index,
            source,
            keep,
            label_slot,
            label_ids,
            label_index,
            (num_passes, per_pass, pooler.num_labels),
        )

    def _at_text_slots(self, values: torch.Tensor, fill) -> torch.Tensor:
        """``values`` (``[B, T]`` or ``[B, T, H]``, in the input's layout) at the slots of the text alone."""
        index = (
            self.text_source
            if values.ndim == 2
            else self.text_source.unsqueeze(-1).expand(-1, -1, values.shape[-1])
        )
        keep = self.text_keep if values.ndim == 2 else self.text_keep.unsqueeze(-1)
        return torch.where(
            keep, values.gather(1, index), torch.as_tensor(fill, dtype=values.dtype, device=values.device)
        )

    def insert(self, text: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        """``text`` (``[B, T]`` or ``[B, T, H]``, in the layout of the text alone) spread over the extended rows, with
        ``labels`` (``[B', G]`` or ``[B', G, H]``) at the label slots; zeros where neither is."""
        rows = text.repeat_interleave(self.num_passes, dim=0)
        index = (
            self.text_index
            if text.ndim == 2
            else self.text_index.unsqueeze(-1).expand(-1, -1, text.shape[-1])
        )
        keep = self.keep if text.ndim == 2 else self.keep.unsqueeze(-1)
        spread = torch.where(
            keep, rows.gather(1, index), torch.zeros((), dtype=text.dtype, device=text.device)
        )
        if labels is None:
            return spread
        valid = self.label_ids >= 0
        slot = self.label_slot
        if labels.ndim == 3:
            valid, slot = valid.unsqueeze(-1), slot.unsqueeze(-1).expand(-1, -1, labels.shape[-1])
        labels = torch.where(
            valid, labels.to(spread.dtype), torch.zeros((), dtype=spread.dtype, device=spread.device)
        )
        return spread.scatter(1, slot, labels)

    def text_alone(self, inputs: dict[str, Any], pad_token_id: int) -> dict[str, Any]:
        """The embedding inputs of the texts alone, truncated and right-padded as in the extended rows."""
        text = {"input_ids": None, "inputs_embeds": None, "token_type_ids": None}
        if inputs.get("input_ids") is not None:
            text["input_ids"] = self._at_text_slots(inputs["input_ids"], pad_token_id)
        else:
            text["inputs_embeds"] = self._at_text_slots(inputs["inputs_embeds"], 0.0)
        if inputs.get("token_type_ids") is not None:
            text["token_type_ids"] = self._at_text_slots(inputs["token_type_ids"], 0)
        # A text without tokens attends to its first (padding) slot, whose state no one reads: no attention row is
        # empty, and no ESM token-dropout ratio divides by zero real tokens.
        empty = ~self.text_keep.any(dim=1, keepdim=True)
        first = torch.arange(self.text_keep.shape[1], device=empty.device) == 0
        text["attention_mask"] = (self.text_keep | (empty & first)).long()
        return text

    def _gather(self, values: torch.Tensor, fill) -> torch.Tensor:
        """``values`` (in the input's layout) at the text slots of the extended rows; ``fill`` elsewhere."""
        rows = values.repeat_interleave(self.num_passes, dim=0)
        index = (
            self.source if values.ndim == 2 else self.source.unsqueeze(-1).expand(-1, -1, values.shape[-1])
        )
        gathered = rows.gather(1, index)
        keep = self.keep if values.ndim == 2 else self.keep.unsqueeze(-1)
        return torch.where(keep, gathered, torch.as_tensor(fill, dtype=values.dtype, device=values.device))

    def extend_inputs(self, inputs: dict[str, Any], pad_token_id: int, vocabulary: int) -> dict[str, Any]:
        extended = {
            key: value
            for key, value in inputs.items()
            if key not in ("input_ids", "inputs_embeds", "attention_mask", "token_type_ids")
        }
        extended["attention_mask"] = self.attention_mask
        if inputs.get("input_ids") is not None:
            ids = self._gather(inputs["input_ids"], pad_token_id)
            # Label slots hold marker ids, vocabulary + label: ids no token has, which LabelTokenInput reads.
            extended["input_ids"] = torch.where(self.label_index >= 0, self.label_index + vocabulary, ids)
        else:
            extended["inputs_embeds"] = self._gather(inputs["inputs_embeds"], 0.0)
        if inputs.get("token_type_ids") is not None:
            extended["token_type_ids"] = self._gather(inputs["token_type_ids"], 0)
        return extended

    def read_labels(self, hidden_states: torch.Tensor) -> torch.Tensor:
        index = self.label_slot.unsqueeze(-1).expand(-1, -1, hidden_states.shape[-1])
        states = hidden_states.gather(1, index)  # [B', G, H]
        states = states.reshape(-1, self.num_passes * self.per_pass, hidden_states.shape[-1])
        return states[:, : self.num_labels]
