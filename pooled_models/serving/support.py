"""What the vLLM plugin serves, and what it refuses at load with the reason and what to do instead.

Plain Python over a pooled checkpoint's config: it imports no vllm, so the package's own tests check every refusal
where vLLM is not installed, and the plugin (``serving/model.py``) raises the same message when vLLM loads the model.

A pooling is served when the engine can reproduce it exactly: vLLM runs its own implementation of the backbone over
each prompt's tokens (or, where it has none that is exact, the checkpoint's transformers backbone: routes.py), and the
pooler and head of pooled_models (the same modules, loaded from the checkpoint) run on those states. What vLLM cannot give exactly is refused, never served with a different score.
"""

from __future__ import annotations

from ..modeling.backbone import SEQUENCE_BASE_MODELS
from ..modeling.pooling import POOLINGS, Pooler
from .label_support import label_refusal
from .multitask_support import served_task, task_architecture
from .routes import TRANSFORMERS_ROUTE_REFUSED

__all__ = [
    "ALTERNATIVES",
    "SERVED_ARCHITECTURES",
    "TOKEN_ARCHITECTURES",
    "served_tasks",
    "refusal",
    "multitask_refusal",
]

# What a user whose model is refused can do instead: both give the model's own scores.
ALTERNATIVES = (
    "serve it with transformers (its pipeline(...) task, e.g. pipeline('text-classification', model=folder), or the "
    "Auto class that loads it), or export it with pooled_models.export_onnx(model, path) and serve the ONNX file with "
    "ONNX Runtime"
)

# The checkpoint architectures the plugin serves, and the tasks each serves (vLLM's task names).
SERVED_ARCHITECTURES = {
    "PooledForSequenceClassification": ("classify",),
    "PooledModel": ("embed",),
    "PooledForTokenClassification": ("token_classify",),
    # One task per served model, named by the config override served_task (serving/multitask_support.py).
    "PooledForMultiTask": ("classify", "token_classify"),
}
# Architectures whose head reads every token's state: their config's pooling never runs, so none is refused.
TOKEN_ARCHITECTURES = ("PooledForTokenClassification",)


def served_tasks(architecture: str) -> tuple[str, ...]:
    return SERVED_ARCHITECTURES.get(architecture, ())


def refusal(config, architecture: str) -> str | None:
    """Why vLLM cannot serve this checkpoint exactly (the message names what, why and what to do instead), or None
    when it can."""
    prefix = f"pooled_models' vLLM plugin cannot serve {architecture}"
    if architecture not in SERVED_ARCHITECTURES:
        return f"{prefix}: unknown architecture. Served: {', '.join(SERVED_ARCHITECTURES)}."
    if architecture == "PooledForMultiTask":
        return multitask_refusal(config)
    model_type = getattr(config.backbone_config, "model_type", None)
    if model_type in SEQUENCE_BASE_MODELS:
        return (
            f"{prefix} with a {model_type!r} backbone: {SEQUENCE_BASE_MODELS[model_type]} gives fewer states than input "
            "tokens, and vLLM's pooler receives one state per scheduled token. Instead, "
            f"{ALTERNATIVES}."
        )
    if model_type in TRANSFORMERS_ROUTE_REFUSED:
        return f"{prefix} with a {model_type!r} backbone: {TRANSFORMERS_ROUTE_REFUSED[model_type]}. Instead, {ALTERNATIVES}."
    if architecture in TOKEN_ARCHITECTURES:
        return None
    if config.pooling in ("label_text", "label_tokens"):
        # On every backbone the plugin serves: the label vectors go in where transformers puts them, in place of the
        # token embedding table's output (backbone_base.Backbone.run_marked, the transformers route's connect_label_pooling).
        return label_refusal(config, architecture, prefix, ALTERNATIVES)
    pooling_class = POOLINGS.lookup(config.pooling)
    if pooling_class.encode is not Pooler.encode:
        return (
            f"{prefix} with pooling={config.pooling!r}: this pooling puts tokens of its own into every input "
            "(label tokens after the first token, or every label's own text, one group of labels per pass), while vLLM "
            "runs each request's "
            f"prompt tokens as the tokenizer gave them. Instead, {ALTERNATIVES}."
        )
    return None


def multitask_refusal(config) -> str | None:
    """Why this engine cannot serve a PooledForMultiTask checkpoint: no task or an unknown one named, or the named task
    cannot be served exactly (the message names the task); None when it can."""
    try:
        task = served_task(config)
    except ValueError as error:
        return str(error)
    reason = refusal(config.task_config(task), task_architecture(config, task))
    if reason is None:
        return None
    return f"PooledForMultiTask task {task!r}: {reason}"
