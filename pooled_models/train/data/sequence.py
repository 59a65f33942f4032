"""Sequence-classification data: a task's splits read (files.py) and checked (text columns, labels across splits,
labels.py), their targets attached, and tokenizing."""

from __future__ import annotations

import logging

from datasets import List, Value

from ...errors import DataError, UsageError, where
from ...modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from ..arguments.defaults import DEFAULT_KEPT_COLUMN
from .batching import tokenized
from .files import Split, limit_rows, load_splits
from .labels import Labels, describe_feature

__all__ = [
    "Split",
    "Labels",
    "check_texts",
    "attach_labels",
    "prepare_splits",
    "text_columns",
    "kept_columns",
    "tokenize",
    "report_truncated",
]

logger = logging.getLogger(__name__)


def check_texts(split: Split, column: str) -> None:
    """Every row of ``column`` holds non-empty text."""
    feature = split.dataset.features[column]
    if not (isinstance(feature, Value) and feature.dtype in ("string", "large_string")):
        raise DataError(_not_text(split.source, column, feature, split.dataset[column]))
    for row, text in enumerate(split.dataset[column]):
        if text is None:
            raise DataError(f"{where(split.source, column, row)}: the text is missing (null).")
        if not text.strip():
            raise DataError(f"{where(split.source, column, row)}: the text is empty.")


def _not_text(source: str, column: str, feature, texts) -> str:
    # A jsonl column mixing text with numbers or lists (typed Json) is named by its first row that is not text.
    if any(isinstance(text, str) for text in texts):
        for row, text in enumerate(texts):
            if text is not None and not isinstance(text, str):
                return f"{where(source, column, row)} holds {text!r}, not text."
    return f"{where(source, column)} holds {describe_feature(feature)} values, not text."


def attach_labels(split: Split, labels: Labels, column: str, skip_unseen: bool) -> None:
    """Set the model's targets of the split, leaving out rows with unseen labels if asked.

    The targets are kept beside the rows rather than in them, so a label column that is itself called ``labels``
    (GoEmotions') neither collides with the targets nor loses the names that predictions.jsonl reports."""
    dataset = split.dataset
    values = list(dataset[column])
    feature = dataset.features[column]
    targets, kept = labels.encode(values, feature, split.source, column, skip_unseen=skip_unseen)
    if len(kept) < len(values):
        logger.warning(
            "%s: left out %d of %d rows whose label does not occur in training (--skip_unseen_labels).",
            split.source,
            len(values) - len(kept),
            len(values),
        )
        if not kept:
            raise DataError(
                f"{where(split.source, column)}: no row is left once the labels unseen in training are skipped."
            )
        dataset = dataset.select(kept)
    split.dataset = dataset
    split.targets = targets
    split.target_feature = {
        SINGLE_LABEL: Value("int64"),
        MULTI_LABEL: List(Value("float32")),
        REGRESSION: Value("float32"),
    }[labels.problem_type]


def prepare_splits(
    data_args, roles: list[str], saved_labels: Labels | None = None, cache_dir: str | None = None
) -> tuple[dict[str, Split], Labels]:
    """The ``roles`` splits, checked and labelled, and the label space: from the training split, or ``saved_labels``
    (a trained model's) when not training. A test split without labels is kept for prediction.

    Writes nothing but ``datasets``' own cache (``~/.cache/huggingface/datasets``, or ``cache_dir``), where
    ``load_dataset`` converts each file to Arrow before any check can refuse it."""
    splits = load_splits(data_args, roles, cache_dir)
    limit_rows(splits, data_args)
    for split in splits.values():
        _check_columns_and_texts(split, data_args)
    labels = _label_space(splits, data_args, saved_labels)
    for split in splits.values():
        if split.labelled:
            attach_labels(split, labels, data_args.label_column, data_args.skip_unseen_labels)
    return splits, labels


def kept_columns(data_args, columns: list[str]) -> list[str]:
    """The test file's columns predictions.jsonl carries (``keep_columns``, else ``id`` where the file has one); one
    that names what predictions.jsonl writes itself is refused."""
    if data_args.keep_columns is None:
        return [DEFAULT_KEPT_COLUMN] if DEFAULT_KEPT_COLUMN in columns else []
    written = [*text_columns(data_args), "label", "prediction", "scores"]
    clashing = [column for column in data_args.keep_columns if column in written]
    if clashing:
        raise UsageError(
            f"keep_columns names {clashing[0]!r}, which predictions.jsonl writes itself (its keys: "
            f"{', '.join(written)}); name the other columns to carry."
        )
    return list(dict.fromkeys(data_args.keep_columns))


def text_columns(data_args) -> list[str]:
    return [data_args.text_column] + ([data_args.text_pair_column] if data_args.text_pair_column else [])


def _check_columns_and_texts(split: Split, data_args) -> None:
    # A test split may come without labels: it is then only predicted.
    split.labelled = split.name != "test" or data_args.label_column in split.dataset.column_names
    split.require_columns(text_columns(data_args) + ([data_args.label_column] if split.labelled else []))
    if split.name == "test":
        split.require_columns(kept_columns(data_args, split.dataset.column_names))
    for column in text_columns(data_args):
        check_texts(split, column)


def _label_space(splits: dict[str, Split], data_args, saved_labels: Labels | None) -> Labels:
    column = data_args.label_column
    if "train" in splits:
        train = splits["train"]
        labels = Labels.from_training(
            train.dataset[column],
            train.dataset.features[column],
            train.source,
            column,
            problem_type=data_args.problem_type,
            separator=data_args.label_separator,
        )
        if saved_labels is not None and not saved_labels.matches(labels):
            raise DataError(
                f"The model was trained for {saved_labels.problem_type} with labels {saved_labels.names}; "
                f"{train.source} gives {labels.problem_type} with labels {labels.names}. Start from the backbone to "
                "train on new labels."
            )
    elif saved_labels is not None:
        labels = saved_labels
        labels.separator = data_args.label_separator
    else:
        raise DataError(
            "Without do_train, model_name_or_path must be a model trained by train.py (its labels come from its "
            "config), not a plain backbone."
        )
    test = splits.get("test")
    if (
        test is not None
        and test.labelled
        and labels.is_unlabelled(test.dataset[column], test.dataset.features[column])
    ):
        test.labelled = False  # labels withheld (all empty, or -1 in a ClassLabel column)
    return labels


def tokenize(split: Split, tokenizer, text_column: str, pair_column: str | None, max_length: int) -> None:
    """Set ``split.encoded``; texts longer than ``max_length`` tokens are truncated and counted in ``split.truncated``."""

    def encode(batch):
        texts = batch[text_column]
        pairs = batch[pair_column] if pair_column else None
        # A first pass without truncation finds the long rows; only they are encoded again, truncated.
        full = tokenizer(texts, pairs, truncation=False, verbose=False)
        long_rows = [row for row, ids in enumerate(full["input_ids"]) if len(ids) > max_length]
        if long_rows:
            cut = tokenizer(
                [texts[row] for row in long_rows],
                [pairs[row] for row in long_rows] if pairs else None,
                truncation=True,
                max_length=max_length,
            )
            for key in full:
                for position, row in enumerate(long_rows):
                    full[key][row] = cut[key][position]
        long_set = set(long_rows)
        full["truncated"] = [row in long_set for row in range(len(texts))]
        return full

    encoded = tokenized(split.dataset, encode, tokenizer, f"Tokenizing {split.name}")
    split.truncated = sum(encoded["truncated"])
    encoded = encoded.remove_columns("truncated")
    if split.targets is not None:  # "labels" is the column Trainer hands to the model's loss
        encoded = encoded.add_column("labels", split.targets, feature=split.target_feature)
    split.encoded = encoded
    report_truncated(split.source, split.truncated, len(encoded), max_length)


def report_truncated(source: str, truncated: int, rows: int, max_length: int) -> None:
    """The warning every file of a run gets when some of its rows were cut at the run's length."""
    if truncated:
        logger.warning(
            "%s: %d of %d rows are longer than %d tokens and were truncated.",
            source,
            truncated,
            rows,
            max_length,
        )
