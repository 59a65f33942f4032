"""Serving engines that would run a pooled checkpoint with a pooling of their own: refused, naming the plugin.

vLLM serves a pooled checkpoint with its own pooling and head through the ``pooled_models[vllm]`` plugin
(``pooled_models/serving``). Without it (not installed, or left out by ``VLLM_PLUGINS``), vLLM with
``trust_remote_code=True`` reads the checkpoint's own code and runs it through its Transformers backend, which puts
vLLM's pooler (CLS, LAST or MEAN) in front of the model's classifier module: the scores would be silently different.
So the checkpoint's code refuses to be loaded that way, with a message naming the plugin. Detected without importing
vllm (this room never does): the config is being built from inside vLLM's code while the plugin is not registered, or
the model is being built with the attention implementation vLLM's Transformers backend sets.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import sys

from .text_config import text_config_of

__all__ = ["ENGINE_ATTENTION", "PLUGIN_MODULE", "refuse_engine_without_plugin", "refuse_engine_backend"]

# The attention implementation vLLM's Transformers backend sets on the text config before it builds a model it has no
# class for (vllm/model_executor/models/transformers/base.py).
ENGINE_ATTENTION = "vllm"
# The plugin's module: its register() sets `registered` once it has registered the pooled architectures with vLLM, or
# `unsupported` (the message to refuse with) when it patched nothing on a vLLM it does not run on.
PLUGIN_MODULE = "pooled_models.serving"

MESSAGE = (
    "vLLM is loading a pooled checkpoint without the pooled_models plugin, so it would run the model through its "
    "Transformers backend with a pooling of its own (CLS, LAST or MEAN) and give different scores. Install the plugin, "
    'which serves pooled models with their own pooling and head: pip install "pooled_models[vllm]", and keep it '
    "enabled (VLLM_PLUGINS unset, or naming pooled_models). Without vLLM, serve the model with transformers' "
    "pipeline(...), or export it with pooled_models.export_onnx and serve it with ONNX Runtime."
)


def _plugin_registered() -> bool:
    return bool(getattr(sys.modules.get(PLUGIN_MODULE), "registered", False))


def _plugin_refusal() -> str | None:
    """The plugin's own message when it is installed but patched nothing on this vLLM (a release it does not run
    on), naming that vLLM and the supported range; None otherwise (then MESSAGE says to install the plugin)."""
    refusal = getattr(sys.modules.get(PLUGIN_MODULE), "unsupported", None)
    return refusal if isinstance(refusal, str) else None


def _called_from_vllm() -> bool:
    """Whether vLLM's code is on the call stack (its config loader building a pooled config)."""
    frame = sys._getframe(1)
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("vllm."):
            return True
        frame = frame.f_back
    return False


def refuse_engine_without_plugin() -> None:
    """Raise ``ValueError`` when vLLM builds a pooled config while the plugin is not registered. Costs nothing where
    vLLM is not imported."""
    if "vllm" in sys.modules and not _plugin_registered() and _called_from_vllm():
        raise ValueError(_plugin_refusal() or MESSAGE)


def refuse_engine_backend(config) -> None:
    """Raise ``ValueError`` when vLLM's Transformers backend builds the model (see ``ENGINE_ATTENTION``)."""
    implementation = getattr(text_config_of(config), "_attn_implementation", None)
    if isinstance(implementation, str) and implementation.startswith(ENGINE_ATTENTION):
        raise ValueError(MESSAGE)
