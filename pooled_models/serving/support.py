"""What the vLLM plugin serves, and what it refuses at load with the reason and what to do instead.

Plain Python over a pooled checkpoint's config: it imports no vllm, so the package's own tests check every refusal
where vLLM is not installed, and the plugin (``serving/model.py``) raises the same message when vLLM loads the model.

A pooling is served when the engine can reproduce it exactly: vLLM runs its own implementation of the backbone over
each prompt's tokens, and the pooler and head of pooled_models (the same modules, loaded from the checkpoint) run on
those states. What vLLM cannot give exactly is refused, never served with a different score.
"""

from __future__ import annotations

from ..modeling.pooling import POOLINGS, Pooler
from .label_support import label_refusal

__all__ = [
    "ALTERNATIVES",
    "ENCODER_BACKBONES",
    "DECODER_BACKBONES",
    "SERVED_ARCHITECTURES",
    "REFUSED_ARCHITECTURES",
    "served_tasks",
    "refusal",
]

# What a user whose model is refused can do instead: both give the model's own scores.
ALTERNATIVES = (
    "serve it with transformers (its pipeline(...) task, e.g. pipeline('text-classification', model=folder), or the "
    "Auto class that loads it), or export it with pooled_models.export_onnx(model, path) and serve the ONNX file with "
    "ONNX Runtime"
)

# Backbone model types whose vLLM implementation the plugin runs (serving/backbones.py): vLLM's BertModel (with
# RoBERTa's position offset for the RoBERTa family) and its decoders.
ENCODER_BACKBONES = ("bert", "roberta", "xlm-roberta", "camembert")
DECODER_BACKBONES = ("llama", "qwen2")

# The checkpoint architectures the plugin serves, and the tasks each serves (vLLM's task names).
SERVED_ARCHITECTURES = {
    "PooledForSequenceClassification": ("classify",),
    "PooledModel": ("embed",),
}
# Pooled architectures the plugin registers only to refuse them by name (rather than let vLLM fall back to its
# Transformers backend, which would put its own pooler in front of the model's head), with the reason.
REFUSED_ARCHITECTURES = {
    "PooledForTokenClassification": (
        "a token classifier (one prediction per token) is not served by the plugin, which serves one pooled output "
        "per text"
    ),
    "PooledForMultiTask": (
        "a multi-task model (one backbone, several heads in one forward) is not served: vLLM's pooling runner returns "
        "one output per request from one pooler"
    ),
}


def served_tasks(architecture: str) -> tuple[str, ...]:
    return SERVED_ARCHITECTURES.get(architecture, ())


def _reads_layers(pooling_class: type[Pooler], config) -> bool:
    """Whether the pooling reads hidden states of other layers than the last (a layer pooling)."""
    return pooling_class(config).hidden_states_read is not None


def refusal(config, architecture: str) -> str | None:
    """Why vLLM cannot serve this checkpoint exactly (the message names what, why and what to do instead), or None
    when it can."""
    prefix = f"pooled_models' vLLM plugin cannot serve {architecture}"
    if architecture in REFUSED_ARCHITECTURES:
        return f"{prefix}: {REFUSED_ARCHITECTURES[architecture]}. Instead, {ALTERNATIVES}."
    if architecture not in SERVED_ARCHITECTURES:
        return f"{prefix}: unknown architecture. Served: {', '.join(SERVED_ARCHITECTURES)}."
    backbone = config.backbone_config
    model_type = getattr(backbone, "model_type", None)
    served_types = ENCODER_BACKBONES + DECODER_BACKBONES
    if model_type not in served_types:
        return (
            f"{prefix} with a {model_type!r} backbone: the plugin runs vLLM's own implementation of the backbone, "
            f"which it has for model types {', '.join(served_types)}. Instead, {ALTERNATIVES}."
        )
    if (
        model_type in ENCODER_BACKBONES
        and getattr(backbone, "position_embedding_type", "absolute") != "absolute"
    ):
        return (
            f"{prefix}: the backbone uses position_embedding_type={backbone.position_embedding_type!r}, and vLLM's "
            f"BERT implementation has absolute positions only. Instead, {ALTERNATIVES}."
        )
    if config.pooling in ("label_text", "label_tokens"):
        return label_refusal(config, architecture, prefix, ALTERNATIVES)
    pooling_class = POOLINGS.lookup(config.pooling)
    if pooling_class.encode is not Pooler.encode:
        return (
            f"{prefix} with pooling={config.pooling!r}: this pooling puts tokens of its own into every input "
            "(label tokens after the first token, or every label's own text, one group of labels per pass), while vLLM "
            "runs each request's "
            f"prompt tokens as the tokenizer gave them. Instead, {ALTERNATIVES}."
        )
    if model_type in DECODER_BACKBONES and _reads_layers(pooling_class, config):
        return (
            f"{prefix} with pooling={config.pooling!r} on a {model_type!r} backbone: this pooling reads the hidden "
            "states of several layers, which the plugin takes from vLLM's encoders (BERT, RoBERTa) only; vLLM's "
            "decoders return the last layer. Token poolings (cls, last_token, mean, ...) are served on this backbone. "
            f"Instead, {ALTERNATIVES}."
        )
    return None
