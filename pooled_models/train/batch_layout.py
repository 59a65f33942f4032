"""How a run lays its batches out on the device (arguments/speed.py): padding-free or padded, and with which
collator. ``--padding_free auto`` chooses padding-free batches where they run, and says why not elsewhere; the
choice changes how fast a step runs, not what it computes (tests/train/test_batch_layout.py), except that torch's
varlen kernel applies no attention dropout, which the log line says where the backbone has some."""

from __future__ import annotations

import logging
import math

from ..errors import UsageError
from ..modeling.configuration_multitask import SEQUENCE
from ..modeling.modeling_pooled import PooledForSequenceClassification
from ..modeling.packing import packing_refusal
from ..modeling.text_config import text_config_of
from ..modeling.varlen_attention import (
    TORCH_VARLEN,
    register_varlen_attention,
    varlen_unavailable_reason,
)
from .data.batching import token_lengths
from .data.documents import DocumentRowsCollator
from .data.flat import FlatCollator
from .data.multitask import TaskCollator

__all__ = [
    "PADDING_FREE_MIN_TOKENS",
    "padding_free_refusal",
    "choose_padding_free",
    "collator_for",
    "tokens_per_step",
]

logger = logging.getLogger("pooled_models.train")

# --padding_free auto turns padding-free batches on where a training step carries at least this many real tokens
# (--max_tokens_per_batch, or per_device_train_batch_size x the training texts' mean length). bench/gpu.py on a lent
# H200 (bench/results/gpu/h200): at 600-1,500 tokens a step (batch size 16) a step's time was the host's, not the
# GPU's, and padded batches were as fast or faster (BERT-base 57 against 63 ms a step on fortunes, 95 against 115 on
# package descriptions; MiniLM even); at 6,100 tokens (batch size 64) padding-free won (117 against 129 ms), with 28%
# less memory. Padding-free computes no padding, which pays once the GPU's arithmetic is what a step waits for.
PADDING_FREE_MIN_TOKENS = 4096
# Where backbone configs keep the attention probabilities' dropout (BERT's family, then most others).
ATTENTION_DROPOUT_FIELDS = ("attention_probs_dropout_prob", "attention_dropout")


def padding_free_refusal(args, model, kinds: dict[str, str]) -> str | None:
    """Why this run cannot train padding-free, or None where it can."""
    if list(kinds.values()) != [SEQUENCE]:
        return "token and multi-task runs pad their batches (their labels are per token or per task)"
    if getattr(model.config, "document_window", None) is not None:
        return "document mode pads its windows (each batch's windows in rows of one length, docs/long-documents.md)"
    if not isinstance(model, PooledForSequenceClassification):
        return f"{type(model).__name__} is not a pooled model, and pooled models are the ones that read them"
    reason = varlen_unavailable_reason(args.device)
    if reason is not None:
        return reason
    if not (args.bf16 or args.fp16):
        return "torch's varlen kernel runs in half precision: train with --bf16 true (or --fp16 true)"
    if args.pad_to_multiple_of is not None:
        return "--pad_to_multiple_of asks for padded batches"
    if args.torch_compile:
        return (
            "--torch_compile: a padding-free row changes shape at every batch, and the compiled model would "
            "recompile; compiled runs pad (--pad_to_multiple_of keeps their shapes few)"
        )
    return packing_refusal(model.get_backbone(), varlen=True)


def choose_padding_free(
    args, model, kinds: dict[str, str], tokens_per_step: float | None = None
) -> tuple[bool, str]:
    """``(on, the log line)``; switches the backbone to torch_varlen when on. ``--padding_free true`` refuses a run
    that cannot; ``auto`` also pads where a step carries fewer than PADDING_FREE_MIN_TOKENS real tokens
    (``tokens_per_step``: the run's estimate; None: not known, no such limit)."""
    if args.max_tokens_per_batch is not None and len(kinds) > 1:
        raise UsageError(
            "--max_tokens_per_batch: a multi-task run draws each batch from one task (--task_sampling), "
            "per_device_train_batch_size rows at a time; leave max_tokens_per_batch unset."
        )
    if args.padding_free == "false":
        return False, "Batches: padded (--padding_free false)"
    refusal = padding_free_refusal(args, model, kinds)
    if (
        refusal is None
        and args.padding_free == "auto"
        and (tokens_per_step or math.inf) < PADDING_FREE_MIN_TOKENS
    ):
        refusal = (
            f"a training step carries about {tokens_per_step:,.0f} real tokens, fewer than {PADDING_FREE_MIN_TOKENS:,}, "
            "where padded batches train as fast (docs/performance.md, 'On a GPU'); --padding_free true to force it"
        )
    if refusal is not None:
        if args.padding_free == "true":
            raise UsageError(f"--padding_free true: {refusal}.")
        return False, f"Batches: padded; padding-free is off: {refusal}"
    register_varlen_attention()
    model.get_backbone().set_attn_implementation(TORCH_VARLEN)
    line = "Batches: padding-free (each batch's texts in one row, torch's varlen attention)"
    dropout = _attention_dropout(model)
    if dropout:
        line += f"; the kernel has no attention dropout, so the backbone's {dropout} is not applied"
    return True, line


def _attention_dropout(model) -> str | None:
    config = text_config_of(model.config)
    for name in ATTENTION_DROPOUT_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, (int, float)) and value > 0:
            return f"{name}={value:g}"
    return None


def collator_for(
    padding_free: bool,
    tokenizer,
    kinds: dict[str, str],
    pad_to_multiple_of: int | None,
    documents: bool = False,
):
    """The run's data collator: padding-free batches, document mode's windows, or each task's padded rows."""
    if documents:
        return DocumentRowsCollator(tokenizer, pad_to_multiple_of=pad_to_multiple_of)
    if padding_free:
        return FlatCollator()
    return TaskCollator(tokenizer, kinds, pad_to_multiple_of=pad_to_multiple_of)


def tokens_per_step(args, tasks) -> float | None:
    """About how many real tokens a training step carries: the token budget, or the batch size times the training
    texts' mean length (None without training rows)."""
    if args.max_tokens_per_batch is not None:
        return float(args.max_tokens_per_batch)
    for task in tasks.values():
        rows = task.encoded.get("train")
        if rows is not None and len(rows):
            lengths = token_lengths(rows)
            return args.per_device_train_batch_size * sum(lengths) / len(lengths)
    return None
