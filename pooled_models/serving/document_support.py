"""What the vLLM plugin serves of document mode (``document_window``, modeling/window_pooling.py), and what it refuses
at load with the reason and what to do instead.

Plain Python over a pooled checkpoint's config and vLLM's model config (no vllm import), as ``support.py``. A document
model is served by the document route (``document_route.py``): each window of a document is a prompt of its own, and
the windows' vectors are pooled across after the engine has answered them all. Served: classifiers
(``/classify``) and embedders (``/v1/embeddings``) whose pooling gives one vector per window.
"""

from __future__ import annotations

from ..modeling.window_pooling import reads_documents
from .support import ALTERNATIVES

__all__ = ["MAX_DOCUMENT_WINDOWS", "DOCUMENT_ARCHITECTURES", "document_refusal", "is_document_model"]

# The most windows of one document a request may carry (each window is a prompt the engine runs): a longer document
# is refused with HTTP 400 naming this limit.
MAX_DOCUMENT_WINDOWS = 512
DOCUMENT_ARCHITECTURES = ("PooledForSequenceClassification", "PooledModel")
# Poolings whose vectors are not one per window (a vector per label) or whose prompts carry more than the window.
LABEL_POOLINGS = ("label_text", "label_tokens")


def is_document_model(config) -> bool:
    return reads_documents(config)


def document_refusal(config, architecture: str, model_config) -> str | None:
    """Why the plugin cannot serve this document model exactly (naming the setting), or None: also None outside
    document mode. ``model_config``: vLLM's (its ``max_model_len`` and ``pooler_config``)."""
    if not is_document_model(config):
        return None
    prefix = f"pooled_models' vLLM plugin cannot serve {architecture} in document mode (document_window={config.document_window})"
    if architecture not in DOCUMENT_ARCHITECTURES:
        return f"{prefix}: documents are served for {', '.join(DOCUMENT_ARCHITECTURES)} only. Instead, {ALTERNATIVES}."
    if config.pooling in LABEL_POOLINGS:
        return (
            f"{prefix} with pooling={config.pooling!r}: the document route pools one vector per window, and this "
            "pooling gives one per label (label text scores them against the labels' own prompts). Instead, "
            f"{ALTERNATIVES}."
        )
    if config.document_window > model_config.max_model_len:
        return (
            f"{prefix}: a window is {config.document_window} tokens and this engine takes at most "
            f"{model_config.max_model_len} (max_model_len). Start it with --max-model-len {config.document_window} "
            "or more."
        )
    pooler_config = getattr(model_config, "pooler_config", None)
    if getattr(pooler_config, "enable_chunked_processing", False):
        return (
            f"{prefix} with --pooler-config enable_chunked_processing: vLLM's chunks are averaged by their token "
            "counts, not pooled by the model's own document_pooling. Start the server without it: the plugin cuts "
            "documents into the model's windows itself."
        )
    return None
