"""The training arguments of document mode (docs/long-documents.md): whether a run reads whole documents in windows,
how many windows a training document keeps and which, how many windows a training batch holds, and how many an
evaluated or predicted document is read with. The window itself (``--document_window``, ``--document_stride``) and the
cross-window pooling (``--document_pooling``) are model settings (arguments/model.py), saved in the config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import UsageError
from ...modeling.documents import WINDOW_KEEPING
from ..options import REMOVED_VALUES, removed_value_message

__all__ = [
    "DocumentArguments",
    "DOCUMENT_MODE_CHOICES",
    "DOCUMENT_MODE_DEFAULT",
    "MAX_WINDOWS_PER_DOCUMENT",
    "WINDOW_KEEPING_DEFAULT",
    "DOCUMENT_GATE_RATE_FACTOR",
    "check_document_arguments",
    "resolved_document_arguments",
]

# --document_mode: "true" reads every text whole, in windows; "false" cuts it at the run's length, as before. ("auto",
# on from a share of long training texts, was removed: its threshold was never measured, options/REMOVED_VALUES.)
DOCUMENT_MODE_CHOICES = ("true", "false")
# train.py's default: no training set is measured to gain enough to pay document mode's training time
# (docs/long-documents.md, "Defaults": on the manual pages first_plus_rest is level with the cut model at 4 times its
# time, on the kernel docs 1.7 points above it on the long pages at 13 to 18 times).
DOCUMENT_MODE_DEFAULT = "false"
# A training document keeps at most this many windows (evaluation and prediction read every window unless told).
MAX_WINDOWS_PER_DOCUMENT = 8
# Which windows a capped training document keeps (modeling/documents.py, WINDOW_KEEPING). Measured by where the words
# that decide a manual page's section sit (bench/long_documents.py --keeping-only, bench/results/long_documents/
# keeping.md: the whole-text TF-IDF classifier on 225 long pages read through the kept windows): the three choices tie
# within a page or two at the default cap of 8 windows (0.871-0.876, every window 0.880) and at 2; at 4, spread reads
# 3 pages more. start_end keeps a page's opening and its close, where a summary and the closing notes sit.
WINDOW_KEEPING_DEFAULT = "start_end"

# first_plus_rest's gate (one number per dimension, from zero) trains at this many times the head's rate, unless
# --document_gate_learning_rate says otherwise. Why: Adam moves a parameter by about its learning rate a step, so at
# the head's rate (5e-3, warmed up and decayed) the gate of a 2-epoch kernel-docs run (72 steps) can open by about
# 0.18 (the sum of its rate over the steps): the windows after the first were barely read, and the model scored as
# the cut one. At ten times it opens to about 0.43 (bench/results/long_documents/manpages_400) and the
# kernel docs' long pages score 1.7 points over the cut model (docs/long-documents.md, "Defaults"). At thirty times
# the gate opened to about 0.94 and the long pages scored as the cut model's (kernel docs, seed 0:
# bench/results/long_documents/kernel_docs_gate_0.15).
DOCUMENT_GATE_RATE_FACTOR = 10.0  # the rule: options/document_gate.py


@dataclass
class DocumentArguments:
    document_mode: str | None = field(
        default=None,
        metadata={
            "help": "Read each text whole, in overlapping windows pooled across the document (document_window, "
            "document_stride, document_pooling), instead of cutting it at max_seq_length. 'true': always (also "
            "implied by --document_window); 'false' (the default; measured: docs/long-documents.md): never. A model "
            "saved in document mode stays in it.",
            "choices": list(DOCUMENT_MODE_CHOICES),
        },
    )
    max_windows_per_document: int | None = field(
        default=MAX_WINDOWS_PER_DOCUMENT,
        metadata={
            "help": "Document mode, training: a document keeps at most this many windows (chosen by "
            "window_keeping), so a step's cost does not follow the longest document. Evaluation and prediction "
            "read every window (eval_max_windows). 0 or unset in a config file: no cap."
        },
    )
    window_keeping: str = field(
        default=WINDOW_KEEPING_DEFAULT,
        metadata={
            "help": "Document mode, training: which windows a capped document keeps. start: its first ones; "
            "start_end: its first half and its last half of the cap; spread: evenly from its first to its last "
            "(measured: docs/long-documents.md, 'Defaults').",
            "choices": list(WINDOW_KEEPING),
        },
    )
    max_windows_per_batch: int | None = field(
        default=None,
        metadata={
            "help": "Document mode, training: a batch holds whole documents up to this many windows (a window "
            "budget: memory follows it, not the longest document; a document past it alone). Unset: "
            "per_device_train_batch_size times the training documents' mean number of windows, so a step holds "
            "about per_device_train_batch_size documents."
        },
    )
    document_gate_learning_rate: float | None = field(
        default=None,
        metadata={
            "help": "Document mode, training, document_pooling first_plus_rest: the learning rate of the gate that "
            "lets the windows after the first into the document's vector. Unset: "
            f"{DOCUMENT_GATE_RATE_FACTOR:g} times head_learning_rate (measured: docs/long-documents.md), since "
            "the gate starts at zero and Adam moves it by about its rate a step. The rule is an option of "
            "train/options/ (document_gate.py); the model card gives the rate the optimizer used."
        },
    )
    eval_max_windows: int | None = field(
        default=None,
        metadata={
            "help": "Document mode, evaluation and prediction: read at most this many windows of a document (the "
            "first ones). Unset: every window. Evaluation batches hold up to per_device_eval_batch_size windows."
        },
    )


def check_document_arguments(args) -> None:
    """Refuse values out of range (a config file's values bypass argparse's types and choices). Read only: the plan
    resolves what a config file may spell otherwise (resolved_document_arguments)."""
    mode = _document_mode_word(args.document_mode)
    if mode == REMOVED_VALUES["document_mode"][0]:  # a config built in Python; the parser refuses it first
        raise UsageError(removed_value_message("document_mode", "The arguments"))
    if mode is not None and mode not in DOCUMENT_MODE_CHOICES:
        raise UsageError(
            f"Unknown document_mode {mode!r}. Valid choices: {', '.join(DOCUMENT_MODE_CHOICES)}."
        )
    if args.window_keeping not in WINDOW_KEEPING:
        raise UsageError(
            f"Unknown window_keeping {args.window_keeping!r}. Valid choices: {', '.join(WINDOW_KEEPING)}."
        )
    for name in ("max_windows_per_document", "max_windows_per_batch", "eval_max_windows"):
        number = getattr(args, name)
        if name == "max_windows_per_document" and number == 0 and not isinstance(number, bool):
            continue  # no cap (resolved_document_arguments)
        if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 1):
            raise UsageError(f"{name} must be a whole number >= 1 (or unset), got {number!r}.")


def resolved_document_arguments(args) -> dict[str, Any]:
    """The document arguments as the run reads them, for the plan's copy of the training arguments (the parsed ones
    are not written into): a config file's unquoted ``document_mode: true`` as the word, and
    ``max_windows_per_document: 0`` as no cap (None)."""
    return {
        "document_mode": _document_mode_word(args.document_mode),
        "max_windows_per_document": args.max_windows_per_document or None,
    }


def _document_mode_word(mode):
    """``--document_mode`` as a word: a YAML file says true/false without quotes."""
    if isinstance(mode, bool):
        return "true" if mode else "false"
    return mode
