"""Labels for train.py: the problem type detected from the data, the label names, and the model's targets.

The label space comes from the training split (or, when only evaluating, from a trained model's config), so
``label2id`` is saved with the model and a validation or test label that training never saw is caught here
instead of becoming a wrong class id.

Problem types, from the label column's type (``problem_type`` overrides):

* strings, integers, booleans or a ``ClassLabel``: single-label classification, one class per row;
* lists (of names, integers or a ``ClassLabel``), or strings split by ``label_separator``: multi-label;
* floats: regression (one number per row).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from datasets import ClassLabel, LargeList, List, Value

from .arguments import UsageError

__all__ = ["DataError", "Labels", "detect_problem_type", "where"]

MISSING = object()  # a null label, or -1 in a ClassLabel column (the datasets convention for "unknown")


class DataError(UsageError):
    """Bad data: the message names the file (or Hub split), the column and the row."""


def where(source: str, column: str, row: int | None = None) -> str:
    location = f"{source}, column {column!r}"
    return location if row is None else f"{location}, row {row}"


def _item_feature(feature):
    return feature.feature if isinstance(feature, (List, LargeList)) else None


def detect_problem_type(feature, separator: str | None) -> str:
    """The problem type a label column's ``datasets`` feature implies."""
    if _item_feature(feature) is not None:
        return "multi_label_classification"
    if isinstance(feature, ClassLabel):
        return "single_label_classification"
    if isinstance(feature, Value) and feature.dtype.startswith("float"):
        return "regression"
    if separator is not None:
        return "multi_label_classification"
    return "single_label_classification"


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
        return 1 if self.problem_type == "regression" else len(self.names)

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
        cls, values: Sequence[Any], feature, source: str, column: str, problem_type: str = "auto",
        separator: str | None = None,
    ) -> Labels:
        """The label space of the training split's label column, checked: every row labelled, two classes or more."""
        if problem_type == "auto":
            problem_type = detect_problem_type(feature, separator)
        labels = cls(problem_type=problem_type, names=[], feature=feature, separator=separator)
        if problem_type == "multi_label_classification" and _item_feature(feature) is None and separator is None:
            raise DataError(
                f"{where(source, column)} holds one {_describe(feature)} per row; multi-label classification needs a "
                "list of labels per row (json/jsonl/parquet) or a label_separator to split strings (e.g. '|')."
            )
        if problem_type == "regression":
            for row, value in enumerate(values):
                labels._regression_target(value, source, column, row)
            return labels
        seen: set[str] = set()
        for row, value in enumerate(values):
            seen.update(labels._names_of(value, source, column, row))
        item_feature = _item_feature(feature) or feature
        if isinstance(item_feature, ClassLabel):
            labels.names = list(item_feature.names)  # the dataset's own id order
        else:
            labels.names = sorted(seen, key=_numeric_first)
        if len(seen) < 2:
            found = f"only {next(iter(seen))!r}" if seen else "no label at all"
            raise DataError(
                f"{where(source, column)}: the training split has {found}; a classifier needs at least two classes. "
                "For a numeric target use --problem_type regression."
            )
        return labels

    @classmethod
    def from_config(cls, config) -> Labels:
        """The label space a trained model was saved with."""
        names = [] if config.problem_type == "regression" else [config.id2label[i] for i in range(config.num_labels)]
        return cls(problem_type=config.problem_type, names=names)

    # -------------------------------------------------------------------------------------------------
    # Converting a split's labels to targets
    # -------------------------------------------------------------------------------------------------

    def encode(
        self, values: Sequence[Any], feature, source: str, column: str, skip_unseen: bool = False
    ) -> tuple[list[Any], list[int]]:
        """``(targets, kept_rows)``: the model's target for every row (rows with unseen labels left out when
        ``skip_unseen``, else they raise a ``DataError``)."""
        self._check_compatible(feature, source, column)
        targets, kept = [], []
        label2id = self.label2id
        for row, value in enumerate(values):
            if self.problem_type == "regression":
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
            if self.problem_type == "single_label_classification":
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
        if self.problem_type == "regression" and not (isinstance(feature, Value) and feature.dtype.startswith(("float", "int"))):
            raise DataError(
                f"{where(source, column)} holds {_describe(feature)} values, but the training labels are numbers "
                "(regression)."
            )

    def _names_of(self, value, source: str, column: str, row: int, feature=MISSING) -> list[str]:
        feature = self.feature if feature is MISSING else feature
        item_feature = _item_feature(feature)
        if self.problem_type == "single_label_classification":
            if item_feature is not None:
                raise DataError(f"{where(source, column, row)} holds a list, but the labels are single-label classes.")
            name = _name(value, feature)
            if name is MISSING:
                raise DataError(f"{where(source, column, row)}: the label is missing (empty, null or NaN).")
            return [name]
        if value is None:
            raise DataError(f"{where(source, column, row)}: the label is missing (null); give an empty list for none.")
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
            raise DataError(f"{where(source, column, row)}: the list of labels {value!r} holds an empty or null label.")
        return names

    def _regression_target(self, value, source: str, column: str, row: int, feature=None) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if value is None:
                raise DataError(f"{where(source, column, row)}: the regression target is missing (empty or null).")
            raise DataError(f"{where(source, column, row)}: the regression target {value!r} is not a number.")
        if not math.isfinite(value):
            raise DataError(
                f"{where(source, column, row)}: the regression target is {value}; targets must be finite numbers."
            )
        return float(value)


def _numeric_first(name: str):
    # Integer labels ("2", "10") sort as numbers, so class ids keep their order; other names sort as text.
    try:
        return (0, int(name), "")
    except ValueError:
        return (1, 0, name)


def _describe(feature) -> str:
    if isinstance(feature, Value):
        return feature.dtype
    return type(feature).__name__
