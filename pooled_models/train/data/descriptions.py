"""The label descriptions of a label-text task (``pooling="label_text"``): the text each label is read as instead of
its name, from the ``label_descriptions`` setting (a JSON object, or a file: ``.json`` holding that object,
``.csv``/``.tsv``/``.jsonl`` with the columns ``label`` and ``description``, one row per label) and from the training
split's ``label_description_column`` (each row's description of its own label). The two are merged; a label given
two different texts, by one source or by both, is refused naming where each came from, and so is a description of a
label the task does not have. Labels without a description are read as their names (``label_texts``)."""

from __future__ import annotations

import dataclasses
import json
import reprlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import DataError, UsageError, where
from ...modeling.configuration_multitask import TOKEN
from ...modeling.configuration_pooled import PooledConfig
from ...modeling.problem_types import MULTI_LABEL, REGRESSION
from .files import Split, read_file
from .labels import MISSING, Labels, label_name

if TYPE_CHECKING:  # an annotation only
    from ..tasks import TaskSpec

__all__ = [
    "SETTING",
    "COLUMN_SETTING",
    "DESCRIPTION_FILE_COLUMNS",
    "DESCRIPTION_FILE_SUFFIXES",
    "check_descriptions_apply",
    "task_descriptions",
]

SETTING = "label_descriptions"
COLUMN_SETTING = "label_description_column"
# The pooling that reads label texts, and the one a run gets when it names none.
LABEL_TEXT = "label_text"
DEFAULT_POOLING = {item.name: item for item in dataclasses.fields(PooledConfig)}["pooling"].default

# A descriptions file: a .json file holds the object label -> description (what the setting takes inline); the others
# hold one row per label.
JSON_OBJECT_SUFFIX = ".json"
DESCRIPTION_FILE_SUFFIXES = (JSON_OBJECT_SUFFIX, ".csv", ".tsv", ".jsonl")
DESCRIPTION_FILE_COLUMNS = ("label", "description")
# How the setting's text is told apart: a value that starts with "{" is JSON, any other the path of a file.
RULE = (
    f"{SETTING} takes a JSON object (label -> description) or the path of a {', '.join(DESCRIPTION_FILE_SUFFIXES)} "
    "file; a value that starts with '{' is read as JSON, any other as a path"
)


@dataclasses.dataclass(frozen=True)
class Description:
    """One label's text and where it was read (for the errors that name it)."""

    text: str
    origin: str


def check_descriptions_apply(spec: TaskSpec, saved_config) -> None:
    """Refuse descriptions for a task that reads no label text, before any data is read: a token task, or a pooling
    other than label_text (the task's, else the saved model's, else PooledConfig's default)."""
    given = _given(spec)
    if not given:
        return
    if spec.kind == TOKEN:
        raise UsageError(
            f"{given[0]} gives the texts of a sequence task's labels (pooling {LABEL_TEXT!r}); a token task reads no "
            "label text. Leave it out."
        )
    pooling = spec.model.get("pooling") or getattr(saved_config, "pooling", None) or DEFAULT_POOLING
    if pooling != LABEL_TEXT:
        raise UsageError(
            f"{given[0]}={_setting_value(spec, given[0])!r} does not apply to pooling={pooling!r}; it is a setting of "
            f"pooling={LABEL_TEXT!r}, which reads each label's text (--pooling {LABEL_TEXT})."
        )


def task_descriptions(
    spec: TaskSpec, splits: dict[str, Split], labels: Labels, cache_dir: str | None = None
) -> dict[str, str] | None:
    """The task's label descriptions, label -> text in label order (None when none is given), from the setting and
    the training split's description column, merged and checked against the task's labels."""
    given = _given(spec)
    if not given:
        return None
    if labels.problem_type == REGRESSION:
        raise DataError(f"{given[0]} describes classes; this task's labels are regression targets.")
    found: dict[str, Description] = {}
    setting = spec.model.get(SETTING)
    if setting is not None:
        for name, description in setting_descriptions(setting, cache_dir).items():
            _add(found, name, description)
    column = spec.data.label_description_column if spec.data is not None else None
    if column is not None:
        for name, description in column_descriptions(splits, labels, spec.data.label_column, column).items():
            _add(found, name, description)
    _check_known(found, labels)
    return {name: found[name].text for name in labels.names if name in found}


def _given(spec: TaskSpec) -> list[str]:
    given = [SETTING] if spec.model.get(SETTING) is not None else []
    if spec.data is not None and spec.data.label_description_column is not None:
        given.append(COLUMN_SETTING)
    return given


def _setting_value(spec: TaskSpec, name: str) -> Any:
    return spec.model[SETTING] if name == SETTING else spec.data.label_description_column


def _add(found: dict[str, Description], name: str, description: Description) -> None:
    """Merge one label's description: a second source (or row) may repeat a label's text, never change it."""
    earlier = found.setdefault(name, description)
    if earlier.text != description.text:
        raise DataError(
            f"Label {name!r} is described as {_shown(earlier.text)} by {earlier.origin} and as "
            f"{_shown(description.text)} by {description.origin}; a label's description must be the same wherever it "
            "is given."
        )


def _check_known(found: Mapping[str, Description], labels: Labels) -> None:
    known = set(labels.names)
    unknown = [name for name in found if name not in known]
    if unknown:
        first = found[unknown[0]]
        raise DataError(
            f"{first.origin} describes {', '.join(map(repr, unknown))}, which {'is' if len(unknown) == 1 else 'are'} "
            f"not among the task's labels: {', '.join(map(repr, labels.names))}."
        )


def _shown(text: str) -> str:
    return reprlib.repr(text)  # shortened, so a long description keeps the message on one line


# ---------------------------------------------------------------------------------------------------------------
# The setting: a JSON object, or a file
# ---------------------------------------------------------------------------------------------------------------


def setting_descriptions(value: Any, cache_dir: str | None = None) -> dict[str, Description]:
    """The descriptions the ``label_descriptions`` setting gives: a mapping (a config file's, or parsed JSON), JSON
    text that starts with ``{``, or the path of a descriptions file."""
    if isinstance(value, Mapping):
        return _from_mapping(value, SETTING)
    if not isinstance(value, str):
        raise UsageError(f"{RULE}, got {value!r}.")
    text = value.strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as error:
            raise UsageError(
                f"{SETTING} starts with '{{', so it is read as JSON, but it is not valid JSON ({error.msg} at column "
                f"{error.colno}). {RULE}."
            ) from None
        return _from_mapping(parsed, SETTING)
    return file_descriptions(Path(text), cache_dir)


def file_descriptions(path: Path, cache_dir: str | None = None) -> dict[str, Description]:
    """The descriptions of a ``.json`` file (one object) or a ``.csv``/``.tsv``/``.jsonl`` file (one row per label)."""
    if not path.is_file():
        raise UsageError(f"{SETTING}: no such file {path}. {RULE}.")
    if path.suffix.lower() not in DESCRIPTION_FILE_SUFFIXES:
        raise UsageError(
            f"{SETTING} file {path}: unknown file type {path.suffix!r}. Valid types: "
            f"{', '.join(DESCRIPTION_FILE_SUFFIXES)}."
        )
    source = f"{SETTING} file {path}"
    if path.suffix.lower() == JSON_OBJECT_SUFFIX:
        return _from_mapping(_read_json_object(path, source), source)
    split = Split(SETTING, source, read_file(path, cache_dir))
    split.require_columns(list(DESCRIPTION_FILE_COLUMNS))
    return _from_rows(split)


def _read_json_object(path: Path, source: str) -> Any:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DataError(f"Cannot read {source}: it is not UTF-8 text.") from None
    except json.JSONDecodeError as error:
        raise DataError(
            f"Cannot read {source}: it is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})."
        ) from None
    if not isinstance(document, dict):
        raise DataError(
            f"{source} holds a JSON {type(document).__name__}; a .json descriptions file holds one object, "
            '{"label": "description", ...}. Rows with the columns label and description go in a .csv, .tsv or '
            ".jsonl file."
        )
    return document


def _from_mapping(value: Any, source: str) -> dict[str, Description]:
    if not isinstance(value, Mapping):
        raise UsageError(f"{RULE}; {source} holds {_shown(value)}.")
    found = {}
    for key, text in value.items():
        # YAML reads a config file's `1: ...` as an integer key; label names are text ("1"), as the labels read them.
        name = str(key) if isinstance(key, (str, int)) else None
        if name is None or not name.strip():
            raise DataError(f"{source} names a label {key!r}; labels are named by non-empty text.")
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"{source} gives label {name!r} {_shown(text)}; a description is non-empty text.")
        found[name] = Description(text, source)
    return found


def _from_rows(split: Split) -> dict[str, Description]:
    label_column, text_column = DESCRIPTION_FILE_COLUMNS
    dataset = split.dataset
    label_feature = dataset.features[label_column]
    found: dict[str, Description] = {}
    for row, (value, text) in enumerate(zip(dataset[label_column], dataset[text_column], strict=True)):
        name = label_name(value, label_feature) if not isinstance(value, (list, dict)) else None
        if name is None or name is MISSING:
            raise DataError(
                f"{where(split.source, label_column, row)} holds {_shown(value)}; each row names one label."
            )
        if not isinstance(text, str) or not text.strip():
            raise DataError(
                f"{where(split.source, text_column, row)}: label {name!r} has no description ({_shown(text)}); "
                "each row of a descriptions file gives one."
            )
        _add(found, name, Description(text, f"{split.source}, row {row}"))
    return found


# ---------------------------------------------------------------------------------------------------------------
# The training split's description column
# ---------------------------------------------------------------------------------------------------------------


def column_descriptions(
    splits: dict[str, Split], labels: Labels, label_column: str, column: str
) -> dict[str, Description]:
    """Each label's description as the training split's rows give it: a row's text describes its label (a
    multi-label row's list, item by item, the labels it lists); a row without one (null or empty) gives none."""
    train = splits.get("train")
    if train is None:
        raise UsageError(f"{COLUMN_SETTING} is read from the training split: it needs --do_train.")
    train.require_columns([column])
    multi_label = labels.problem_type == MULTI_LABEL
    if multi_label and labels.separator is not None:
        raise DataError(
            f"{where(train.source, column)}: the labels are strings split by label_separator, so a row's "
            "descriptions cannot be matched to its labels. Give the labels as lists (json, jsonl, parquet) with a "
            f"list of descriptions beside them, or the descriptions with {SETTING} (a JSON object or a file)."
        )
    found: dict[str, Description] = {}
    dataset = train.dataset
    for row, (value, given) in enumerate(zip(dataset[label_column], dataset[column], strict=True)):
        names = labels.row_names(value, train.source, label_column, row)
        texts = _row_texts(given, len(names), multi_label, where(train.source, column, row))
        for name, text in zip(names, texts, strict=True):
            if text is not None:
                _add(found, name, Description(text, f"{where(train.source, column, row)}"))
    if not found:
        raise DataError(
            f"{where(train.source, column)} gives no description on any row (every value is null or empty)."
        )
    return found


def _row_texts(given: Any, count: int, multi_label: bool, place: str) -> list[str | None]:
    """One row's descriptions, one per label it lists (None: no description)."""
    if given is None:
        return [None] * count
    if not multi_label:
        if not isinstance(given, str):
            raise DataError(f"{place} holds {_shown(given)}; a row's description is text (or null for none).")
        return [given if given.strip() else None]
    if not isinstance(given, (list, tuple)) or len(given) != count:
        raise DataError(
            f"{place} holds {_shown(given)}; a multi-label row's descriptions are a list as long as its labels "
            f"({count}), item by item (null for a label it does not describe)."
        )
    texts = []
    for text in given:
        if text is not None and not isinstance(text, str):
            raise DataError(f"{place} lists {_shown(text)}; a description is text (or null for none).")
        texts.append(text if text and text.strip() else None)
    return texts
