"""The training arguments that choose how batches are laid out on the device, not what is learnt from them:
padding-free batches with torch's varlen attention, token-budget batches, and padding to a few lengths (length
buckets, or a multiple: a compiled model then meets a few shapes). Measured on a GPU by bench/gpu.py
(docs/performance.md, "On a GPU"). Nothing here writes into the arguments: a config file's ``true``/``false`` is read
as the choice it names where the run's layout is chosen (``choice``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import UsageError

__all__ = [
    "SpeedArguments",
    "PADDING_FREE_CHOICES",
    "BUCKET_CHOICES",
    "LENGTH_BUCKETS",
    "CUDA_GRAPH_MODES",
    "choice",
    "check_speed_arguments",
]

# --padding_free: "auto" turns it on where it runs (a CUDA GPU with torch's varlen kernel, a backbone that takes
# it, half precision, one sequence task) and says why not elsewhere; "true" refuses a run where it cannot.
PADDING_FREE_CHOICES = ("auto", "true", "false")
# --pad_to_buckets: "auto" pads to length buckets on a CUDA GPU (padded batches of one task) and to each batch's
# longest text elsewhere (what bench/throughput.py measured on the CPU); "true" refuses a run where it cannot.
BUCKET_CHOICES = ("auto", "true", "false")
# How many bucket lengths a run's training texts are cut into: few enough that a compiled model records each once
# (torch's dynamo recompiles a function at most 8 times before it runs it uncompiled), enough that a batch of short
# texts pads little. Not yet measured on a GPU (bench/gpu.py's compiled arms).
LENGTH_BUCKETS = 6
# The torch.compile modes that record CUDA graphs (one graph per shape, replayed with one launch).
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


@dataclass
class SpeedArguments:
    padding_free: str = field(
        default="auto",
        metadata={
            "help": "Train and evaluate on padding-free batches: each batch's texts in one row, without padding, "
            "attended within themselves by torch's own varlen attention kernel (torch >= 2.10, CUDA, bf16/fp16). "
            "'auto': on where it can run (a CUDA GPU, a backbone that computes attention through transformers' "
            "AttentionInterface, --bf16 or --fp16, one sequence task), else off with the reason logged; 'true': "
            "refuse a run where it cannot; 'false': padded batches (grouped by length).",
            "choices": list(PADDING_FREE_CHOICES),
        },
    )
    max_tokens_per_batch: int | None = field(
        default=None,
        metadata={
            "help": "Cut training batches by tokens instead of rows: each batch holds as many texts as fit in this "
            "many tokens (padding-free: their tokens; padded: rows x the longest), so every step does about the same "
            "work. Batches are drawn once from a shuffle and their order is reshuffled every epoch. Unset: "
            "per_device_train_batch_size rows."
        },
    )
    pad_to_multiple_of: int | None = field(
        default=None,
        metadata={
            "help": "Pad each padded batch to a multiple of this many tokens, so that a compiled model "
            "(--torch_compile) meets a few shapes instead of one per batch length. Unset: to the longest text "
            "(or to a length bucket, --pad_to_buckets)."
        },
    )
    pad_to_buckets: str = field(
        default="auto",
        metadata={
            "help": "Pad each padded training and evaluation batch to the smallest of a few lengths (length "
            "buckets) that holds its longest text, chosen from the training texts' lengths (quantiles, rounded up "
            "to a multiple of 8, none past max_seq_length), so that a compiled model (--torch_compile) compiles and "
            "records each shape once; with --torch_compile every bucket is compiled before the first step. "
            "'auto': on a CUDA GPU for padded batches of one task, off elsewhere (on the CPU a batch padded to its "
            "longest text is fastest); 'true': refuse a run where it cannot; 'false': pad to the longest text.",
            "choices": list(BUCKET_CHOICES),
        },
    )
    length_buckets: int = field(
        default=LENGTH_BUCKETS,
        metadata={
            "help": "How many bucket lengths --pad_to_buckets cuts the training texts' lengths into (at most)."
        },
    )


def choice(args, name: str) -> str:
    """A three-way setting as a word: a config file's ``true``/``false`` (YAML booleans) read as the choice."""
    value = getattr(args, name)
    return ("true" if value else "false") if isinstance(value, bool) else value


def check_speed_arguments(args) -> None:
    """Refuse values out of range (a config file's values bypass argparse's types and choices), and settings that
    cannot go together; writes nothing."""
    for name, valid in (("padding_free", PADDING_FREE_CHOICES), ("pad_to_buckets", BUCKET_CHOICES)):
        if choice(args, name) not in valid:
            raise UsageError(f"Unknown {name} {getattr(args, name)!r}. Valid choices: {', '.join(valid)}.")
    for name in ("max_tokens_per_batch", "pad_to_multiple_of", "length_buckets"):
        number = getattr(args, name)
        if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 1):
            raise UsageError(f"{name} must be a whole number >= 1 (or unset), got {number!r}.")
    if choice(args, "pad_to_buckets") == "true":
        for name, other in (
            ("pad_to_multiple_of", "pads to a multiple instead"),
            (
                "max_tokens_per_batch",
                "varies the rows of a batch, so its shapes are many whatever the padding",
            ),
        ):
            if getattr(args, name) is not None:
                raise UsageError(f"--pad_to_buckets true: --{name} {other}; set one of the two.")
        if choice(args, "padding_free") == "true":
            raise UsageError(
                "--pad_to_buckets true pads batches, and --padding_free true asks for none; set one."
            )
    _refuse_what_breaks_cuda_graphs(args)


def _refuse_what_breaks_cuda_graphs(args) -> None:
    """CUDA graphs replay one recorded step: gradient accumulation (several forward passes whose gradients add up
    outside the graph, pytorch#169545) and activation checkpointing (a forward pass again inside backward,
    pytorch#154306) break them, so torch would record again or give up silently. Refused by name."""
    mode = getattr(args, "torch_compile_mode", None)
    if mode not in CUDA_GRAPH_MODES:
        return
    if args.gradient_accumulation_steps > 1:
        raise UsageError(
            f"--torch_compile_mode {mode} records CUDA graphs, which gradient accumulation breaks "
            f"(--gradient_accumulation_steps {args.gradient_accumulation_steps}): use a larger "
            "--per_device_train_batch_size with --gradient_accumulation_steps 1, or --torch_compile_mode default."
        )
    if args.gradient_checkpointing:
        raise UsageError(
            f"--torch_compile_mode {mode} records CUDA graphs, which activation checkpointing breaks "
            "(--gradient_checkpointing true): leave gradient_checkpointing off, or use --torch_compile_mode default."
        )
