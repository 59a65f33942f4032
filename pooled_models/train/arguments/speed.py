"""The training arguments that choose how batches are laid out on the device, not what is learnt from them:
padding-free batches with torch's varlen attention, token-budget batches, and padding to a few lengths (a
compiled model then meets a few shapes). Measured on a GPU by bench/gpu.py (docs/performance.md, "On a GPU")."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import UsageError

__all__ = ["SpeedArguments", "PADDING_FREE_CHOICES", "check_speed_arguments"]

# --padding_free: "auto" turns it on where it runs (a CUDA GPU with torch's varlen kernel, a backbone that takes
# it, half precision, one sequence task) and says why not elsewhere; "true" refuses a run where it cannot.
PADDING_FREE_CHOICES = ("auto", "true", "false")


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
            "(--torch_compile) meets a few shapes instead of one per batch length. Unset: to the longest text."
        },
    )


def check_speed_arguments(args) -> None:
    """Refuse values out of range (a config file's values bypass argparse's types and choices)."""
    value = args.padding_free
    if isinstance(value, bool):  # a YAML file says true/false without quotes
        args.padding_free = value = "true" if value else "false"
    if value not in PADDING_FREE_CHOICES:
        raise UsageError(f"Unknown padding_free {value!r}. Valid choices: {', '.join(PADDING_FREE_CHOICES)}.")
    for name in ("max_tokens_per_batch", "pad_to_multiple_of"):
        number = getattr(args, name)
        if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 1):
            raise UsageError(f"{name} must be a whole number >= 1 (or unset), got {number!r}.")
