"""The labels' texts of ``pooling="label_text"`` as the backbone reads them: the text each label is read as (its name
or description), its token ids from the backbone's tokenizer, ragged ids padded into tensors, and the checks of the
texts a config holds (``label_descriptions``, ``label_text_ids``) and of those given at call time
(``label_input_ids``, ``label_attention_mask``).

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .text_config import text_config_of

__all__ = ["label_texts", "label_text_token_ids", "pad_label_ids"]


def label_texts(names: Sequence[str], descriptions: dict[str, str] | None) -> list[str]:
    """The text each label is read as: its description where ``descriptions`` has one, else its name."""
    descriptions = descriptions or {}
    return [str(descriptions.get(str(name), name)) for name in names]


def label_text_token_ids(texts: Sequence[str], tokenizer, max_length: int | None = None) -> list[list[int]]:
    """Each text's token ids as the backbone reads a text (with its special tokens), its first slot being the one the
    marker takes: a tokenizer that puts no special token first gets one slot more (its CLS, BOS or UNK id, whose
    embedding the marker starts from)."""
    encoded = tokenizer(list(texts), truncation=max_length is not None, max_length=max_length)["input_ids"]
    special = set(tokenizer.all_special_ids)
    lead = next(
        (
            i
            for i in (tokenizer.cls_token_id, tokenizer.bos_token_id, tokenizer.unk_token_id)
            if i is not None
        ),
        0,
    )
    result = []
    for text, ids in zip(texts, encoded, strict=True):
        ids = [int(i) for i in ids]
        if not ids or ids[0] not in special:
            ids = [int(lead), *ids]
        if not [i for i in ids[1:] if i not in special]:
            raise ValueError(
                f"the label text {text!r} has no tokens (besides the tokenizer's special tokens)."
            )
        result.append(ids)
    return result


def pad_label_ids(ids: Sequence[Sequence[int]], device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged token-id lists -> ``(ids [L, n], mask [L, n])``, right-padded with 0."""
    length = max((len(row) for row in ids), default=1)
    padded = torch.zeros(len(ids), length, dtype=torch.long, device=device)
    mask = torch.zeros_like(padded)
    for number, row in enumerate(ids):
        padded[number, : len(row)] = torch.tensor(list(row), dtype=torch.long, device=device)
        mask[number, : len(row)] = 1
    return padded, mask


def _label_names_of(config_kwargs: dict[str, Any]) -> list[str]:
    id2label = config_kwargs.get("id2label")
    if id2label:
        return [id2label[key] for key in sorted(id2label, key=int)]
    return [f"LABEL_{index}" for index in range(config_kwargs.get("num_labels", 2))]


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _as_tensor(value, name: str, device) -> torch.Tensor:
    """``value`` (a tensor or nested lists) as a tensor of integers; ragged lists and fractions refused by name."""
    try:
        tensor = torch.as_tensor(value, device=device)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(
            f"{name} must be a [labels, length] tensor (or equal-length lists) of integers; pad the label texts to one "
            f"length (pad_label_ids, or the tokenizer with padding=True and padding_side='right'). {error}"
        ) from None
    if tensor.is_floating_point() or tensor.is_complex():
        raise ValueError(f"{name} must hold integers, got {tensor.dtype}.")
    return tensor


def _check_call_labels(label_ids: torch.Tensor, label_mask: torch.Tensor, vocabulary: int) -> None:
    if label_ids.ndim != 2 or tuple(label_mask.shape) != tuple(label_ids.shape):
        raise ValueError(
            f"label_input_ids must be [labels, length] token ids with a label_attention_mask of the same shape, got "
            f"{tuple(label_ids.shape)} and {tuple(label_mask.shape)}."
        )
    if label_ids.shape[0] == 0:
        raise ValueError("label_input_ids holds no label.")
    if label_ids.shape[1] == 0:
        raise ValueError("label_input_ids holds no token: each label needs at least its first (marker) slot.")
    if torch.compiler.is_compiling():
        return
    if bool(((label_ids < 0) | (label_ids >= vocabulary)).any()):
        raise ValueError(f"label_input_ids holds ids outside the vocabulary [0, {vocabulary - 1}].")
    mask = label_mask.long()
    if bool(((mask != 0) & (mask != 1)).any()):
        raise ValueError("label_attention_mask must hold 0 (padding) and 1 (a real token) only.")
    # Each label's real tokens first, then its padding: the marker in the first slot, the positions counted from it.
    if bool((mask[:, 0] == 0).any()) or bool((mask[:, 1:] > mask[:, :-1]).any()):
        raise ValueError(
            "label_input_ids must be right-padded, each label's first slot real and no padding between its tokens "
            "(tokenize the label texts with padding_side='right', as label_text_token_ids does)."
        )


def _check_descriptions(config) -> None:
    descriptions = config.label_descriptions
    if descriptions is None:
        return
    names = {str(name) for name in (config.id2label or {}).values()}
    _require(
        isinstance(descriptions, dict)
        and all(
            isinstance(key, str) and isinstance(value, str) and value.strip()
            for key, value in descriptions.items()
        ),
        f"label_descriptions must map label names to non-empty texts, got {descriptions!r}.",
    )
    unknown = sorted(set(descriptions) - names)
    _require(
        not unknown,
        f"label_descriptions names labels the model does not have: {', '.join(map(repr, unknown))}. Its labels: "
        f"{', '.join(sorted(names))}.",
    )


def _check_label_text_ids(config) -> None:
    ids, num_labels = config.label_text_ids, config.num_labels
    if ids is None:
        return  # a model built from its config alone: the forward refuses to run without label texts
    _require(
        isinstance(ids, list) and len(ids) == num_labels,
        f"label_text_ids must hold one list of token ids per label ({num_labels}), got "
        f"{len(ids) if isinstance(ids, list) else type(ids).__name__}.",
    )
    # A backbone without a token vocabulary (Canine) has no vocab_size: the model refuses it when built, by name.
    vocab_size = getattr(text_config_of(config), "vocab_size", None)
    for label, token_ids in enumerate(ids):
        _require(
            isinstance(token_ids, list)
            and len(token_ids) >= 2
            and all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < (vocab_size or i + 1)
                for i in token_ids
            ),
            f"label_text_ids[{label}] = {token_ids!r} must list the marker's slot and at least one token id, all in "
            f"[0, {vocab_size - 1 if vocab_size else 'the vocabulary'}].",
        )
