"""The length of a text a pooled model reads: one rule, so that every path that tokenises for the model (train.py's
evaluation and predictions, ``pipeline(...)``, ``encode``, a tokenizer called for ONNX Runtime, vLLM) cuts a long text
at the same token and gives the same scores.

The length is the config's ``max_seq_length``: the length train.py trained with (it writes it), or a
sentence-transformers folder's ``max_seq_length`` (``from_backbone`` reads it), or what the user set. A checkpoint
without one (saved before the setting existed, or built from a backbone that states none) is read at the tokenizer's
``model_max_length``. Either way the length is capped at the positions the backbone has for a text (less the label
tokens a label-token pooling puts into every input), past which the backbone fails.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only the standard
library and transformers.
"""

from __future__ import annotations

from transformers.utils import logging

__all__ = ["NO_TOKENIZER_LIMIT", "text_length", "check_max_seq_length"]

logger = logging.get_logger(__name__)

# Tokenizers without a length limit report a sentinel (transformers' VERY_LARGE_INTEGER is about 1e30).
NO_TOKENIZER_LIMIT = 10**9


def text_length(
    saved: int | None,
    tokenizer_limit: int | None,
    position_limit: int | None,
    setting: str = "max_seq_length",
) -> int | None:
    """The most tokens of one text the model reads (special tokens included), or None where nothing limits it.

    Args:
        saved: the config's ``max_seq_length`` (None: unset).
        tokenizer_limit: the tokenizer's ``model_max_length`` (None or the no-limit sentinel: none).
        position_limit: the tokens of one text the backbone has positions for (None: no position table).
        setting: the name ``saved`` was given as, for the warning when it is capped.
    """
    if saved is not None:
        if position_limit is not None and saved > position_limit:
            logger.warning_once(
                f"{setting}={saved} is more than this model has positions for; using {position_limit}."
            )
            return position_limit
        return saved
    limits = [position_limit, tokenizer_limit]
    limits = [limit for limit in limits if isinstance(limit, int) and limit < NO_TOKENIZER_LIMIT]
    return min(limits) if limits else None


def check_max_seq_length(value) -> None:
    """A config's ``max_seq_length``: an integer >= 1, or None (the tokenizer's)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(
            f"max_seq_length must be an integer >= 1 (the most tokens of a text the model reads) or None (the "
            f"tokenizer's model_max_length), got {value!r}."
        )
