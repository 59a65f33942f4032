"""Serving pooled checkpoints with vLLM: the ``vllm.general_plugins`` entry point of ``pooled_models[vllm]``.

vLLM calls :func:`register` in each of its processes. It registers ``PooledConfig`` with transformers' ``AutoConfig``
(by importing the package, so vLLM reads a pooled config.json without remote code) and the pooled architectures with
vLLM's ``ModelRegistry``, by ``module:class`` name so that nothing of vLLM's model code is imported until a pooled
checkpoint is loaded. This room is the only one that imports vllm; the model room never imports it.
"""

from __future__ import annotations

from .support import SERVED_ARCHITECTURES

__all__ = ["register", "registered"]

# Set once register() has run in this process: a pooled config that vLLM builds before it is refused with a message
# naming the plugin (modeling/engines.py reads it).
registered = False


# The class vLLM builds for each pooled architecture (serving/model.py), named so that the registry imports it lazily.
MODEL_CLASSES = {
    "PooledForSequenceClassification": "ServedPooledClassifier",
    "PooledModel": "ServedPooledModel",
    "PooledForTokenClassification": "token_model:ServedPooledTokenClassifier",
    "PooledForMultiTask": "multitask_model:ServedPooledMultiTask",
}
assert set(MODEL_CLASSES) == set(SERVED_ARCHITECTURES)


def register() -> None:
    """Register PooledConfig with AutoConfig and every pooled architecture with vLLM's ModelRegistry."""
    from vllm import ModelRegistry

    import pooled_models  # noqa: F401  (registers PooledConfig with AutoConfig)

    from .vocabulary import register_vocabulary

    register_vocabulary()  # the label marker's id in a label-text model's prompts (zero-shot route)
    from .empty_texts import refuse_empty_texts

    refuse_empty_texts(
        SERVED_ARCHITECTURES
    )  # HTTP 400 for "", as train.py refuses empty texts (empty_texts.py)

    from .document_route import install_document_route

    install_document_route()  # a document model's texts cut into window prompts on the classify and embed routes

    global registered
    for architecture, class_name in MODEL_CLASSES.items():
        # A class of serving/model.py, or "module:Class" for a class of another module of this room.
        target = class_name if ":" in class_name else f"model:{class_name}"
        ModelRegistry.register_model(architecture, f"{__name__}.{target}")
    registered = True
