"""The settings of document mode (``document_window``, ``document_stride``, ``document_pooling`` and its own), checked
as one rule that spans them: without a window none of the others applies; with one, the stride defaults to an eighth
of it and must be smaller, and the cross-window pooling defaults to ``first_plus_rest``. The pooling's own settings are
filled and checked with every other registered choice (config_validation.py's ``CHOICES``).

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from typing import Any

from .pooling import require_int
from .window_pooling import WINDOW_POOLINGS, reads_documents

__all__ = [
    "DOCUMENT_SETTINGS",
    "DOCUMENT_FIELDS",
    "DEFAULT_DOCUMENT_POOLING",
    "reads_documents",
    "chosen_window_pooling",
    "check_document_settings",
    "stale_document_settings",
    "document_structure",
    "check_window_fits",
    "default_stride",
]

DEFAULT_DOCUMENT_POOLING = "first_plus_rest"
# What only document mode reads (document_window switches it on).
DOCUMENT_SETTINGS = ("document_stride", "document_pooling", *sorted(WINDOW_POOLINGS.every_option()))
# Every setting of document mode, the window first: the one list the config, the multi-task config's refusal,
# train.py's flags and its model card read.
DOCUMENT_FIELDS = ("document_window", *DOCUMENT_SETTINGS)


def chosen_window_pooling(config) -> str | None:
    """The cross-window pooling ``config`` reads: its ``document_pooling``, else the default; None outside document
    mode, where no window pooling applies."""
    if not reads_documents(config):
        return None
    return config.document_pooling or DEFAULT_DOCUMENT_POOLING


def default_stride(window: int) -> int:
    """An eighth of the window, shared by consecutive windows: the overlap of hierarchical models' segments (Dai et
    al. 2022), so that a sentence cut by a window's end is read whole at the start of the next."""
    return window // 8


def check_document_settings(config) -> None:
    """Refuse document settings without ``document_window``; fill in and check the window, the stride and the
    pooling's name with it (the pooling's own settings are checked with the other choices)."""
    window = config.document_window
    if window is None:
        for name in DOCUMENT_SETTINGS:
            if getattr(config, name, None) is not None:
                raise ValueError(
                    f"{name}={getattr(config, name)!r} is a setting of document mode, which is off: set "
                    "document_window (the tokens of one window) to read documents in windows, or leave "
                    f"{name} unset."
                )
        return
    require_int("document_window", window, 2)
    if config.document_stride is None:
        config.document_stride = default_stride(window)
    stride = config.document_stride
    if isinstance(stride, bool) or not isinstance(stride, int) or not 0 <= stride < window:
        raise ValueError(
            f"document_stride={stride!r} must be an integer from 0 to {window - 1}: the tokens consecutive windows "
            f"share, fewer than the document_window={window} tokens of a window (the tokenizer's `stride`)."
        )
    config.document_pooling = chosen_window_pooling(config)


def stale_document_settings(config) -> set[str]:
    """The document settings that no longer apply after an edit that took the window away: all of them (those of the
    cross-window poolings not chosen are the other choices' rule, config_validation.py)."""
    return set() if reads_documents(config) else set(DOCUMENT_SETTINGS)


def document_structure(config) -> dict[str, Any]:
    """The document settings a built model's modules depend on: the cross-window pooling and its settings (the window
    and the stride only cut texts, so a built model follows an edit of them)."""
    names = {"document_pooling", *WINDOW_POOLINGS.every_option()}
    return {name: getattr(config, name, None) for name in sorted(names)}


def check_window_fits(config, position_budget: int | None, added_tokens: int) -> None:
    """A window the backbone has positions for (less the tokens the pooler inserts in every input)."""
    window = config.document_window
    if window is None or position_budget is None:
        return
    limit = position_budget - added_tokens
    if window > limit:
        inserted = f", less the {added_tokens} label tokens inserted in every window" if added_tokens else ""
        raise ValueError(
            f"document_window={window} is more tokens than the backbone has positions for ({position_budget}"
            f"{inserted}): valid values are 2 to {limit}."
        )
