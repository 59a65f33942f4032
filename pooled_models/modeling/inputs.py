"""Checks of what a caller passes to a pooled model, so a mistake raises a ValueError that says what is wrong
instead of an IndexError deep in the embedding layer (or a device-side assert on GPU).

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch
from torch import nn

__all__ = ["check_inputs", "values_checked_by_caller", "checks_values"]

# Set while a caller that has checked its data itself runs the model (train.py checks every row before training).
_CALLER_CHECKED = contextvars.ContextVar("pooled_models_caller_checked_values", default=False)


@contextlib.contextmanager
def values_checked_by_caller():
    """Inside this block the model skips the checks that read token ids and labels back from the device (each one a
    host synchronisation that stalls a GPU's queue of work at every step): the caller has checked them. Shapes and
    dtypes are still checked."""
    token = _CALLER_CHECKED.set(True)
    try:
        yield
    finally:
        _CALLER_CHECKED.reset(token)


def checks_values() -> bool:
    """Whether checks may read tensor values: not in compiled or exported graphs (data-dependent branches), and not
    where the caller checked them (values_checked_by_caller)."""
    return not torch.compiler.is_compiling() and not _CALLER_CHECKED.get()


def check_inputs(
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    reference: torch.Tensor,
    embeddings: nn.Module | None,
) -> None:
    """The mask matches the inputs' ``[batch, seq_len]``, and every token id has a row in the embedding table."""
    if attention_mask is not None and tuple(attention_mask.shape) != tuple(reference.shape[:2]):
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but the inputs are {tuple(reference.shape[:2])} "
            "([batch, seq_len]); tokenize texts and mask together (tokenizer(..., padding=True))."
        )
    vocab_size = getattr(embeddings, "num_embeddings", None)
    if input_ids is None or vocab_size is None or input_ids.numel() == 0 or not checks_values():
        return
    outside = (input_ids < 0) | (input_ids >= vocab_size)
    if outside.any():
        row, column = (int(index) for index in outside.nonzero()[0])
        raise ValueError(
            f"input_ids[{row}, {column}] = {int(input_ids[row, column])} is not a token id of this model: its "
            f"vocabulary has {vocab_size} entries (ids 0 to {vocab_size - 1}). Was the text tokenized with another "
            "model's tokenizer? After adding tokens, call model.resize_token_embeddings(len(tokenizer))."
        )
