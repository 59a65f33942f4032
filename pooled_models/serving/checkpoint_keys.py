"""Checkpoint keys under the names the plugin loads them by: the package's renaming of earlier layouts (a model class's
``_legacy_key_mapping``, regex -> replacement in order), as ``from_pretrained`` applies it through ``key_mapping``."""

from __future__ import annotations

import re

__all__ = ["renamed_key"]


def renamed_key(name: str, mapping: dict[str, str]) -> str:
    for pattern, replacement in mapping.items():
        name = re.sub(pattern, replacement, name)
    return name
