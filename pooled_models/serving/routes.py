"""Which implementation of a backbone the vLLM plugin runs: vLLM's own kernels, or the transformers module itself.

Plain Python over a pooled checkpoint's config (no vllm import), so that the package's tests check the decision for
every model type where vLLM is not installed, and the plugin (``serving/model.py``) follows the same decision.

- **vLLM's kernels** (``serving/backbones.py``) where vLLM 0.32 implements the backbone and gives the hidden states the
  pooling reads exactly as transformers does: BERT and the RoBERTa family (absolute positions), ModernBERT, Llama,
  Qwen2, Qwen3 and Gemma 3's text model. Layer poolings loop an encoder's layers, or take a decoder's chosen layers
  through vLLM's own aux-hidden-state hook (``EagleModelMixin``); Gemma 3's vLLM model has no such hook, and its layers
  are looped too.
- **The transformers route** (``serving/transformers_backbone.py``) for every other backbone the package builds:
  DistilBERT, DeBERTa-v2/v3, ELECTRA, MPNet, ALBERT..., and what the kernels above do not reproduce exactly (BERT
  with ``position_embedding_type='relative_key'``). The checkpoint's own transformers
  backbone runs over each request's tokens, padded from vLLM's flattened batch: exact, but without vLLM's paged
  attention kernels (docs/serving.md gives what it costs).

GTE and Nomic BERT stay on the transformers route: vLLM's ``bert_with_rope.py`` serves the remote-code checkpoints
(its config hooks assert ``NewConfig`` / ``NomicBertConfig``, its weights are fused), not transformers' own ``gte`` and
``nomic_bert`` types that the package builds.
"""

from __future__ import annotations

__all__ = [
    "VLLM_ENCODERS",
    "VLLM_DECODERS",
    "VLLM_KERNELS",
    "AUX_HIDDEN_STATE_DECODERS",
    "RUN_ALONE",
    "TRANSFORMERS_ROUTE_REFUSED",
    "TRANSFORMERS",
    "kernel_architecture",
    "route",
]

# Backbone model type -> the class of vLLM's own implementation the plugin builds.
VLLM_ENCODERS = {
    "bert": "BertModel",
    "roberta": "RobertaModel",
    "xlm-roberta": "XLMRobertaModel",
    "camembert": "CamembertModel",
    "modernbert": "ModernBertModel",
}
VLLM_DECODERS = {
    "llama": "LlamaModel",
    "qwen2": "Qwen2Model",
    "qwen3": "Qwen3Model",
    "gemma3_text": "Gemma3Model",
    "gemma3": "Gemma3Model",  # Gemma 3's composite config: its text model (language_model), the vision tower unused
}
VLLM_KERNELS = {**VLLM_ENCODERS, **VLLM_DECODERS}
# Decoders whose vLLM model carries EagleModelMixin's aux-hidden-state hook (vllm/model_executor/models/interfaces.py):
# its forward also returns the residual stream after the layers it is told, which is transformers' hidden_states[i].
# (Gemma 3's has none: backbones.py loops its layers for a layer pooling.)
AUX_HIDDEN_STATE_DECODERS = ("llama", "qwen2", "qwen3")
# The BERT family's vLLM embedding adds absolute position embeddings only (vllm/model_executor/models/bert.py).
_ABSOLUTE_POSITIONS_ONLY = ("bert", "roberta", "xlm-roberta", "camembert")

# Backbones whose token states move with padding: the transformers route runs each request alone, unpadded, as
# pipeline(...) runs one text. ConvBERT's convolution and Nystromformer's landmarks read the padded sequence
# (tests/modeling/test_architectures.py's STATES_MOVE_WITH_PADDING); FNet's Fourier mixing takes no mask; YOSO's
# hashed attention moves by about 0.04 with three padding tokens.
RUN_ALONE = ("convbert", "nystromformer", "fnet", "yoso")
# Backbones the transformers route refuses, with the reason (support.refusal says it at load).
TRANSFORMERS_ROUTE_REFUSED = {
    "canine": "CanineModel downsamples the characters with a strided convolution, which fails in transformers itself "
    "on a text shorter than its downsampling rate (an error that would stop vLLM's engine for every request), and "
    "its states move with padding",
}

TRANSFORMERS = "transformers"


def _text_config(backbone_config):
    return (
        backbone_config.get_text_config() if hasattr(backbone_config, "get_text_config") else backbone_config
    )


def _kernel_misses(backbone_config, layers: list[int] | None) -> str | None:
    """Why vLLM's kernels would not give the states transformers gives for this backbone, or None when they do."""
    model_type = getattr(backbone_config, "model_type", None)
    if model_type not in VLLM_KERNELS:
        return f"vLLM 0.32 has no implementation of model type {model_type!r}"
    position_type = getattr(backbone_config, "position_embedding_type", "absolute")
    if model_type in _ABSOLUTE_POSITIONS_ONLY and position_type not in (None, "absolute"):
        return f"vLLM's BERT has absolute positions only, not position_embedding_type={position_type!r}"
    text = _text_config(backbone_config)
    if model_type in ("gemma3", "gemma3_text") and getattr(text, "use_bidirectional_attention", False):
        return "vLLM's Gemma 3 reads is_causal, not transformers' use_bidirectional_attention"
    return None


def kernel_architecture(backbone_config, layers: list[int] | None) -> str | None:
    """The vLLM class that serves this backbone exactly for a pooling reading ``layers`` (None: the last layer
    only), or None when the transformers route runs it."""
    if _kernel_misses(backbone_config, layers) is not None:
        return None
    return VLLM_KERNELS[backbone_config.model_type]


def route(backbone_config, layers: list[int] | None) -> tuple[str, str]:
    """``(implementation, why)``: the vLLM class name and "vLLM's own implementation", or ``TRANSFORMERS`` and the
    reason vLLM's kernels do not serve it exactly."""
    missed = _kernel_misses(backbone_config, layers)
    if missed is None:
        return VLLM_KERNELS[backbone_config.model_type], "vLLM's own implementation"
    return TRANSFORMERS, missed
