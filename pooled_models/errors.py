"""The errors a user can fix: train.py and sweep.py print them as one line, without a traceback, and exit 2.
A small shared piece: imports nothing.
"""

import os
import sys

__all__ = ["UsageError", "DataError", "where", "program_name"]


class UsageError(ValueError):
    """A problem with the arguments, the data or the output folder that the user can fix."""


class DataError(UsageError):
    """Bad data: the message names the file (or Hub split), the column and the row."""


def where(source: str, column: str, row: int | None = None) -> str:
    """``train file x.csv, column 'label', row 7``: the place a data error names."""
    location = f"{source}, column {column!r}"
    return location if row is None else f"{location}, row {row}"


def program_name(script: str, command: str, module: str) -> str:
    """What the user typed to run the CLI, for its messages: the console script (``pooled-train``),
    ``python -m <module>``, or the root script (``train.py``), which is also the name in any other case."""
    invoked = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if os.path.basename(invoked) == command:
        return command
    if invoked.endswith(os.path.join(*module.split("."), "__main__.py")):
        return f"python -m {module}"
    return script
