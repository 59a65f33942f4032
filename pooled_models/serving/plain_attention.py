"""Running a served model's forward outside a scheduled batch: vLLM's own layers, with each attention layer computing
its prompts' attention with PyTorch's ``scaled_dot_product_attention``.

vLLM's attention layers read their metadata from the forward context (``get_forward_context().attn_metadata``), which
the model runner sets only around a batch it scheduled; at load (``process_weights_after_loading``) there is none. A
label-text model's own labels' vectors do not depend on the text, so they are worked out once, at load
(``label_text.py``): the labels' prompts run through the served model's own forward (vLLM's embeddings, linear
layers, norms and rotary embeddings, the family's input path with the label marker, vLLM's weights on vLLM's device in
vLLM's dtype: no second copy of the model), each attention layer computing what it computes for those prompts in a
batch: every prompt attends within itself, causally in a decoder's layers (``AttentionType.DECODER``), both ways in an
encoder's (``ENCODER_ONLY``), with the layer's own scale; ``scaled_dot_product_attention`` is also the kernel of
transformers' ``"sdpa"`` attention.

Only plain attention is computed so: ``plain_attention_refusal`` says why a model's layers are not (another attention
layer class, ALiBi, logit soft-capping, sinks, KV sharing between layers, a quantized query or KV cache, or a sliding
window shorter than twice the longest prompt: such a window cuts nothing, whichever of its conventions a backend
uses), and the caller then works the vectors out another way. vLLM compiles a model's forward on its first call
(``@support_torch_compile``): while the prompts run, every compiled module runs eagerly (``do_not_compile``), so that
nothing of this pass is traced into the graph vLLM serves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import partial

import torch
from torch import nn
from vllm.model_executor.layers.attention.attention import Attention
from vllm.model_executor.layers.attention.encoder_only_attention import EncoderOnlyAttention
from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
from vllm.v1.attention.backend import AttentionType

__all__ = ["plain_attention", "plain_attention_refusal"]

PLAIN_LAYERS = (Attention, EncoderOnlyAttention)
CAUSAL = {AttentionType.DECODER: True, AttentionType.ENCODER_ONLY: False}


def plain_attention_refusal(model: nn.Module, longest_prompt: int) -> str | None:
    """Why ``model``'s attention layers cannot run prompts of up to ``longest_prompt`` tokens as ``plain_attention``
    runs them, or None."""
    for name, module in model.named_modules():
        if not isinstance(module, AttentionLayerBase):
            continue
        if type(module) not in PLAIN_LAYERS:
            return f"{name} is vLLM's {type(module).__name__}, not its plain Attention"
        impl = module.impl
        features = {
            "an attention type other than decoder or encoder-only": module.attn_type not in CAUSAL,
            "ALiBi": getattr(impl, "alibi_slopes", None) is not None,
            "logit soft-capping": bool(getattr(impl, "logits_soft_cap", None)),
            "attention sinks": bool(getattr(module, "has_sink", False)),
            "KV sharing between layers": module.kv_sharing_target_layer_name is not None,
            "a quantized query or KV cache": module.query_quant is not None
            or module.kv_cache_dtype != "auto",
            "a multimodal prefix": bool(getattr(module, "use_mm_prefix", False)),
            "no scale on its implementation": getattr(impl, "scale", None) is None,
        }
        found = [feature for feature, present in features.items() if present]
        if found:
            return f"{name} has {', '.join(found)}"
        window = module.sliding_window
        if window is not None and 2 * longest_prompt > window:
            return (
                f"{name} attends within a sliding window of {window} tokens, and a label's prompt is "
                f"{longest_prompt} tokens long"
            )
    return None


@contextlib.contextmanager
def plain_attention(model: nn.Module, lengths: list[int]) -> Iterator[None]:
    """Within it, ``model``'s forward runs the prompts of ``lengths`` tokens (one after the other in its flat input)
    outside a scheduled batch (see the module's doc; check ``plain_attention_refusal`` first)."""
    patched, compiled = [], []
    for module in model.modules():
        if isinstance(module, PLAIN_LAYERS):
            module.forward = partial(_attention, module, list(lengths))
            patched.append(module)
        if getattr(module, "do_not_compile", True) is False:
            module.do_not_compile = True
            compiled.append(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward  # the class's forward again
        for module in compiled:
            module.do_not_compile = False


def _attention(
    layer: Attention,
    lengths: list[int],
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    output_shape: torch.Size | None = None,
    output_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """What ``layer`` computes for the prompts, each attending within itself (``[tokens, heads * head size]``)."""
    heads, kv_heads = layer.num_heads, layer.num_kv_heads
    query = query.view(-1, heads, layer.head_size).transpose(0, 1)
    key = key.view(-1, kv_heads, layer.head_size).transpose(0, 1)
    value = value.view(-1, kv_heads, layer.head_size_v).transpose(0, 1)
    if kv_heads != heads:  # grouped-query attention: each key/value head serves heads // kv_heads query heads
        key = key.repeat_interleave(heads // kv_heads, dim=0)
        value = value.repeat_interleave(heads // kv_heads, dim=0)
    outputs = [
        nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=CAUSAL[layer.attn_type], scale=layer.impl.scale
        )
        for q, k, v in zip(
            query.split(lengths, dim=1), key.split(lengths, dim=1), value.split(lengths, dim=1), strict=True
        )
    ]
    output = torch.cat(outputs, dim=1).transpose(0, 1).reshape(-1, heads * layer.head_size_v)
    output = output.to(output_dtype or output.dtype)
    return output if output_shape is None else output.view(output_shape)
