"""How a run lays its batches out on the device (arguments/speed.py): padding-free or padded, padded to each batch's
longest text or to length buckets, or (document mode) whole documents' windows up to a window budget, and with which
collator. ``--padding_free auto`` chooses padding-free batches
where they run, and says why not elsewhere; ``--pad_to_buckets auto`` pads to a few lengths on a CUDA GPU. The
choices change how fast a step runs, not what it computes (tests/train/test_batch_layout.py, test_buckets.py),
except that torch's varlen kernel applies no attention dropout, which the log line says where the backbone has
some."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from ..errors import UsageError
from ..modeling.configuration_multitask import SEQUENCE
from ..modeling.documents import DocumentCollator
from ..modeling.modeling_pooled import PooledForSequenceClassification
from ..modeling.packing import packing_refusal
from ..modeling.text_config import text_config_of
from ..modeling.varlen_attention import (
    TORCH_VARLEN,
    register_varlen_attention,
    varlen_unavailable_reason,
)
from ..modeling.window_pooling import reads_documents
from .arguments.speed import choice
from .data import TaskData, check_token_ids
from .data.batching import token_lengths
from .data.buckets import bucket_lengths
from .data.documents import DocumentMode, DocumentReading, read_documents
from .data.flat import FlatCollator
from .data.multitask import TaskCollator

__all__ = [
    "lay_out_batches",
    "BatchLayout",
    "PADDING_FREE_MIN_TOKENS",
    "padding_free_refusal",
    "choose_padding_free",
    "bucket_refusal",
    "choose_buckets",
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


@dataclass(frozen=True)
class BatchLayout:
    """How a run lays its batches out, as chosen once before its Trainer is built."""

    padding_free: bool
    buckets: (
        tuple[int, ...] | None
    )  # the length buckets padded batches are padded to; None: to the longest text
    max_length: int  # the run's text length (a batch longer than the last bucket is padded to it)
    lines: tuple[str, ...]  # what the run's log says of the choices, and why
    documents: DocumentReading  # document mode: its windows, its budget, its log line and card rows

    @property
    def window_budget(self) -> int | None:
        """Document mode: a training batch holds whole documents up to this many windows (None: rows are texts)."""
        return self.documents.window_budget

    def collator(self, tokenizer, kinds: dict[str, str], pad_to_multiple_of: int | None):
        """The data collator of these batches (collator_for)."""
        return collator_for(
            self.padding_free,
            tokenizer,
            kinds,
            pad_to_multiple_of,
            self.buckets,
            self.max_length,
            documents=self.documents.mode.on,
        )

    def card_rows(self) -> dict[str, str]:
        """The model card's rows for the choices the training settings do not show (training only)."""
        if self.buckets is None:
            return {}
        return {
            "length buckets": f"{', '.join(map(str, self.buckets))} tokens (a batch padded to the smallest "
            "that holds it; quantiles of the training texts' lengths)"
        }


def padding_free_refusal(args, model, kinds: dict[str, str]) -> str | None:
    """Why this run cannot train padding-free, or None where it can."""
    if list(kinds.values()) != [SEQUENCE]:
        return "token and multi-task runs pad their batches (their labels are per token or per task)"
    if reads_documents(model.config):  # a model factory's config too
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
    if getattr(args, "pad_to_buckets", "auto") in ("true", True):
        return "--pad_to_buckets true asks for padded batches"
    if args.torch_compile:
        return (
            "--torch_compile: a padding-free row changes shape at every batch, and the compiled model would "
            "recompile; compiled runs pad (length buckets keep their shapes few)"
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
    setting = choice(args, "padding_free")
    if setting == "false":
        return False, "Batches: padded (--padding_free false)"
    refusal = padding_free_refusal(args, model, kinds)
    if refusal is None and setting == "auto" and (tokens_per_step or math.inf) < PADDING_FREE_MIN_TOKENS:
        refusal = (
            f"a training step carries about {tokens_per_step:,.0f} real tokens, fewer than {PADDING_FREE_MIN_TOKENS:,}, "
            "where padded batches train as fast (docs/performance.md, 'On a GPU'); --padding_free true to force it"
        )
    if refusal is not None:
        if setting == "true":
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


def bucket_refusal(args, kinds: dict[str, str], padding_free: bool) -> str | None:
    """Why this run does not pad to length buckets (--pad_to_buckets auto: off; true: refused), or None. Known from
    the arguments and the tasks alone, so the plan reads it too (a compiled run on buckets drops its last,
    smaller batch: plan.py)."""
    if padding_free:
        return "padding-free batches have no padding"
    if len(kinds) > 1:
        return "a multi-task run pads each task's batches to their longest text"
    if args.max_tokens_per_batch is not None:
        return "--max_tokens_per_batch varies a batch's rows, so its shapes are many whatever the padding"
    if args.pad_to_multiple_of is not None:
        return "--pad_to_multiple_of pads to a multiple instead"
    if choice(args, "pad_to_buckets") == "auto" and args.device.type != "cuda":
        return (
            "not on a CUDA GPU: on the CPU a batch padded to its longest text is fastest "
            "(bench/throughput.py); --pad_to_buckets true to force it"
        )
    return None


def choose_buckets(
    args, kinds: dict[str, str], padding_free: bool, lengths: list[int] | None, max_length: int
) -> tuple[tuple[int, ...] | None, str]:
    """``(the bucket lengths or None, the log line)`` for a run whose training texts have ``lengths`` tokens (None:
    no training split; then no buckets). ``--pad_to_buckets true`` refuses a run that cannot."""
    setting = choice(args, "pad_to_buckets")
    if setting == "false":
        return None, "Padding: to each batch's longest text (--pad_to_buckets false)"
    refusal = bucket_refusal(args, kinds, padding_free)
    if refusal is None and not lengths:
        refusal = "the buckets are chosen from the training texts' lengths, and this run trains on none"
    if refusal is not None:
        if setting == "true":
            raise UsageError(f"--pad_to_buckets true: {refusal}.")
        return None, f"Padding: to each batch's longest text; length buckets are off: {refusal}"
    buckets = bucket_lengths(lengths, args.length_buckets, max_length)
    why = (
        "so that a compiled model meets a few shapes" if args.torch_compile else "few shapes, little padding"
    )
    return buckets, (
        f"Padding: to {len(buckets)} length bucket{'s' if len(buckets) > 1 else ''} ({', '.join(map(str, buckets))} "
        "tokens; quantiles of the "
        f"training texts' lengths, --length_buckets {args.length_buckets}), {why}"
    )


def collator_for(
    padding_free: bool,
    tokenizer,
    kinds: dict[str, str],
    pad_to_multiple_of: int | None,
    buckets: tuple[int, ...] | None = None,
    max_length: int | None = None,
    documents: bool = False,
):
    """The run's data collator: padding-free batches, document mode's windows (``documents``), or each task's padded
    rows (to buckets where given)."""
    if documents:
        return DocumentCollator(tokenizer, pad_to_multiple_of=pad_to_multiple_of)
    if padding_free:
        return FlatCollator()
    if buckets is None:  # padded to each batch's longest text, as ever
        return TaskCollator(tokenizer, kinds, pad_to_multiple_of=pad_to_multiple_of)
    return TaskCollator(tokenizer, kinds, buckets=buckets, max_length=max_length)


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


def lay_out_batches(
    training_args, model, tasks: dict[str, TaskData], max_length: int, mode: DocumentMode
) -> BatchLayout:
    """Padding-free batches or padded ones, to the longest text or to length buckets (batch_layout.py), or in
    document mode whole documents up to a window budget, each batch's windows padded to their longest (no buckets);
    with the lines that say which. Every token id is checked against the model's vocabulary once, so the model need
    not read them back at each step. ``training_args``: as the plan resolved them."""
    kinds = {name: task.kind for name, task in tasks.items()}
    documents = read_documents(tasks, mode, training_args)
    padding_free, line = choose_padding_free(
        training_args, model, kinds, tokens_per_step(training_args, tasks)
    )
    if mode.on and choice(training_args, "pad_to_buckets") == "true":
        raise UsageError(
            "--pad_to_buckets true: document mode pads each batch's windows to their longest (its window budget "
            "bounds a batch); leave --pad_to_buckets auto or false."
        )
    lengths = None if mode.on else training_lengths(tasks)
    buckets, padding = choose_buckets(training_args, kinds, padding_free, lengths, max_length)
    for task in tasks.values():
        check_token_ids(task, model.get_input_embeddings().num_embeddings)
    if buckets is None and choice(training_args, "pad_to_buckets") == "auto":
        logger.debug(padding)  # padded as ever (the CPU's default): nothing new to say
        return BatchLayout(padding_free, buckets, max_length, (line,), documents)
    return BatchLayout(padding_free, buckets, max_length, (line, padding), documents)


def training_lengths(tasks: dict[str, TaskData]) -> list[int] | None:
    """The training texts' token counts of a run of one task (None without training rows, or with several tasks)."""
    if len(tasks) != 1:
        return None
    rows = next(iter(tasks.values())).encoded.get("train")
    return token_lengths(rows) if rows is not None and len(rows) else None
