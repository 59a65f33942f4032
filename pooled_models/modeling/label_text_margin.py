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

A label-text config takes ``DEFAULT_SEEN_MARGIN`` unless told otherwise; a config saved before the margin existed
(0.4 and earlier: no ``label_text_seen_margin`` in its config.json) loads with none, so no saved model's scores
change. The margin corrects a softmax, where labels compete; a sigmoid scores each label on its own, so a multi-label
model takes none (its thresholds were tuned on its logits) and the zero-shot pipelines' sigmoid scores
(``multi_label=True``, or one candidate) read the logits without it (``without_margin``).

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .problem_types import MULTI_LABEL

__all__ = [
    "DEFAULT_SEEN_MARGIN",
    "default_seen_margin",
    "seen_margin",
    "stated_before_the_margin",
    "without_margin",
    "seen_label_texts",
    "seen_mask_of_rows",
    "seen_mask",
    "check_seen_margin",
]

# The margin of a label-text model unless set: the fixed margin of 1.5 beat no margin on both tasks of
# bench/results/zero_shot/generalized.md (harmonic mean of seen and unseen rows 0.655 against 0.617 on Debian's
# sections, 0.486 against 0.457 on fortunes; packaged MiniLM, one seed). In the config rather than in train.py: the
# margin is the model's, read by every path from config.json, so a model trained with a user's own Trainer scores a new
# label among its trained ones as a train.py model does. A request that asks only trained labels loses nothing: a
# constant off every label changes no softmax and no ranking.
DEFAULT_SEEN_MARGIN = 1.5
# What a label-text config saved before the margin existed (no label_text_seen_margin in config.json) had: none.
MARGIN_BEFORE_IT_EXISTED = 0.0


def default_seen_margin(config) -> float:
    """``label_text_seen_margin`` where unset: ``DEFAULT_SEEN_MARGIN``, none for a multi-label model (which takes none:
    ``seen_margin``), so that config.json and the card say what the model does."""
    return 0.0 if getattr(config, "problem_type", None) == MULTI_LABEL else DEFAULT_SEEN_MARGIN


def seen_margin(config) -> float:
    """What the model takes off each trained label's logit: ``label_text_seen_margin``, or 0 for a multi-label model,
    whose per-label sigmoid and tuned thresholds a constant would move (module docstring)."""
    if getattr(config, "problem_type", None) == MULTI_LABEL:
        return 0.0
    return float(getattr(config, "label_text_seen_margin", None) or 0.0)


def stated_before_the_margin(config_dict: dict) -> dict:
    """A saved label-text config as it was saved: one without ``label_text_seen_margin`` (0.4 and earlier) gets the
    margin it had, none, rather than today's default, which would change its scores."""
    if config_dict.get("pooling") != "label_text" or "label_text_seen_margin" in config_dict:
        return config_dict
    return {**config_dict, "label_text_seen_margin": MARGIN_BEFORE_IT_EXISTED}


def without_margin(logits: torch.Tensor, margins: torch.Tensor | None) -> torch.Tensor:
    """``logits`` as the model gave them (the margin taken off), with ``margins`` (what was taken off each label, or
    None) added back: the logits a sigmoid reads."""
    return logits if margins is None else logits + margins.to(logits.device, logits.dtype)


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
