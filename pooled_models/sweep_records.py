"""The sweep's records on disk: report files replaced atomically, so that an interrupted sweep (Ctrl-C, SIGTERM, a
kill) leaves every file either as it was after the previous run or as it is after this one, never half-written."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["write_atomically"]


def write_atomically(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Let ``write`` fill a temporary file next to ``path``, then rename it over ``path``.

    ``os.replace`` within one folder is atomic: a reader (or a resumed sweep) sees the old file or the new one.
    The temporary name is the process's own, so the file gets the usual permissions (unlike ``tempfile``'s 0600).
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())  # the data is on disk before the rename makes it the report
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
