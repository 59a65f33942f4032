"""The CLI's input texts: one per line of a text file (or of standard input), or one column of a csv, tsv or jsonl
file. Problems raise ``InputError`` with a message that names the file, the line or row, and what to do."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

__all__ = ["InputError", "read_texts", "TABLE_SUFFIXES"]

TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl")
STDIN = "-"


class InputError(ValueError):
    """The input file cannot be read as texts."""


def read_texts(source: str, column: str | None = None) -> list[str]:
    """The texts of ``source``: a csv/tsv/jsonl file's ``column`` (default ``text``), else every non-blank line
    (``-``: standard input). Lines keep their inner whitespace; line ends and blank lines are dropped."""
    suffix = "" if source == STDIN else Path(source).suffix.lower()
    if column is not None and suffix not in TABLE_SUFFIXES:
        raise InputError(
            f"--column applies to {', '.join(TABLE_SUFFIXES)} files; {source} is read line by line."
        )
    content = _read(source)
    if suffix == ".jsonl":
        texts = _jsonl_column(content, source, column or "text")
    elif suffix in (".csv", ".tsv"):
        texts = _table_column(content, source, column or "text", "\t" if suffix == ".tsv" else ",")
    else:
        texts = [line for line in content.splitlines() if line.strip()]
    if not texts:
        raise InputError(f"{source} holds no texts.")
    return texts


def _read(source: str) -> str:
    if source == STDIN:
        return sys.stdin.read()
    path = Path(source)
    if not path.is_file():
        raise InputError(f"{source}: no such file.")
    raw = path.read_bytes()
    try:
        return raw.decode(
            "utf-8-sig"
        )  # a byte-order mark, as some editors write, is not part of the first text
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise InputError(
            f"Cannot read {source}: it is not UTF-8 text (line {line} holds the byte 0x{raw[error.start]:02x}). "
            "Re-encode it, e.g. iconv -f latin1 -t utf-8."
        ) from None


def _table_column(content: str, source: str, column: str, delimiter: str) -> list[str]:
    rows = csv.DictReader(io.StringIO(content, newline=""), delimiter=delimiter)
    if rows.fieldnames is None or column not in rows.fieldnames:
        columns = ", ".join(rows.fieldnames or [])
        raise InputError(f"{source} has no column {column!r}. Its columns are: {columns or 'none'}.")
    texts = []
    for number, row in enumerate(rows):
        value = row[column]
        if value is None:
            raise InputError(f"{source}: row {number} has no value in column {column!r} (too few fields).")
        texts.append(value)
    return texts


def _jsonl_column(content: str, source: str, column: str) -> list[str]:
    texts = []
    for number, line in enumerate(content.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(
                f"Cannot read {source}: line {number} is not valid JSON ({error.msg})."
            ) from None
        if not isinstance(record, dict) or column not in record:
            keys = ", ".join(record) if isinstance(record, dict) else "none (not a JSON object)"
            raise InputError(f"{source}: line {number} has no key {column!r}. Its keys: {keys}.")
        if not isinstance(record[column], str):
            raise InputError(
                f"{source}: line {number}: {column!r} holds {type(record[column]).__name__} "
                f"{record[column]!r}, not text."
            )
        texts.append(record[column])
    return texts
