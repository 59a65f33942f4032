"""Reading a task's splits: local files (csv, tsv, json, jsonl, parquet) and Hub datasets, with errors that name the
file, line, column and row, before ``datasets`` reads them (encodings, empty files, duplicate columns, JSON syntax,
a header split by the wrong separator); the row limits."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset

from ...errors import DataError

__all__ = ["FILE_FORMATS", "Split", "load_splits", "read_file", "limit_rows"]


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
                + _separator_hint(self.dataset.column_names, missing[0])
            )


# separator, its name, what to do when a file's header looks split by it instead of the one its suffix says
SEPARATORS = (
    ("\t", "tab", "name the file .tsv."),
    (";", "semicolon", "save it comma-separated as .csv or tab-separated as .tsv."),
    (",", "comma", "name the file .csv."),
)


def _separator_hint(columns: list[str], wanted: str | None = None) -> str:
    """A hint for a file read with the wrong separator, or "": a tab-separated file named .csv has one column,
    'text\tlabel'. A column name qualifies when it holds a separator and, if given, ``wanted`` between two."""
    for name in columns:
        for separator, kind, advice in SEPARATORS:
            parts = [part.strip() for part in name.split(separator)]
            if len(parts) > 1 and (wanted is None or wanted in parts):
                return f" The column {name!r} looks like a {kind}-separated header: {advice}"
    return ""


def load_splits(data_args, wanted: list[str], cache_dir: str | None = None) -> dict[str, Split]:
    """The splits named in ``wanted`` (train / validation / test), from local files or a Hub dataset."""
    if data_args.dataset_name:
        return _load_hub_splits(data_args, wanted, cache_dir)
    files = data_args.files()
    splits = {}
    for name in wanted:
        if not files[name]:
            raise DataError(f"No {name} data: set {name}_file (or dataset_name for a Hub dataset).")
        splits[name] = Split(name, f"{name} file {files[name]}", read_file(Path(files[name]), cache_dir))
    return splits


def read_file(path: Path, cache_dir: str | None) -> Dataset:
    from datasets import load_dataset

    if path.suffix.lower() not in FILE_FORMATS:
        raise DataError(
            f"Cannot read {path}: unknown file type {path.suffix!r}. Valid types: {', '.join(FILE_FORMATS)}."
        )
    if not path.is_file():
        raise DataError(f"Cannot read {path}: no such file.")
    builder, options = FILE_FORMATS[path.suffix.lower()]
    if builder != "parquet":
        _check_text_file(path, builder, options)
    try:
        dataset = load_dataset(
            builder, data_files={"data": str(path)}, split="data", cache_dir=cache_dir, **options
        )
    except Exception as error:  # the builders raise many types; all mean the same thing to the user
        raise _read_error(path, builder, options, error) from error
    if len(dataset) == 0:
        raise DataError(f"{path} holds no rows.")
    return dataset


def _check_text_file(path: Path, builder: str, options: dict[str, Any]) -> None:
    """What datasets would report badly, or not at all, about a csv/tsv/json/jsonl file, checked before it reads it."""
    _check_utf8(path)
    if not _has_rows(path, header=builder == "csv"):
        raise DataError(f"{path} holds no rows.")  # datasets and pandas give three different errors for this
    if builder == "csv":
        _check_unique_columns(path, options.get("sep", ","))


def _check_utf8(path: Path) -> None:
    # Arrow's csv reader reports only "Invalid UTF8 sequence", and its json reader accepts such a file and fails
    # later, when the text is read. Decoding line by line is exact: b"\n" never occurs inside a UTF-8 sequence.
    utf8_copy = path.with_name(f"{path.stem}.utf8{path.suffix}")
    with open(path, "rb") as handle:
        if handle.read(2) in (b"\xff\xfe", b"\xfe\xff"):
            raise DataError(
                f"Cannot read {path}: it is UTF-16 text, not UTF-8. Re-encode it as UTF-8, e.g. "
                f"iconv -f utf-16 -t utf-8 {path} > {utf8_copy}"
            )
        handle.seek(0)
        for number, line in enumerate(handle, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DataError(
                    f"Cannot read {path}: it is not UTF-8 text (line {number} holds the byte 0x{line[error.start]:02x}). "
                    f"Re-encode it, e.g. iconv -f latin1 -t utf-8 {path} > {utf8_copy} for a Latin-1 file."
                ) from None


def _has_rows(path: Path, header: bool) -> bool:
    """Whether the file has a non-blank line (after the header line, if it has one)."""
    with open(path, "rb") as handle:
        lines = (line for line in handle if line.strip())
        if header:
            next(lines, None)
        return next(lines, None) is not None


def _header(path: Path, separator: str) -> list[str]:
    # utf-8-sig: a byte-order mark is no part of the first name
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return next(csv.reader(handle, delimiter=separator), [])


def _check_unique_columns(path: Path, separator: str) -> None:
    # pandas renames a second "text" column "text.1", so the first one is read and the second silently ignored.
    seen: set[str] = set()
    header = _header(path, separator)
    for name in header:
        if name and name in seen:  # pandas names empty ones "Unnamed: 0", "Unnamed: 1": nothing is lost
            raise DataError(
                f"Cannot read {path}: its header names the column {name!r} twice ({', '.join(header)}); give each "
                "column its own name."
            )
        seen.add(name)


def _read_error(path: Path, builder: str, options: dict[str, Any], error: Exception) -> DataError:
    """The DataError for a file datasets could not read: the JSON line at fault, or datasets' own reason."""
    if builder == "json":
        problem = _json_problem(path)
        if problem is not None:
            return problem
    message = f"Cannot read {path} as {path.suffix.lstrip('.')}: {_root_cause(error)}"
    if builder == "csv":
        header = _header(path, options.get("sep", ","))
        message += _separator_hint(header) if len(header) == 1 else ""
    return DataError(message)


def _json_problem(path: Path) -> DataError | None:
    """What is wrong with a JSON (one list of rows) or JSON Lines (one row a line) file, or None if its syntax is fine.

    pandas and Arrow report a position in the file ("Trailing data at position 104"); the json module finds the line."""
    text = path.read_text(encoding="utf-8")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        if text.lstrip().startswith("["):  # one document: its error's line is the one at fault
            return DataError(
                f"Cannot read {path}: it is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})."
            )
    else:
        if document == []:
            return DataError(f"{path} holds no rows.")
        return None
    return _json_lines_problem(path, text)


def _json_lines_problem(path: Path, text: str) -> DataError | None:
    for number, line in enumerate(text.split("\n"), 1):  # not splitlines(): JSON strings may hold U+2028
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            return DataError(
                f"Cannot read {path}: line {number} is not valid JSON ({error.msg} at column {error.colno})."
            )
        if not isinstance(row, dict):
            return DataError(
                f"Cannot read {path}: line {number} is not a JSON object; each line of a JSON Lines file holds one "
                'row, {"column": value, ...}.'
            )
    return None


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
    split_names = {
        "train": data_args.train_split_name,
        "validation": data_args.validation_split_name,
        "test": data_args.test_split_name,
    }
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


def limit_rows(splits: dict[str, Split], data_args) -> None:
    """Keep the first ``max_train_samples`` / ``max_eval_samples`` / ``max_predict_samples`` rows of each split."""
    limits = {
        "train": data_args.max_train_samples,
        "validation": data_args.max_eval_samples,
        "test": data_args.max_predict_samples,
    }
    for role, split in splits.items():
        if limits[role] is not None and limits[role] < len(split.dataset):
            split.dataset = split.dataset.select(range(limits[role]))
