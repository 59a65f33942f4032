"""A disk that fills while train.py saves (a checkpoint, the final model, its card and predictions): the previous
model in output_dir and the complete checkpoints stay, the unfinished save is removed (the staging folder too when it
holds no complete checkpoint), and the run ends with one line naming the folder and the bytes the save needed, as best
known; ``--resume_from_checkpoint true`` then continues from the newest complete checkpoint.

A full disk does not always say so: ``open().write`` raises ``OSError(ENOSPC)``, safetensors a ``SafetensorError``
whose message ends "No space left on device (os error 28)", and ``torch.save`` (optimizer.pt) a ``RuntimeError`` of its
zip writer ("unexpected pos ...") with no errno at all. So a failure is a full disk when the error or one it came from
says so, or when the file system holding the staging folder has less than ``NEARLY_FULL`` bytes left.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
from collections.abc import Iterator
from pathlib import Path

from .checkpoints import complete_checkpoints
from .output_dir import RUN_RECORD

__all__ = ["DiskFull", "is_disk_full", "put_right_when_full"]

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# What writers that raise no OSError say of a full disk (safetensors' Rust I/O error quotes the OS's message).
FULL_WORDS = ("No space left on device", "Disk quota exceeded", "os error 28", "os error 122")
# Below this, a failed write is taken for a full disk whatever its error says (torch.save's says nothing useful).
NEARLY_FULL = 1 << 20


class DiskFull(OSError):
    """A save that ran out of space, once the staging folder was put right. Its message is the one line cli.py
    prints."""

    def __init__(self, message: str):
        super().__init__(errno.ENOSPC, message)

    def __str__(self) -> str:
        return self.strerror


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _free(folder: Path) -> int:
    """The bytes free for this user on the file system holding ``folder`` (or its nearest existing parent)."""
    for path in (folder, *folder.parents):
        if path.exists():
            return shutil.disk_usage(path).free
    return 0


def is_disk_full(error: BaseException, folder: Path) -> bool:
    """Whether ``error`` (raised while writing into ``folder``) comes from a full disk or an exhausted quota."""
    for link in _chain(error):
        if isinstance(link, OSError) and link.errno in FULL_ERRNOS:
            return True
        if any(words in str(link) for words in FULL_WORDS):
            return True
    return _free(folder) < NEARLY_FULL


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file()) if path.is_dir() else 0


def _bytes(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit} ({count:,} bytes)"
    return f"{count:,} bytes"


@contextlib.contextmanager
def put_right_when_full(staging, enabled: bool = True) -> Iterator[None]:
    """Around what writes into ``staging`` (output_dir.StagedOutputDir): a full disk becomes ``DiskFull``, with the
    unfinished save removed first; any other failure passes through untouched."""
    try:
        yield
    except DiskFull:
        raise
    except Exception as error:
        if not enabled or not staging.work.is_dir() or not is_disk_full(error, staging.work):
            raise
        raise DiskFull(_put_right(staging)) from error


def _put_right(staging) -> str:
    """Remove the unfinished save (and the staging folder when no complete checkpoint is left); the one-line message."""
    work, free_when_full = staging.work, _free(staging.work)
    complete = complete_checkpoints(work)
    unfinished = [p for p in sorted(work.iterdir()) if p not in complete and p.name != RUN_RECORD]
    written = sum(_size(path) for path in unfinished)
    checkpoints = [path.name for path in unfinished if path.name.startswith("checkpoint-")]
    what = ", ".join(checkpoints) if checkpoints else "the model"
    for path in unfinished:
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    staging.abandon()  # removes the staging folder when no complete checkpoint is left
    had = written + free_when_full
    if checkpoints and complete:  # a checkpoint is as large as the one before it
        needed = _size(complete[0])
        need = (
            f"it needs about {_bytes(needed)}, the size of {complete[0].name}, and the disk had {_bytes(had)}"
        )
    else:
        needed = None
        need = f"it needs more than the {_bytes(had)} the disk had for it"
    kept = (
        f"{complete[0].name} in {work} stays"
        if complete
        else "no complete checkpoint was left, nor the folder"
    )
    previous = f"; the model already in {staging.final} is untouched" if staging.final.is_dir() else ""
    short = needed - _free(work) if needed is not None and needed > _free(work) else None
    free = f"free at least {_bytes(short)} more" if short else "free some space"
    resume = "run again with --resume_from_checkpoint true" if complete else "run again"
    return (
        f"No space left on the device of {work} while saving {what}: {need}. Removed the unfinished {what}; "
        f"{kept}{previous}. {free[0].upper()}{free[1:]}, then {resume}."
    )
