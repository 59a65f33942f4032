"""Sequence-classification data: reading local files and Hub datasets with errors that name the file, column
and row; the label space (single-label, multi-label, regression) checked across splits; tokenizing."""

from __future__ import annotations

import csv
import json
import logging
import math
import reprlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import ClassLabel, Dataset, LargeList, List, Value

from ...errors import DataError, where
from ...modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from .batching import tokenizing_fingerprint

__all__ = [
    "FILE_FORMATS",
    "Split",
    "load_splits",
    "check_texts",
    "attach_labels",
    "prepare_splits",
    "text_columns",
    "tokenize",
    "Labels",
    "check_label_kinds",
    "detect_problem_type",
    "describe_feature",
]

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
        splits[name] = Split(name, f"{name} file {files[name]}", _read_file(Path(files[name]), cache_dir))
    return splits


def _read_file(path: Path, cache_dir: str | None) -> Dataset:
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
            train.dataset[column],
            train.dataset.features[column],
            train.source,
            column,
            problem_type=data_args.problem_type,
            separator=data_args.label_separator,
        )
        if saved_labels is not None and (labels.problem_type, labels.names) != (
            saved_labels.problem_type,
            saved_labels.names,
        ):
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

    encoded = split.dataset.map(
        encode,
        batched=True,
        remove_columns=split.dataset.column_names,
        desc=f"Tokenizing {split.name}",
        new_fingerprint=tokenizing_fingerprint(split.dataset, encode, tokenizer),
    )
    split.truncated = sum(encoded["truncated"])
    encoded = encoded.remove_columns("truncated")
    if split.targets is not None:  # "labels" is the column Trainer hands to the model's loss
        encoded = encoded.add_column("labels", split.targets, feature=split.target_feature)
    split.encoded = encoded
    if split.truncated:
        logger.warning(
            "%s: %d of %d rows are longer than %d tokens and were truncated.",
            split.source,
            split.truncated,
            len(encoded),
            max_length,
        )


MISSING = object()  # a null label, or -1 in a ClassLabel column (the datasets convention for "unknown")


SUPPORTED_LABELS = (
    "class names (text, integers or booleans), lists of class names (multi-label) or numbers (regression)"
)


KINDS = ((int, "an integer"), (float, "a float"), (str, "text"), ((list, tuple), "a list"), (dict, "a dict"))


def _kind(value) -> str | None:
    """What a label value is, in words; None for a missing label (null), which is no kind."""
    if value is None:
        return None
    if isinstance(value, bool):  # before int: True is an int to Python
        return "a boolean"
    for types, kind in KINDS:
        if isinstance(value, types):
            return kind
    return type(value).__name__


def _shown(value) -> str:
    return reprlib.repr(value)  # shortened, so a long list or text keeps the message on one line


def check_label_kinds(values: Sequence[Any], source: str, column: str) -> None:
    """Refuse a label column that does not hold one kind of label, naming the first row at fault.

    jsonl gives a column mixing lists and strings (or ints and strings) the ``Json`` type, whose values are plain
    Python objects; turning them into class names would make ``['account']`` a class and ``0`` the same class as
    ``"0"``. Dicts (jsonl objects, parquet structs) are never a label. Typed columns pass by construction."""
    first: tuple[int, str, Any] | None = None  # (row, kind, value) of the first labelled row
    first_item: tuple[int, str, Any] | None = None  # the same for the first item of a list
    for row, value in enumerate(values):
        kind = _kind(value)
        if kind is None:
            continue  # a missing label: reported (or allowed) by the problem type's own checks
        if kind == "a dict":
            raise DataError(
                f"{where(source, column, row)} holds a dict ({_shown(value)}); labels are {SUPPORTED_LABELS}. "
                "Put the field that holds the label in a column of its own and name it with --label_column."
            )
        if first is None:
            first = (row, kind, value)
        elif kind != first[1]:
            raise DataError(
                f"{where(source, column, row)} holds {kind} ({_shown(value)}), but row {first[0]} holds {first[1]} "
                f"({_shown(first[2])}). A label column holds one kind of label: {SUPPORTED_LABELS}."
            )
        if kind == "a list":
            first_item = _check_list_items(value, first_item, source, column, row)


def _check_list_items(items, first_item, source: str, column: str, row: int):
    """The items of one multi-label row: class names, of the kind the column's first item has. Returns that first item."""
    for item in items:
        kind = _kind(item)
        if kind is None:
            continue  # a null label in a list: reported by _names_of
        if kind not in ("text", "an integer", "a boolean"):
            raise DataError(
                f"{where(source, column, row)} lists {kind} ({_shown(item)}) among its labels; multi-label rows list "
                "class names: text, integers or booleans."
            )
        if first_item is None:
            first_item = (row, kind, item)
        elif kind != first_item[1]:
            raise DataError(
                f"{where(source, column, row)} lists {kind} ({_shown(item)}), but row {first_item[0]} lists "
                f"{first_item[1]} ({_shown(first_item[2])}). The labels of a column are class names of one kind: "
                "text, integers or booleans."
            )
    return first_item


def _item_feature(feature):
    return feature.feature if isinstance(feature, (List, LargeList)) else None


def detect_problem_type(feature, separator: str | None) -> str:
    """The problem type a label column's ``datasets`` feature implies."""
    if _item_feature(feature) is not None:
        return MULTI_LABEL
    if isinstance(feature, ClassLabel):
        return SINGLE_LABEL
    if isinstance(feature, Value) and feature.dtype.startswith("float"):
        return REGRESSION
    if separator is not None:
        return MULTI_LABEL
    return SINGLE_LABEL


def _name(value: Any, feature) -> Any:
    """A label value as its name: ClassLabel ids become their names, numbers their shortest text."""
    if value is None:
        return MISSING
    if isinstance(feature, ClassLabel):
        return MISSING if value < 0 else feature.int2str(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            return MISSING
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return value if value.strip() else MISSING
    return str(value)


@dataclass
class Labels:
    """The label space of a run and the conversion of a label column to the model's targets."""

    problem_type: str
    names: list[str]  # class names in id order; empty for regression
    feature: Any = None  # the label column's feature in training, to read ClassLabel ids in the other splits
    separator: str | None = None

    @property
    def num_labels(self) -> int:
        return 1 if self.problem_type == REGRESSION else len(self.names)

    @property
    def id2label(self) -> dict[int, str] | None:
        return dict(enumerate(self.names)) if self.names else None

    @property
    def label2id(self) -> dict[str, int]:
        return {name: index for index, name in enumerate(self.names)}

    # -------------------------------------------------------------------------------------------------
    # Building the label space
    # -------------------------------------------------------------------------------------------------

    @classmethod
    def from_training(
        cls,
        values: Sequence[Any],
        feature,
        source: str,
        column: str,
        problem_type: str = "auto",
        separator: str | None = None,
    ) -> Labels:
        """The label space of the training split's label column, checked: one kind of label, every row labelled,
        two classes or more. Warns (see the module's docstring) about whole-number floats taken for regression and
        about classes that mostly occur in a single row."""
        values = list(values)
        check_label_kinds(values, source, column)
        detected = problem_type == "auto"
        if detected:
            problem_type = detect_problem_type(feature, separator)
        labels = cls(problem_type=problem_type, names=[], feature=feature, separator=separator)
        if problem_type == MULTI_LABEL and _item_feature(feature) is None and separator is None:
            raise DataError(
                f"{where(source, column)} holds one {describe_feature(feature)} per row; multi-label classification needs a "
                "list of labels per row (json/jsonl/parquet) or a label_separator to split strings (e.g. '|')."
            )
        if problem_type == REGRESSION:
            targets = [
                labels._regression_target(value, source, column, row) for row, value in enumerate(values)
            ]
            if detected:
                _warn_if_whole_numbers(targets, source, column)
            return labels
        rows_per_class: Counter[str] = Counter()
        for row, value in enumerate(values):
            rows_per_class.update(set(labels._names_of(value, source, column, row)))
        item_feature = _item_feature(feature) or feature
        if isinstance(item_feature, ClassLabel):
            labels.names = list(item_feature.names)  # the dataset's own id order
        else:
            labels.names = sorted(rows_per_class, key=_numeric_first)
        if len(rows_per_class) < 2:
            found = f"only {next(iter(rows_per_class))!r}" if rows_per_class else "no label at all"
            raise DataError(
                f"{where(source, column)}: the training split has {found}; a classifier needs at least two classes. "
                "For a numeric target use --problem_type regression."
            )
        _warn_if_classes_are_single_rows(rows_per_class, source, column)
        return labels

    @classmethod
    def from_config(cls, config) -> Labels:
        """The label space a trained model was saved with."""
        names = (
            []
            if config.problem_type == REGRESSION
            else [config.id2label[i] for i in range(config.num_labels)]
        )
        return cls(problem_type=config.problem_type, names=names)

    # -------------------------------------------------------------------------------------------------
    # Converting a split's labels to targets
    # -------------------------------------------------------------------------------------------------

    def encode(
        self, values: Sequence[Any], feature, source: str, column: str, skip_unseen: bool = False
    ) -> tuple[list[Any], list[int]]:
        """``(targets, kept_rows)``: the model's target for every row (rows with unseen labels left out when
        ``skip_unseen``, else they raise a ``DataError``)."""
        values = list(values)
        check_label_kinds(values, source, column)
        self._check_compatible(feature, source, column)
        targets, kept = [], []
        label2id = self.label2id
        for row, value in enumerate(values):
            if self.problem_type == REGRESSION:
                targets.append(self._regression_target(value, source, column, row, feature))
                kept.append(row)
                continue
            names = self._names_of(value, source, column, row, feature)
            unseen = [name for name in names if name not in label2id]
            if unseen:
                if skip_unseen:
                    continue
                raise DataError(
                    f"{where(source, column, row)}: label {unseen[0]!r} does not occur in the training data, so the "
                    f"model cannot predict it. Training labels: {', '.join(map(repr, self.names))}. Pass "
                    "--skip_unseen_labels to leave such rows out of evaluation."
                )
            if self.problem_type == SINGLE_LABEL:
                targets.append(label2id[names[0]])
            else:
                hot = [0.0] * len(self.names)
                for name in names:
                    hot[label2id[name]] = 1.0
                targets.append(hot)
            kept.append(row)
        return targets, kept

    def is_unlabelled(self, values: Sequence[Any], feature) -> bool:
        """True when no row has a label (a test split whose labels are withheld, e.g. -1 everywhere)."""
        return all(_name(value, feature) is MISSING for value in values)

    def _check_compatible(self, feature, source: str, column: str) -> None:
        if self.problem_type == REGRESSION and not (
            isinstance(feature, Value) and feature.dtype.startswith(("float", "int"))
        ):
            raise DataError(
                f"{where(source, column)} holds {describe_feature(feature)} values, but the training labels are numbers "
                "(regression)."
            )

    def _names_of(self, value, source: str, column: str, row: int, feature=MISSING) -> list[str]:
        feature = self.feature if feature is MISSING else feature
        item_feature = _item_feature(feature)
        if self.problem_type == SINGLE_LABEL:
            if item_feature is not None or isinstance(value, (list, tuple)):  # never a class named "['a']"
                raise DataError(
                    f"{where(source, column, row)} holds a list, but the labels are single-label classes."
                )
            name = _name(value, feature)
            if name is MISSING:
                raise DataError(f"{where(source, column, row)}: the label is missing (empty, null or NaN).")
            return _on_one_line([name], source, column, row)
        if value is None:
            raise DataError(
                f"{where(source, column, row)}: the label is missing (null); give an empty list for none."
            )
        if item_feature is None:
            if not isinstance(value, str) or self.separator is None:
                raise DataError(
                    f"{where(source, column, row)} holds {value!r}; multi-label rows need a list of labels "
                    "(or a string split by label_separator)."
                )
            items = [item.strip() for item in value.split(self.separator) if item.strip()]
        else:
            items = value
        names = [_name(item, item_feature) for item in items]
        if any(name is MISSING for name in names):
            raise DataError(
                f"{where(source, column, row)}: the list of labels {value!r} holds an empty or null label."
            )
        return _on_one_line(names, source, column, row)

    def _regression_target(self, value, source: str, column: str, row: int, feature=None) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if value is None:
                raise DataError(
                    f"{where(source, column, row)}: the regression target is missing (empty or null)."
                )
            raise DataError(f"{where(source, column, row)}: the regression target {value!r} is not a number.")
        if not math.isfinite(value):
            raise DataError(
                f"{where(source, column, row)}: the regression target is {value}; targets must be finite numbers."
            )
        return float(value)


def _on_one_line(names: list[str], source: str, column: str, row: int) -> list[str]:
    """Refuse label names holding a line break, rather than train on them.

    In a csv such a label is nearly always a quote left open, which swallows the rows that follow into one field, so
    it is mangled data to stop on. A real class name never needs one, and refusing it here also keeps the names
    safe on the lines they are shown on: log lines, predictions read line by line, the model card's tables."""
    for name in names:
        if name.splitlines() != [name]:  # any line break: \n, \r, and Unicode's others
            raise DataError(
                f"{where(source, column, row)}: the label {_shown(name)} holds a line break; a label is a name on "
                "one line. In a csv file this usually means a quote left open, which swallows the rows after it."
            )
    return names


def _warn_if_whole_numbers(targets: list[float], source: str, column: str) -> None:
    # Class ids written as 1.0, 2.0 (by pandas, or a float column with a gap) look like a regression target; the type
    # decides, as documented, but the user hears about it.
    if all(target.is_integer() for target in targets):
        distinct = sorted(set(targets))
        shown = ", ".join(map(str, distinct[:5])) + (", ..." if len(distinct) > 5 else "")
        logger.warning(
            "%s: every label is a whole number stored as a float (%s), so the model is trained for regression. If "
            "the labels are classes, pass --problem_type single_label_classification.",
            where(source, column),
            shown,
        )


def _warn_if_classes_are_single_rows(rows_per_class: Counter[str], source: str, column: str) -> None:
    # The rule: more than half the classes seen in training occur in a single training row. A class seen once can
    # hardly be learned, and a label space like that (5000 classes, one row each) is most often the wrong column.
    single = sum(1 for count in rows_per_class.values() if count == 1)
    if 2 * single > len(rows_per_class):
        logger.warning(
            "%s: %d of %d classes occur in a single training row; a class seen once can hardly be learned. Check "
            "that this is the label column (--label_column), or gather more rows per class.",
            where(source, column),
            single,
            len(rows_per_class),
        )


def _numeric_first(name: str):
    # Integer labels ("2", "10") sort as numbers, so class ids keep their order; other names sort as text.
    try:
        return (0, int(name), "")
    except ValueError:
        return (1, 0, name)


def describe_feature(feature) -> str:
    """A column's ``datasets`` feature in a word, for messages: its dtype (``string``, ``float64``) or its kind."""
    if isinstance(feature, Value):
        return feature.dtype
    return type(feature).__name__
