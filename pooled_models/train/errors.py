"""The errors a user can fix: train.py and sweep.py print them as one line, without a traceback, and exit 2.
A small shared piece: imports nothing."""

__all__ = ["UsageError", "DataError", "where"]


class UsageError(ValueError):
    """A problem with the arguments, the data or the output folder that the user can fix."""


class DataError(UsageError):
    """Bad data: the message names the file (or Hub split), the column and the row."""


def where(source: str, column: str, row: int | None = None) -> str:
    """``train file x.csv, column 'label', row 7``: the place a data error names."""
    location = f"{source}, column {column!r}"
    return location if row is None else f"{location}, row {row}"
