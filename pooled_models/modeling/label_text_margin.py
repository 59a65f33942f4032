"""The seen-label margin of ``pooling="label_text"``: calibrated stacking (Chao et al., 2016), a number taken off the
score of every label the model was trained on, wherever that label is asked.

Training teaches a label-text model to prefer the labels it saw: asked with its trained labels and new ones together
(a new label among the old ones), it picks a trained label for texts of the new one more often than the untrained
model would. ``label_text_seen_margin`` lowers the logit of each trained ("seen") label by a fixed amount, so a new
label competes as it did before training, while the trained labels keep their order among themselves (a softmax over
trained labels alone is unchanged).

A label is seen when its text, as token ids after the marker's slot, is one of ``label_text_seen_ids`` (train.py
saves the texts it trained on there), or, where that is unset, one of the model's own labels (``label_text_ids``).
Labels given at call time (``label_input_ids``) are matched by their ids, so the margin follows a label's text,
whatever its place among the labels asked. Every path applies it the same way: the model's forward (pipelines, ONNX,
``torch.compile``) and vLLM (``serving/``), which reads these functions.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["seen_label_texts", "seen_mask_of_rows", "seen_mask", "check_seen_margin"]


def seen_label_texts(config) -> set[tuple[int, ...]]:
    """The seen labels' token ids after the marker's slot: ``label_text_seen_ids``, else the model's own labels."""
    rows = config.label_text_seen_ids
    if rows is None:
        rows = config.label_text_ids or []
    return {tuple(int(i) for i in row[1:]) for row in rows}


def seen_mask_of_rows(rows: Sequence[Sequence[int]], seen: set[tuple[int, ...]]) -> list[bool]:
    """Whether each label (its token ids, marker slot first, unpadded) is a seen one."""
    return [tuple(int(i) for i in row[1:]) in seen for row in rows]


def seen_mask(label_ids: torch.Tensor, label_mask: torch.Tensor, seen: set[tuple[int, ...]]) -> torch.Tensor:
    """``[L]`` booleans: whether each label given as right-padded ids ``[L, n]`` (mask ``[L, n]``) is a seen one. Tensor
    operations only (no value read back), so that a compiled or exported graph keeps it."""
    if not seen:
        return torch.zeros(label_ids.shape[0], dtype=torch.bool, device=label_ids.device)
    width = max(label_ids.shape[1] - 1, max(len(row) for row in seen))
    known = torch.zeros(len(seen), width, dtype=torch.long, device=label_ids.device)
    known_mask = torch.zeros_like(known)
    for number, row in enumerate(sorted(seen)):
        known[number, : len(row)] = torch.tensor(row, dtype=torch.long, device=label_ids.device)
        known_mask[number, : len(row)] = 1
    mask = label_mask[:, 1:].long()
    ids = label_ids[:, 1:] * mask
    pad = width - ids.shape[1]
    ids = torch.nn.functional.pad(ids, (0, pad))
    mask = torch.nn.functional.pad(mask, (0, pad))
    same = (ids.unsqueeze(1) == known.unsqueeze(0)) & (mask.unsqueeze(1) == known_mask.unsqueeze(0))
    return same.all(dim=-1).any(dim=-1)


def check_seen_margin(config) -> None:
    """``label_text_seen_margin``: a finite number; ``label_text_seen_ids``: token id lists, as ``label_text_ids``."""
    margin = config.label_text_seen_margin
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin):
        raise ValueError(
            f"label_text_seen_margin must be a finite number (taken off the logit of every label the model was "
            f"trained on; 0: none), got {margin!r}."
        )
    rows = config.label_text_seen_ids
    if rows is None:
        return
    if not isinstance(rows, list) or not all(
        isinstance(row, list)
        and len(row) >= 2
        and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in row)
        for row in rows
    ):
        raise ValueError(
            "label_text_seen_ids must list the trained labels' texts as token ids, each with the marker's slot and at "
            f"least one token (as label_text_ids holds them), got {rows!r}."
        )
