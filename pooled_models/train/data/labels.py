"""A task's label space (single-label, multi-label, regression): detected from the training split's label column,
checked (one kind of label, every row labelled, two classes or more, names on one line), and each split's labels
turned into the model's targets."""

from __future__ import annotations

import logging
import math
import reprlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from datasets import ClassLabel, LargeList, List, Value

from ...errors import DataError, where
from ...modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL

__all__ = ["Labels", "check_label_kinds", "detect_problem_type", "describe_feature", "label_name", "MISSING"]

logger = logging.getLogger(__name__)


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


def label_name(value: Any, feature) -> Any:
    """A label value as its name (``MISSING`` for none): ClassLabel ids become their names, numbers their shortest
    text."""
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
    # False when the saved model's config named no problem type and ``problem_type`` is the one implied (from_config)
    stated: bool = True

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
    def from_config(cls, config, problem_type: str = "auto") -> Labels:
        """The label space a trained model was saved with.

        A config that names no problem type (a model saved with ``save_pretrained`` rather than by train.py) is read
        as transformers' loss reads it: regression for one output, single-label classification for more; a
        ``problem_type`` other than ``auto`` (``--problem_type``) chooses instead, if the outputs fit it."""
        stated = config.problem_type is not None
        if stated:
            problem_type = config.problem_type
        elif problem_type == "auto":
            problem_type = REGRESSION if config.num_labels == 1 else SINGLE_LABEL
        elif (problem_type == REGRESSION) != (config.num_labels == 1):
            raise DataError(
                f"The model's config names no problem type and has {config.num_labels} output(s); --problem_type "
                f"{problem_type} needs {'one output' if problem_type == REGRESSION else 'two or more'}."
            )
        names = [] if problem_type == REGRESSION else [config.id2label[i] for i in range(config.num_labels)]
        return cls(problem_type=problem_type, names=names, stated=stated)

    def matches(self, other: Labels) -> bool:
        """The same label names, and the same problem type where this label space's was stated."""
        same_type = self.problem_type == other.problem_type or not self.stated
        return same_type and self.names == other.names

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
        return all(label_name(value, feature) is MISSING for value in values)

    def _check_compatible(self, feature, source: str, column: str) -> None:
        if self.problem_type == REGRESSION and not (
            isinstance(feature, Value) and feature.dtype.startswith(("float", "int"))
        ):
            raise DataError(
                f"{where(source, column)} holds {describe_feature(feature)} values, but the training labels are numbers "
                "(regression)."
            )

    def row_names(self, value, source: str, column: str, row: int) -> list[str]:
        """The label names one training row gives (one for single-label, its list for multi-label), in its order."""
        return self._names_of(value, source, column, row)

    def _names_of(self, value, source: str, column: str, row: int, feature=MISSING) -> list[str]:
        feature = self.feature if feature is MISSING else feature
        item_feature = _item_feature(feature)
        if self.problem_type == SINGLE_LABEL:
            if item_feature is not None or isinstance(value, (list, tuple)):  # never a class named "['a']"
                raise DataError(
                    f"{where(source, column, row)} holds a list, but the labels are single-label classes."
                )
            name = label_name(value, feature)
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
        names = [label_name(item, item_feature) for item in items]
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
