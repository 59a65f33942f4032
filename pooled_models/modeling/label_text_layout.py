"""Where label texts sit next to a text, and who attends to whom: the tensor maths of ``pooling="label_text"``, as
plain functions on tensors (tested on their own).

Each label is a *segment*: its marker slot, then the tokens of its name or description (``[marker] name [SEP]``: the
tokenizer's ids with the marker in the first slot). Segments are ``[L, n]`` rows, padded to the longest. For the
backbone's top layers, labels are cut into groups of ``per_pass`` (``label_tokens_per_pass``) and every text is joined
with every group: row ``b * G + g`` holds text ``b`` (as given, any padding side) followed by the ``per_pass * n``
slots of group ``g``'s segments. In a joined row:

* a text token attends to the text's real tokens only (one-way: its states are those of the text alone);
* a label slot attends to the text's real tokens and to the real slots of its own segment, never to another label's,
  so a label's score does not depend on which other labels are asked with it, nor on how they are grouped.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "LabelSegments",
    "group_segments",
    "split_joined",
    "joined_attention",
    "segment_vectors",
    "masked_mean",
]


class LabelSegments:
    """Label segments ``ids [L, n]`` and ``mask [L, n]``, and how they are grouped for the joined rows."""

    def __init__(self, ids: torch.Tensor, mask: torch.Tensor, per_pass: int):
        if ids.ndim != 2 or tuple(mask.shape) != tuple(ids.shape):
            raise ValueError(
                f"label texts must be token ids [labels, length] with a mask of the same shape, got ids "
                f"{tuple(ids.shape)} and mask {tuple(mask.shape)}."
            )
        self.ids = ids
        self.mask = mask.to(torch.long)
        self.num_labels, self.length = ids.shape
        self.per_pass = min(per_pass, self.num_labels)
        self.num_groups = math.ceil(self.num_labels / self.per_pass)

    @property
    def padded_labels(self) -> int:
        """Labels once the last group is filled up with empty segments."""
        return self.num_groups * self.per_pass


def group_segments(values: torch.Tensor, segments: LabelSegments) -> torch.Tensor:
    """``values`` of every segment (``[L, n]`` or ``[L, n, H]``) as the groups' blocks (``[G, per_pass * n]`` or
    ``[G, per_pass * n, H]``); the slots of the empty segments that fill the last group are zeros."""
    missing = segments.padded_labels - segments.num_labels
    if missing:
        padding = values.new_zeros((missing, *values.shape[1:]))
        values = torch.cat([values, padding], dim=0)
    return values.reshape(segments.num_groups, segments.per_pass * segments.length, *values.shape[2:])


def split_joined(joined: torch.Tensor, text_length: int, segments: LabelSegments, batch: int):
    """The joined rows' states ``[B * G, T + per_pass * n, H]`` -> (the text's ``[B, T, H]``, read from each text's
    first group: with one-way attention every group gives the same; each label's ``[B, L, n, H]``)."""
    hidden = joined.shape[-1]
    text = joined.reshape(batch, segments.num_groups, -1, hidden)[:, 0, :text_length]
    labels = joined[:, text_length:].reshape(batch, segments.padded_labels, segments.length, hidden)
    return text, labels[:, : segments.num_labels]


def joined_attention(text_mask: torch.Tensor, segments: LabelSegments) -> torch.Tensor:
    """Who may attend to whom in the joined rows: ``[B * G, 1, T + W, T + W]`` booleans (True: query row attends to
    key column). Every row allows at least its own slot, so that no softmax runs over nothing (padding slots, whose
    states nobody reads, attend to themselves)."""
    batch, text_length = text_mask.shape
    groups = segments.num_groups
    text_real = (text_mask != 0).repeat_interleave(groups, dim=0)  # [B*G, T]
    # Each label slot's segment number within its group (-1: a padding slot), the same for every text.
    slot_segment = torch.arange(segments.per_pass, device=text_mask.device).repeat_interleave(segments.length)
    label_real = group_segments(segments.mask, segments) != 0  # [G, W]
    segment = torch.where(label_real, slot_segment.expand_as(label_real), -1).repeat(batch, 1)  # [B*G, W]
    is_label = torch.cat([torch.zeros_like(text_real), segment >= 0], dim=1)  # [B*G, T+W]
    key_text = torch.cat([text_real, torch.zeros_like(segment >= 0)], dim=1)
    every_segment = torch.cat([torch.full_like(text_real, -1, dtype=torch.long), segment], dim=1)
    same_segment = (every_segment.unsqueeze(-1) == every_segment.unsqueeze(-2)) & is_label.unsqueeze(-1)
    allowed = key_text.unsqueeze(1) | (same_segment & is_label.unsqueeze(1))  # [B*G, Q, K]
    # Queries that are text read the text only; label queries read the text and their own segment (above).
    width = allowed.shape[-1]
    allowed = allowed | torch.eye(width, dtype=torch.bool, device=allowed.device)
    return allowed.unsqueeze(1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    """The mean of ``values`` over ``dim`` where ``mask`` (``values``' shape without the last dimension) is not 0,
    summed in float32 and returned in ``values``' dtype; zeros where the mask holds nothing."""
    weights = (mask != 0).to(torch.float32).unsqueeze(-1)
    total = (values.to(torch.float32) * weights).sum(dim=dim)
    count = weights.sum(dim=dim).clamp(min=1.0)
    return (total / count).to(values.dtype)


def segment_vectors(states: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """One vector per label from its segment's states ``[..., L, n, H]``: the marker's (its first slot) or the mean
    over its real slots (``mask [L, n]``)."""
    if pooling == "marker":
        return states[..., 0, :]
    return masked_mean(states, mask.expand(states.shape[:-1]), dim=-2)
