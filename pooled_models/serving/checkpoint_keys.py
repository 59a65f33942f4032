"""Checkpoint keys under the names the plugin loads them by: the package's renaming of earlier layouts (a model class's
``_legacy_key_mapping``, regex -> replacement in order), as ``from_pretrained`` applies it through ``key_mapping``; and
the few weights a route reads outside the engine (a head, a cross-window pooler), straight from the safetensors
files."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import torch

__all__ = ["renamed_key", "checkpoint_weights"]


def renamed_key(name: str, mapping: dict[str, str]) -> str:
    for pattern, replacement in mapping.items():
        name = re.sub(pattern, replacement, name)
    return name


def checkpoint_weights(model_config, name_for: Callable[[str], str | None]) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors whose key ``name_for`` names (under that name; None: skipped), read from the served
    model's safetensors files (its folder, or the Hub snapshot vLLM loaded: ``model_config.model`` and ``revision``)."""
    from safetensors import safe_open

    folder = Path(model_config.model)
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        folder = Path(
            snapshot_download(
                model_config.model, revision=model_config.revision, allow_patterns="*.safetensors"
            )
        )
    state = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as weights:
            for key in weights.keys():  # noqa: SIM118 (safe_open is not a mapping)
                name = name_for(key)
                if name is not None:
                    state[name] = weights.get_tensor(key)
    return state
