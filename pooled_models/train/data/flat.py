"""Padding-free batches of one sequence task, as transformers' ``DataCollatorWithFlattening`` lays them out: the
batch's texts back to back in one row (``input_ids [1, tokens]``, no attention mask), their boundaries as cumulative
lengths (``cu_seq_lens_q`` / ``cu_seq_lens_k``, int32) and the longest length as a Python int (``max_length_q`` /
``max_length_k``), so the model reads no value back from the device to lay them out (modeling/padding_free.py).

Unlike transformers' collator it keeps one label per text (``labels [texts]``; transformers#41652: the flattening
collator fails on integer labels) and gives no position ids: the model counts each text's positions itself, from
its backbone's first position (RoBERTa's and XLM-R's start past padding_idx, transformers#47496)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, chain
from typing import Any

import torch

__all__ = ["FlatCollator", "FLAT_COLUMNS"]

# The columns a padding-free batch carries (the mask is implied: every token of the row is real).
FLAT_COLUMNS = ("input_ids", "token_type_ids", "attention_mask", "labels", "label")


class FlatCollator:
    """``DataCollatorWithPadding``'s counterpart for padding-free batches of one sequence task."""

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, Any]:
        unknown = sorted({key for feature in features for key in feature} - set(FLAT_COLUMNS))
        if unknown:
            raise ValueError(
                f"Padding-free batches carry {', '.join(FLAT_COLUMNS[:2])} and labels; these rows also have "
                f"{', '.join(unknown)}. Train with --padding_free false."
            )
        tokens = [_real_tokens(feature) for feature in features]
        lengths = [len(ids) for ids, _ in tokens]
        boundaries = torch.tensor([0, *accumulate(lengths)], dtype=torch.int32)
        longest = max(max(lengths, default=0), 1)
        batch: dict[str, Any] = {
            "input_ids": torch.tensor(list(chain.from_iterable(ids for ids, _ in tokens))).view(1, -1),
            "cu_seq_lens_q": boundaries,
            "cu_seq_lens_k": boundaries,
            "max_length_q": longest,
            "max_length_k": longest,
        }
        if all(types is not None for _, types in tokens):
            batch["token_type_ids"] = torch.tensor(list(chain.from_iterable(t for _, t in tokens))).view(
                1, -1
            )
        labels = [feature.get("labels", feature.get("label")) for feature in features]
        if any(label is not None for label in labels):
            batch["labels"] = torch.tensor(labels)
        return batch


def _real_tokens(feature: dict[str, Any]) -> tuple[list[int], list[int] | None]:
    """A row's token ids (and token types) without its padding, if a mask marks any."""
    ids = list(feature["input_ids"])
    types = feature.get("token_type_ids")
    mask = feature.get("attention_mask")
    if mask is not None and not all(mask):
        keep = [index for index, real in enumerate(mask) if real]
        ids = [ids[index] for index in keep]
        types = None if types is None else [types[index] for index in keep]
    return ids, None if types is None else list(types)
