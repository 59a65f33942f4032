"""Padding-free attention with torch's own variable-length kernel, registered with transformers'
``AttentionInterface`` as ``attn_implementation="torch_varlen"``.

``torch.nn.attention.varlen.varlen_attn`` (torch >= 2.10; 2.11 added ``scale`` and ``window_size``) runs flash
attention over one row that holds every text of a batch back to back, told where each text starts by cumulative
lengths: no padding is computed and no mask is built, and it needs no package beyond torch (transformers' own
padding-free path needs flash-attn). A backbone whose attention modules call transformers' ``AttentionInterface``
(its class sets ``_supports_attention_backend``) hands this function the ``cu_seq_lens_q`` / ``max_length_q``
keyword arguments a padding-free call passes down (``padding_free.py``); DeBERTa-v2 and MPNet compute attention in
their own modules and cannot take it.

What the kernel does not do, and what this function does about it:

* no dropout on the attention probabilities: a backbone that trains with attention dropout (BERT's
  ``attention_probs_dropout_prob=0.1``) trains without it on this path, said once in the log;
* no float32: under autocast the inputs are cast to autocast's dtype (as transformers' flash path does); float32
  without autocast is refused by name;
* no grouped-query attention before torch 2.13 (``enable_gqa``): the key and value heads are repeated instead;
* CUDA only: on any other device the same function runs a reference (each text through ``scaled_dot_product_attention``
  alone, with the same causal and window rules), so the layout is tested on CPU and the kernel alone needs a GPU.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

__all__ = [
    "TORCH_VARLEN",
    "register_varlen_attention",
    "torch_varlen_attention",
    "varlen_kernel",
    "varlen_unavailable_reason",
    "reference_varlen_attention",
]

logger = logging.getLogger(__name__)

TORCH_VARLEN = "torch_varlen"
# Flash attention's kernels need Ampere or newer (compute capability 8.0).
MIN_CAPABILITY = (8, 0)
_warned: set[str] = set()


def varlen_kernel() -> Callable | None:
    """torch's ``varlen_attn``, or None where this torch has none (before 2.10)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def varlen_unavailable_reason(device: torch.device | str) -> str | None:
    """Why torch's varlen kernel cannot run on ``device``, or None where it can."""
    device = torch.device(device)
    if varlen_kernel() is None:
        return f"torch {torch.__version__} has no torch.nn.attention.varlen (torch 2.10 and newer have it)"
    if device.type != "cuda":
        return f"torch's varlen kernel runs on CUDA GPUs only, and this run is on {device.type}"
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        return (
            f"{torch.cuda.get_device_name(device)} has compute capability {capability[0]}.{capability[1]}; "
            "torch's varlen kernel (flash attention) needs 8.0 or newer"
        )
    return None


def register_varlen_attention() -> None:
    """Make ``attn_implementation="torch_varlen"`` known to transformers (idempotent)."""
    if AttentionInterface._global_mapping.get(TORCH_VARLEN) is not torch_varlen_attention:
        AttentionInterface.register(TORCH_VARLEN, torch_varlen_attention)


def torch_varlen_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ``query [1, heads, tokens, dim]`` (one padding-free row), key and
    value ``[1, kv_heads, tokens, dim]`` -> ``([1, tokens, heads, dim], None)``."""
    boundaries = kwargs.get("cu_seq_lens_q")
    if boundaries is None:
        raise ValueError(
            "attn_implementation='torch_varlen' runs padding-free rows only, and this call gave no cu_seq_lens_q "
            "(the texts' cumulative lengths). Pooled models pass them for padding-free batches; for a padded batch "
            "use attn_implementation='sdpa'."
        )
    if softcap is not None or s_aux is not None:
        raise ValueError(
            f"attn_implementation='torch_varlen': {type(module).__name__} uses "
            f"{'a logit soft-cap' if softcap is not None else 'attention sinks'}, which torch's varlen kernel does "
            "not compute; use attn_implementation='sdpa'."
        )
    if query.shape[0] != 1:
        raise ValueError(
            f"attn_implementation='torch_varlen' takes one padding-free row, got a batch of {query.shape[0]} rows."
        )
    if dropout and module.training:
        _warn_once(
            "dropout",
            f"torch's varlen kernel has no attention dropout: {type(module).__name__}'s attention-probability "
            f"dropout ({dropout}) is not applied while training padding-free (hidden-state dropout still is).",
        )
    causal = bool(module.is_causal if is_causal is None else is_causal)
    window = _window(causal, sliding_window)
    longest = kwargs.get("max_length_q")
    output = _attend(query[0], key[0], value[0], boundaries, longest, scaling, window)
    return output.unsqueeze(0), None


def _window(causal: bool, sliding_window: int | None) -> tuple[int, int]:
    """flash attention's (left, right) window: transformers' ``sliding_window`` counts the token itself, so a window
    of ``w`` sees ``w - 1`` tokens on each side (both sides for an encoder, the left for a decoder), as transformers'
    masks and its flash path (modeling_flash_attention_utils) do."""
    reach = -1 if sliding_window is None else sliding_window - 1
    return (reach, 0 if causal else reach)


def _attend(query, key, value, boundaries, longest, scaling, window) -> torch.Tensor:
    """``[heads, tokens, dim]`` inputs -> ``[tokens, heads, dim]``."""
    # [tokens, heads, dim]; a no-op copy where the projections laid the heads out per token (BERT, Llama...)
    query, key, value = (tensor.transpose(0, 1).contiguous() for tensor in (query, key, value))
    if (
        key.shape[1] != query.shape[1]
    ):  # grouped-query attention: each key/value head serves several query heads
        repeats = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(repeats, dim=1), value.repeat_interleave(repeats, dim=1)
    if not query.is_cuda:
        return reference_varlen_attention(query, key, value, boundaries, scaling, window)
    dtype = _kernel_dtype(query)
    output = _call_kernel(
        query.to(dtype), key.to(dtype), value.to(dtype), boundaries.to(torch.int32), longest, scaling, window
    )
    return output.to(query.dtype)


def _kernel_dtype(query: torch.Tensor) -> torch.dtype:
    if query.dtype in (torch.float16, torch.bfloat16):
        return query.dtype
    if torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    raise ValueError(
        f"attn_implementation='torch_varlen' runs in float16 or bfloat16 (flash attention), and the attention "
        f"inputs are {query.dtype}: train with --bf16 / --fp16 (autocast), load the model in bfloat16, or use "
        "attn_implementation='sdpa'."
    )


def _call_kernel(query, key, value, boundaries, longest, scaling, window) -> torch.Tensor:
    """torch's kernel, called as this torch's signature takes it: 2.10 has ``is_causal`` and neither ``scale`` nor
    ``window_size``; 2.11 has ``scale`` and ``window_size`` (causal is the window ``(-1, 0)``)."""
    kernel = varlen_kernel()
    parameters = inspect.signature(kernel).parameters
    if longest is None:  # not given by the caller: read once from the boundaries (a host synchronisation)
        longest = int((boundaries[1:] - boundaries[:-1]).max())
    arguments = {}
    if "window_size" in parameters:
        arguments["window_size"] = window
    elif window not in ((-1, -1), (-1, 0)):
        raise ValueError(
            f"torch {torch.__version__}'s varlen_attn has no window_size, so sliding-window attention (window "
            f"{window}) cannot run padding-free: torch 2.11 or newer has it."
        )
    elif "is_causal" in parameters:
        arguments["is_causal"] = window == (-1, 0)
    if "scale" in parameters:
        arguments["scale"] = scaling
    elif scaling is not None:
        # The kernel scales by 1/sqrt(dim): the query carries the rest of the model's own scale.
        query = query * (scaling * query.shape[-1] ** 0.5)
    return kernel(query, key, value, boundaries, boundaries, longest, longest, **arguments)


def reference_varlen_attention(query, key, value, boundaries, scaling, window) -> torch.Tensor:
    """What the kernel computes, one text at a time with ``scaled_dot_product_attention`` (CPU, tests, float32):
    ``[tokens, heads, dim]`` in and out. Reads the boundaries on the host."""
    output = torch.empty_like(query)
    edges = boundaries.tolist()
    for start, end in zip(edges[:-1], edges[1:], strict=True):
        if end == start:
            continue
        mask = _window_mask(end - start, window, query.device)
        output[start:end] = F.scaled_dot_product_attention(
            query[start:end].transpose(0, 1),
            key[start:end].transpose(0, 1),
            value[start:end].transpose(0, 1),
            attn_mask=mask,
            scale=scaling,
        ).transpose(0, 1)
    return output


def _window_mask(length: int, window: tuple[int, int], device) -> torch.Tensor | None:
    if window == (-1, -1):
        return None
    positions = torch.arange(length, device=device)
    distance = positions.unsqueeze(1) - positions.unsqueeze(0)  # query - key
    left, right = window
    allowed = torch.ones(length, length, dtype=torch.bool, device=device)
    if left >= 0:
        allowed &= distance <= left
    if right >= 0:
        allowed &= distance >= -right
    return allowed


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message)
