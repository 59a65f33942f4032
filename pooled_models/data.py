"""Data for train.py: read the splits, check them, attach the labels and tokenize.

Every check runs before a model is built or a folder is written, and every error names the file (or Hub
split), the column and the row (rows count from 0, header excluded, as ``datasets`` and pandas count them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset, List, Value

from .labels import DataError, Labels, where

__all__ = ["FILE_FORMATS", "Split", "load_splits", "check_texts", "attach_labels", "prepare_splits", "text_columns", "tokenize"]

logger = logging.getLogger(__name__)

# file suffix -> (datasets builder, its options)
FILE_FORMATS: dict[str, tuple[str, dict[str, Any]]] = {
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"sep": "\t"}),
    ".json": ("json", {}),
    ".jsonl": ("json", {}),
    ".parquet": ("parquet", {}),
}


@dataclass
class Split:
    """One split of the data and where it came from (for error messages and the model card)."""

    name: str  # train / validation / test
    source: str  # e.g. "train file data/train.csv" or "dataset 'imdb', split 'test'"
    dataset: Dataset  # the rows as read (attach_labels may leave some out); the label column keeps its values
    encoded: Dataset | None = None  # the model's inputs and its "labels" (the targets), set by tokenize
    targets: list[Any] | None = None  # the model's target of every row, set by attach_labels
    target_feature: Any = None
    labelled: bool = True
    truncated: int = 0

    def require_columns(self, columns: list[str]) -> None:
        missing = [column for column in columns if column not in self.dataset.column_names]
        if missing:
            raise DataError(
                f"{self.source} has no column {missing[0]!r}. Its columns are: {', '.join(self.dataset.column_names)}."
            )


# ----------------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------------


def load_splits(data_args, wanted: list[str], cache_dir: str | None = None) -> dict[str, Split]:
    """The splits named in ``wanted`` (train / validation / test), from local files or a Hub dataset."""
    if data_args.dataset_name:
        return _load_hub_splits(data_args, wanted, cache_dir)
    files = {"train": data_args.train_file, "validation": data_args.validation_file, "test": data_args.test_file}
    splits = {}
    for name in wanted:
        if not files[name]:
            raise DataError(f"No {name} data: set {name}_file (or dataset_name for a Hub dataset).")
        splits[name] = Split(name, f"{name} file {files[name]}", _read_file(Path(files[name]), cache_dir))
    return splits


def _read_file(path: Path, cache_dir: str | None) -> Dataset:
    from datasets import load_dataset

    if path.suffix.lower() not in FILE_FORMATS:
        raise DataError(f"Cannot read {path}: unknown file type {path.suffix!r}. Valid types: {', '.join(FILE_FORMATS)}.")
    if not path.is_file():
        raise DataError(f"Cannot read {path}: no such file.")
    builder, options = FILE_FORMATS[path.suffix.lower()]
    try:
        dataset = load_dataset(builder, data_files={"data": str(path)}, split="data", cache_dir=cache_dir, **options)
    except Exception as error:  # the builders raise many types; all mean the same thing to the user
        raise DataError(f"Cannot read {path} as {path.suffix.lstrip('.')}: {_root_cause(error)}") from error
    if len(dataset) == 0:
        raise DataError(f"{path} holds no rows.")
    return dataset


def _root_cause(error: BaseException) -> str:
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__
    return f"{type(error).__name__}: {error}"


def _load_hub_splits(data_args, wanted: list[str], cache_dir: str | None) -> dict[str, Split]:
    from datasets import load_dataset

    name = data_args.dataset_name
    label = repr(name) + (f" ({data_args.dataset_config_name})" if data_args.dataset_config_name else "")
    try:
        dataset = load_dataset(name, data_args.dataset_config_name, cache_dir=cache_dir)
    except Exception as error:
        raise DataError(f"Cannot load the dataset {label}: {_root_cause(error)}") from error
    split_names = {"train": data_args.train_split_name, "validation": data_args.validation_split_name,
                   "test": data_args.test_split_name}
    splits = {}
    for role in wanted:
        split_name = split_names[role]
        if split_name not in dataset:
            raise DataError(
                f"The dataset {label} has no split {split_name!r} (for {role}); its splits are: "
                f"{', '.join(dataset)}. Choose one with --{role}_split_name."
            )
        splits[role] = Split(role, f"dataset {label}, split {split_name!r}", dataset[split_name])
    return splits


# ----------------------------------------------------------------------------------------------------
# Checking texts and attaching labels
# ----------------------------------------------------------------------------------------------------


def check_texts(split: Split, column: str) -> None:
    """Every row of ``column`` holds non-empty text."""
    feature = split.dataset.features[column]
    if not (isinstance(feature, Value) and feature.dtype in ("string", "large_string")):
        raise DataError(f"{where(split.source, column)} holds {_describe(feature)} values, not text.")
    for row, text in enumerate(split.dataset[column]):
        if text is None:
            raise DataError(f"{where(split.source, column, row)}: the text is missing (null).")
        if not text.strip():
            raise DataError(f"{where(split.source, column, row)}: the text is empty.")


def _describe(feature) -> str:
    return feature.dtype if isinstance(feature, Value) else type(feature).__name__


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
            split.source, len(values) - len(kept), len(values),
        )
        if not kept:
            raise DataError(f"{where(split.source, column)}: no row is left once the labels unseen in training are skipped.")
        dataset = dataset.select(kept)
    split.dataset = dataset
    split.targets = targets
    split.target_feature = {
        "single_label_classification": Value("int64"),
        "multi_label_classification": List(Value("float32")),
        "regression": Value("float32"),
    }[labels.problem_type]


# ----------------------------------------------------------------------------------------------------
# All of it: the splits a run needs, checked, with their targets
# ----------------------------------------------------------------------------------------------------


def prepare_splits(
    data_args, roles: list[str], saved_labels: Labels | None = None, cache_dir: str | None = None
) -> tuple[dict[str, Split], Labels]:
    """The ``roles`` splits, checked and labelled, and the label space: from the training split, or ``saved_labels``
    (a trained model's) when not training. A test split without labels is kept for prediction."""
    splits = load_splits(data_args, roles, cache_dir)
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples,
              "test": data_args.max_predict_samples}
    for role, split in splits.items():
        if limits[role] is not None and limits[role] < len(split.dataset):
            split.dataset = split.dataset.select(range(limits[role]))
        _check_columns_and_texts(split, data_args)
    labels = _label_space(splits, data_args, saved_labels)
    for split in splits.values():
        if split.labelled:
            attach_labels(split, labels, data_args.label_column, data_args.skip_unseen_labels)
    return splits, labels


def text_columns(data_args) -> list[str]:
    return [data_args.text_column] + ([data_args.text_pair_column] if data_args.text_pair_column else [])


def _check_columns_and_texts(split: Split, data_args) -> None:
    # A test split may come without labels: it is then only predicted.
    split.labelled = split.name != "test" or data_args.label_column in split.dataset.column_names
    split.require_columns(text_columns(data_args) + ([data_args.label_column] if split.labelled else []))
    for column in text_columns(data_args):
        check_texts(split, column)


def _label_space(splits: dict[str, Split], data_args, saved_labels: Labels | None) -> Labels:
    column = data_args.label_column
    if "train" in splits:
        train = splits["train"]
        labels = Labels.from_training(
            train.dataset[column], train.dataset.features[column], train.source, column,
            problem_type=data_args.problem_type, separator=data_args.label_separator,
        )
        if saved_labels is not None and (labels.problem_type, labels.names) != (saved_labels.problem_type, saved_labels.names):
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
    if test is not None and test.labelled and labels.is_unlabelled(test.dataset[column], test.dataset.features[column]):
        test.labelled = False  # labels withheld (all empty, or -1 in a ClassLabel column)
    return labels


# ----------------------------------------------------------------------------------------------------
# Tokenizing
# ----------------------------------------------------------------------------------------------------


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

    encoded = split.dataset.map(encode, batched=True, remove_columns=split.dataset.column_names,
                                desc=f"Tokenizing {split.name}")
    split.truncated = sum(encoded["truncated"])
    encoded = encoded.remove_columns("truncated")
    if split.targets is not None:  # "labels" is the column Trainer hands to the model's loss
        encoded = encoded.add_column("labels", split.targets, feature=split.target_feature)
    split.encoded = encoded
    if split.truncated:
        logger.warning(
            "%s: %d of %d rows are longer than %d tokens and were truncated.",
            split.source, split.truncated, len(encoded), max_length,
        )
