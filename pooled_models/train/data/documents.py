"""Document mode in train.py (docs/long-documents.md): whether the run reads whole documents in windows, and its
splits tokenized into windows.

``--document_mode true`` (or a document setting such as ``--document_window``) turns it on, ``false`` (the default)
leaves it off; a model saved in document mode stays in it. The run's window is ``--document_window``, else the run's
one text length (``train/model.py``'s ``choose_max_length``, the length the same run without document mode cuts
at), so a text that fits in one window is read as the cut model reads it.

Each row of a tokenized split is a document: ``input_ids`` (and ``token_type_ids``) ``[window][token]``, the windows
of modeling/documents.py's ``tokenize_documents``. A training document keeps at most ``--max_windows_per_document``
windows (``--window_keeping`` says which), an evaluated or predicted one ``--eval_max_windows`` (unset: every
window). Batches are cut by windows, not documents (trainer.py): their sizes come from a row's number of windows
(batching.py's ``token_lengths``: the length of its ``input_ids``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import DataError, UsageError, where
from ...modeling.configuration_multitask import SEQUENCE
from ...modeling.document_settings import DOCUMENT_FIELDS, default_stride
from ...modeling.documents import tokenize_documents
from ..arguments.documents import DOCUMENT_MODE_DEFAULT
from .batching import token_lengths, tokenized

if TYPE_CHECKING:  # annotations only
    from . import TaskData
    from .files import Split

__all__ = [
    "DocumentMode",
    "choose_document_mode",
    "tokenize_windows",
    "DocumentReading",
    "read_documents",
    "refuse_off_settings",
    "tokenize_document_task",
]

logger = logging.getLogger("pooled_models.train")


@dataclass(frozen=True)
class DocumentMode:
    """The run's decision: on or off, why, and (on) the window settings the model is built with."""

    on: bool
    reason: str  # the log's and the card's words
    window: int | None = None
    stride: int | None = None

    def model_settings(self) -> dict[str, Any]:
        """The settings a new model is built with in document mode (the user's pooling settings are the task's)."""
        return {"document_window": self.window, "document_stride": self.stride} if self.on else {}


def choose_document_mode(
    args, settings: dict[str, Any], saved, tasks, run_length: Callable[[], int]
) -> DocumentMode:
    """Document mode on or off for this run (``args``: the training arguments; ``settings``: the model settings the
    user chose; ``saved``: the config of the model the run starts from, or None; ``run_length``: the run's text
    length, asked for only when the window is not given)."""
    given_mode = args.document_mode  # None: train.py's default, DOCUMENT_MODE_DEFAULT
    if saved is not None:
        return _saved_document_mode(saved, given_mode)
    given = [name for name in DOCUMENT_FIELDS if settings.get(name) is not None]  # PooledConfig's, by flags
    if given_mode == "false" and given:
        raise UsageError(
            f"--document_mode false, but --{given[0]} is a setting of document mode: leave it out, or set "
            "--document_mode true."
        )
    mode = given_mode or ("true" if given else DOCUMENT_MODE_DEFAULT)  # a window given asks for document mode
    if mode == "false":
        why = "--document_mode false" if given_mode else "train.py's default; --document_mode true reads them"
        return DocumentMode(False, f"off ({why})")
    refusal = _other_run(tasks)
    if refusal is not None:
        raise UsageError(
            f"--document_mode {mode}: {refusal}. Valid: one sequence-classification task of single texts; "
            "--document_mode false for this run."
        )
    window = settings.get("document_window") or run_length()
    stride = settings.get("document_stride")
    stride = default_stride(window) if stride is None else stride
    if given_mode == "true" or not given:
        why = "--document_mode true"
    else:
        why = f"--document_window {window}" if "document_window" in given else f"--{given[0]}"
    return DocumentMode(True, f"on ({why})", window, stride)


def _saved_document_mode(saved, given_mode: str | None) -> DocumentMode:
    """A run from a saved pooled model keeps its document mode (its settings cannot change); a contrary
    --document_mode is refused by name."""
    saved_window = saved.document_window if saved.reads_documents else None
    if given_mode == "false" and saved_window is not None:
        raise UsageError(
            f"--document_mode false: the model starts from a model saved in document mode (document_window="
            f"{saved_window}), whose settings cannot change. Start from its backbone to train without it."
        )
    if saved_window is None:
        if given_mode == "true":
            raise UsageError(
                "--document_mode true: the model starts from a trained model saved without document mode, whose "
                "settings cannot change. Start from its backbone (--document_mode true --document_window N)."
            )
        return DocumentMode(False, "off: the model was saved without document mode")
    return DocumentMode(True, "on: the model was saved in document mode", saved_window, saved.document_stride)


def _other_run(tasks) -> str | None:
    """Why document mode cannot read this run's texts (None: it can): it reads one sequence task's single texts."""
    kinds = [task.kind for task in tasks.values()]
    pairs = any(task.kind == SEQUENCE and task.spec.data.text_pair_column for task in tasks.values())
    refusal = None
    if len(kinds) > 1:
        refusal = "a multi-task model has no cross-window pooling: its heads read one window"
    elif kinds != [SEQUENCE]:
        refusal = "a token-classification head labels the tokens of each window, not a document"
    elif pairs:
        refusal = "a text pair (--text_pair_column) is not cut into windows"
    return refusal


def tokenize_windows(
    split: Split, tokenizer, text_column: str, window: int, stride: int, max_windows: int | None, keep: str
) -> None:
    """Set ``split.encoded``: every row a document's windows (at most ``max_windows``, chosen by ``keep``), and its
    target as ``labels``. A text of special tokens only has no window: refused, naming its row."""

    source = split.source  # the closure is hashed for the cache: the source's name, not the split
    special = set(tokenizer.all_special_ids)

    def encode(batch, indices):
        texts = batch[text_column]
        try:
            documents = tokenize_documents(tokenizer, texts, window, stride, max_windows, keep)
        except (
            ValueError
        ) as error:  # an empty text (named below), or a stride the window's text tokens cannot take
            for position, text in enumerate(texts):
                if set(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]) <= special:
                    raise _no_token(source, text_column, indices[position], text) from error
            raise UsageError(str(error)) from error
        for position, windows in enumerate(documents["input_ids"]):
            # "[CLS] [SEP]" typed as text tokenizes to the special tokens themselves: nothing to read either.
            if all(token in special for ids in windows for token in ids):
                raise _no_token(source, text_column, indices[position], texts[position])
        return documents

    encoded = tokenized(
        split.dataset, encode, tokenizer, f"Cutting {split.name} into windows", with_indices=True
    )
    if split.targets is not None:
        encoded = encoded.add_column("labels", split.targets, feature=split.target_feature)
    split.encoded = encoded


def _no_token(source: str, column: str, row: int, text: str) -> DataError:
    return DataError(
        f"{where(source, column, row)}: the text has no token besides the tokenizer's special tokens ({text[:40]!r}): "
        "document mode reads a document's windows, and it has none. Remove the row or give it text."
    )


def refuse_off_settings(documents: DocumentMode, args) -> None:
    """Refuse, by name, document settings a run without document mode would drop, and a token budget in it."""
    if documents.on:
        if args.max_tokens_per_batch is not None:
            raise UsageError(
                "--max_tokens_per_batch cuts batches by tokens; document mode cuts them by windows: use "
                "--max_windows_per_batch instead."
            )
        return
    for name in ("max_windows_per_batch", "eval_max_windows", "document_gate_learning_rate"):
        if getattr(args, name) is not None:
            raise UsageError(
                f"--{name} is a setting of document mode, which is {documents.reason}: leave it out, or set "
                "--document_mode true."
            )


def tokenize_document_task(task: TaskData, tokenizer, config, args) -> None:
    """Every split of a sequence task cut into its documents' windows (the model config's window and stride): a
    training document keeps at most --max_windows_per_document (--window_keeping), an evaluated or predicted one
    --eval_max_windows (its first ones; unset: every window)."""
    task.max_length = config.document_window
    for name, split in task.splits.items():
        training = name == "train"
        tokenize_windows(
            split,
            tokenizer,
            task.spec.data.text_column,
            config.document_window,
            config.document_stride,
            args.max_windows_per_document if training else args.eval_max_windows,
            args.window_keeping if training else "start",
        )
        task.encoded[name] = split.encoded


@dataclass(frozen=True)
class DocumentReading:
    """What a run reads of its documents, worked out once from the decision, the arguments and the training rows; the
    log's line and the model card's rows are both written from it (the window, stride and cross-window pooling are
    rows of the card's pooling table, card/classifier.py; the gate's rate is its option's row,
    options/document_gate.py)."""

    mode: DocumentMode
    said: bool  # whether an off decision is worth saying: --document_mode was given
    trains: bool  # --do_train
    training_windows: tuple[int, int, float] | None  # the training documents' fewest, most and mean windows
    cap: int | None  # --max_windows_per_document (None: every window)
    keeping: str  # --window_keeping
    window_budget: int | None  # a training batch's windows; None outside document mode
    eval_max_windows: int | None  # --eval_max_windows (None: every window)

    def lines(self, length_line: str) -> list[str]:
        """The log's lines: outside document mode the run's text length (and the decision, when asked about); in
        it, the windows and what the training documents became."""
        line = f"Document mode {self.mode.reason}"
        if not self.mode.on:
            return [length_line, line] if self.said else [length_line]
        line += f": windows of {self.mode.window} tokens, {self.mode.stride} shared by consecutive windows"
        if self.training_windows is not None:
            fewest, most, mean = self.training_windows
            kept = f", at most {self.cap}, keeping {self.keeping}" if self.cap else ", every window"
            line += (
                f"; training documents of {fewest} to {most} windows (mean {mean:.1f}{kept}), batches of at most "
                f"{self.window_budget} windows"
            )
        read = "every window" if self.eval_max_windows is None else f"at most {self.eval_max_windows} windows"
        return [line + f"; evaluation and prediction read {read} of a document"]

    def card_rows(self) -> dict[str, Any]:
        """The model card's "Training settings" rows: on or off and why (off: when asked about), and (on) how many
        windows training and evaluation read."""
        if not self.mode.on:
            return {"document mode": self.mode.reason} if self.said else {}
        rows: dict[str, Any] = {"document mode": self.mode.reason}
        if self.trains:
            rows["windows per training document"] = (
                f"at most {self.cap} ({self.keeping})" if self.cap else "all"
            )
            rows["windows per training batch"] = f"at most {self.window_budget}"
        read = "all" if self.eval_max_windows is None else f"the first {self.eval_max_windows}"
        rows["windows read in evaluation and prediction"] = read
        return rows


def read_documents(tasks, documents: DocumentMode, args) -> DocumentReading:
    """The run's :class:`DocumentReading` (``args``: the training arguments as the plan resolved them). The window
    budget: --max_windows_per_batch, else per_device_train_batch_size times the training documents' mean number of
    windows (after the cap), so a step holds about per_device_train_batch_size documents."""
    counts = None
    if documents.on:
        (task,) = tasks.values()
        rows = task.encoded.get("train")
        counts = token_lengths(rows) if rows is not None and len(rows) else None
    batch_size = args.per_device_train_batch_size
    budget = None
    if documents.on:
        budget = args.max_windows_per_batch
        if budget is None:
            budget = (
                batch_size
                if not counts
                else max(batch_size, math.ceil(batch_size * sum(counts) / len(counts)))
            )
    return DocumentReading(
        mode=documents,
        said=args.document_mode is not None,
        trains=args.do_train,
        training_windows=None if not counts else (min(counts), max(counts), sum(counts) / len(counts)),
        cap=args.max_windows_per_document,
        keeping=args.window_keeping,
        window_budget=budget,
        eval_max_windows=args.eval_max_windows,
    )
