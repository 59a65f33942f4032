"""The settings of document mode (``document_window``, ``document_stride``, ``document_pooling`` and its own), checked
as one rule that spans them: without a window none of the others applies; with one, the stride defaults to an eighth
of it and must be smaller, the cross-window pooling defaults to ``mean`` and its settings are filled and checked.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from typing import Any

from .pooling import require_int
from .window_pooling import WINDOW_POOLINGS

__all__ = [
    "DOCUMENT_SETTINGS",
    "DEFAULT_DOCUMENT_POOLING",
    "check_document_settings",
    "stale_document_settings",
    "document_structure",
    "check_window_fits",
    "default_stride",
]

DEFAULT_DOCUMENT_POOLING = "first_plus_rest"
# What only document mode reads (document_window switches it on).
DOCUMENT_SETTINGS = ("document_stride", "document_pooling", *sorted(WINDOW_POOLINGS.every_option()))


def default_stride(window: int) -> int:
    """An eighth of the window, shared by consecutive windows: the overlap of hierarchical models' segments (Dai et
    al. 2022), so that a sentence cut by a window's end is read whole at the start of the next."""
    return window // 8


def check_document_settings(config) -> None:
    """Refuse document settings without ``document_window``; fill in and check them with it."""
    window = getattr(config, "document_window", None)
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
    if config.document_pooling is None:
        config.document_pooling = DEFAULT_DOCUMENT_POOLING
    part = WINDOW_POOLINGS.lookup(config.document_pooling)
    config._fill_settings(
        f"document_pooling={config.document_pooling!r}",
        part.options_for(config),
        WINDOW_POOLINGS.every_option(),
    )
    part.check_config(config)


def stale_document_settings(config) -> set[str]:
    """The document settings that no longer apply after an edit: all of them without a window, else those of the
    cross-window poolings not chosen."""
    if getattr(config, "document_window", None) is None:
        return set(DOCUMENT_SETTINGS)
    chosen = config.document_pooling or DEFAULT_DOCUMENT_POOLING
    if chosen not in WINDOW_POOLINGS:
        return set()
    return WINDOW_POOLINGS.every_option() - set(WINDOW_POOLINGS[chosen].options_for(config))


def document_structure(config) -> dict[str, Any]:
    """The document settings a built model's modules depend on: the cross-window pooling and its settings (the window
    and the stride only cut texts, so a built model follows an edit of them)."""
    names = {"document_pooling", *WINDOW_POOLINGS.every_option()}
    return {name: getattr(config, name, None) for name in sorted(names)}


def check_window_fits(config, position_budget: int | None, added_tokens: int) -> None:
    """A window the backbone has positions for (less the tokens the pooler inserts in every input)."""
    window = getattr(config, "document_window", None)
    if window is None or position_budget is None:
        return
    limit = position_budget - added_tokens
    if window > limit:
        inserted = f", less the {added_tokens} label tokens inserted in every window" if added_tokens else ""
        raise ValueError(
            f"document_window={window} is more tokens than the backbone has positions for ({position_budget}"
            f"{inserted}): valid values are 2 to {limit}."
        )
