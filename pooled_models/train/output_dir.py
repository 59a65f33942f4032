"""output_dir, safely: the lock one process holds for the whole run, the run record, the staging folder the
run writes into (``<output_dir>.incomplete``), publishing it by rename only once the run succeeded, recovering what a
killed run left (which checkpoints a run can resume from: checkpoints.py), and pushing the finished folder to the
Hub."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .checkpoints import checkpoint_problem, checkpoints_in, complete_checkpoints

__all__ = [
    "StagedOutputDir",
    "OutputDirLock",
    "RUN_RECORD",
    "PICKLED_FILES",
    "STAGE_HOOKS",
    "read_run_record",
    "push_folder",
]

logger = logging.getLogger("pooled_models.train")


RUN_RECORD = "pooled_models_run.json"


# Written by Trainer with torch.save next to the model; the published folder holds no pickle.
PICKLED_FILES = ("training_args.bin",)


# A test seam: each hook is called with the name of every publishing stage as it is reached ("final_saved",
# "finished", "checkpoint_removed", "moved_aside", "renamed"). The fault-injection tests add one that kills the
# process at a chosen stage; nothing else uses it.
STAGE_HOOKS: list[Callable[[str], None]] = []


def _reached(stage: str) -> None:
    for hook in STAGE_HOOKS:
        hook(stage)


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _process_info() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": _now(),
        "command": " ".join(sys.argv),
    }


def _describe_run(info: dict[str, Any]) -> str:
    command = f", command: {info['command']}" if info.get("command") else ""
    return (
        f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started {info.get('started', '?')}{command}"
    )


def _write_json_atomically(path: Path, document: dict[str, Any]) -> None:
    # A kill mid-write must leave the old record or the new one, never half of one: write aside, then rename.
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(document, indent=2) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def read_run_record(folder: Path) -> dict[str, Any] | None:
    """The run record of a folder a train.py run wrote, or None (no record, or not readable)."""
    try:
        record = json.loads((folder / RUN_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


class OutputDirLock:
    """An exclusive ``flock`` on ``<output_dir>.lock``, which holds the JSON description of the run holding it.

    Linux and macOS (``fcntl``). Only the process that writes (the main one under ``accelerate launch``) takes it.
    """

    def __init__(self, path: Path, output_dir: Path):
        self.path = path
        self.output_dir = output_dir
        self._fd: int | None = None
        self._created_parents: list[Path] = []

    def acquire(self) -> None:
        import fcntl

        self._make_parents()
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as error:
                self._remove_created_parents()
                raise UsageError(
                    f"Cannot create {self.path} next to output_dir: {error.strerror}. The folder that holds output_dir "
                    "must be writable."
                ) from error
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._read(fd)
                os.close(fd)
                self._remove_created_parents()
                raise UsageError(
                    f"output_dir {self.output_dir} is in use by another run ({_describe_run(holder)}). Wait for it to "
                    "end, or choose another output_dir."
                ) from None
            # The holder may have released and unlinked the file between our open and our flock: we would then hold
            # a lock on a file nobody else can see. Try again on the current file.
            try:
                same_file = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same_file = False
            if same_file:
                break
            os.close(fd)
        previous = self._read(fd)
        if previous:
            logger.warning(
                "Cleared the lock on %s left by a run that is no longer running (%s).",
                self.output_dir,
                _describe_run(previous),
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(_process_info()) + "\n").encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        # Unlinked while still held, so no other run can lock the old file after we let go of it.
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None
        self._remove_created_parents()

    def _make_parents(self) -> None:
        missing = [parent for parent in [self.path.parent, *self.path.parent.parents] if not parent.exists()]
        for parent in reversed(missing):
            try:
                parent.mkdir()
            except FileExistsError:
                continue
            except OSError as error:
                self._remove_created_parents()
                raise UsageError(
                    f"Cannot create the folder {parent} for output_dir: {error.strerror}."
                ) from error
            self._created_parents.append(parent)

    def _remove_created_parents(self) -> None:
        # A run that stops before writing anything leaves no empty folder behind either.
        for parent in reversed(self._created_parents):
            with contextlib.suppress(OSError):
                parent.rmdir()
        self._created_parents = []

    @staticmethod
    def _read(fd: int) -> dict[str, Any]:
        try:
            data = os.pread(fd, 65536, 0).decode("utf-8", errors="replace").strip()
            info = json.loads(data) if data else {}
        except ValueError:
            info = {}
        return info if isinstance(info, dict) else {}


class StagedOutputDir:
    def __init__(self, output_dir: str | Path, overwrite: bool = False):
        self.final = Path(output_dir).absolute()
        self.work = self.final.with_name(self.final.name + ".incomplete")
        self.replaced = self.final.with_name(self.final.name + ".replaced")
        self.overwrite = overwrite
        self._lock = OutputDirLock(self.final.with_name(self.final.name + ".lock"), self.final)

    @contextlib.contextmanager
    def locked(self, enabled: bool = True) -> Iterator[StagedOutputDir]:
        """Hold the output folder's lock for the ``with`` block (a no-op when ``enabled`` is false)."""
        if not enabled:
            yield self
            return
        self._refuse_unsafe()
        self._lock.acquire()
        try:
            yield self
        finally:
            self._lock.release()

    def checkpoints(self) -> list[Path]:
        return checkpoints_in(self.work)

    # -- checks, before anything is written ----------------------------------------------------------------

    def _refuse_unsafe(self) -> None:
        """Folders a run must never replace, whatever the flags say."""
        final = self.final
        if final.is_symlink():
            raise UsageError(
                f"output_dir {final} is a symbolic link; give the folder it points to, or a new name."
            )
        if final.exists() and not final.is_dir():
            raise UsageError(
                f"output_dir {final} is a file, not a folder; give the name of a folder to create."
            )
        resolved, cwd, home = final.resolve(), Path.cwd().resolve(), Path.home().resolve()
        reason = None
        if resolved == cwd:
            reason = "is the working directory"
        elif resolved in cwd.parents:
            reason = "is a parent of the working directory"
        elif resolved == home:
            reason = "is your home directory"
        elif resolved == Path(resolved.anchor):
            reason = "is the root of the file system"
        elif (resolved / ".git").exists():
            reason = "is the root of a git repository"
        if reason:
            raise UsageError(
                f"output_dir {final} {reason}: a run replaces its output_dir as a whole. Give a new folder, e.g. "
                f"{final / 'outputs' / 'model'}."
            )

    def _foreign_entries(self, folder: Path) -> list[str]:
        """Entries of ``folder`` that no train.py run wrote there (all of them if it holds no run record)."""
        entries = sorted(path.name for path in folder.iterdir())
        record = read_run_record(folder)
        if record is None or record.get("status") != "finished" or not isinstance(record.get("files"), list):
            return entries
        written = set(record["files"]) | {RUN_RECORD}
        return [name for name in entries if name not in written]

    def check(self, resuming: bool) -> None:
        """Refuse to clobber a finished run, a folder with other content, or to silently restart an interrupted run."""
        if self.final.is_dir() and any(self.final.iterdir()):
            # Said at once: whether --overwrite_output_dir would help depends on what the folder holds.
            foreign = self._foreign_entries(self.final)
            if foreign:
                shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
                raise UsageError(
                    f"output_dir {self.final} holds what no train.py run wrote there ({shown}), which train.py never "
                    "replaces (--overwrite_output_dir only replaces a folder an earlier run wrote). Choose another "
                    "output_dir, or move those files away yourself."
                )
            if not self.overwrite:
                raise UsageError(
                    f"output_dir {self.final} holds a model an earlier train.py run wrote. Pass "
                    "--overwrite_output_dir to replace it (the old one stays until the new run has succeeded), or "
                    "choose another output_dir."
                )
        if self.work.exists():
            if not self._work_is_ours():
                raise UsageError(
                    f"{self.work} exists but was not written by a train.py run (it holds no {RUN_RECORD}); "
                    "train.py keeps its work there while a run lives. Move it away, or choose another output_dir."
                )
            if complete_checkpoints(self.work) and not resuming and not self.overwrite:
                raise UsageError(
                    f"An interrupted run left checkpoints in {self.work}. Pass --resume_from_checkpoint true to "
                    "continue it, or --overwrite_output_dir to start again."
                )

    def _work_is_ours(self) -> bool:
        # A work folder from before the run record (0.1.0) holds nothing but checkpoints.
        if read_run_record(self.work) is not None:
            return True
        entries = list(self.work.iterdir()) if self.work.is_dir() else [self.work]
        return all(entry in self.checkpoints() for entry in entries)

    # -- recovery from an interrupted run -------------------------------------------------------------------

    def recover(self) -> bool:
        """Complete or roll back what a killed run left (under the lock, before the checks).

        Returns True when a finished model of the interrupted run was published now.
        """
        record = read_run_record(self.work) if self.work.is_dir() else None
        finished = record is not None and record.get("status") == "finished"
        who = f"an interrupted run ({_describe_run(record or {})})"
        if self.replaced.exists():
            if self.final.exists():
                if read_run_record(self.replaced) is not None:
                    _remove(self.replaced)
                    logger.warning(
                        "Removed %s: the model an interrupted publish had already replaced.", self.replaced
                    )
                else:
                    logger.warning("Left %s alone: it was not written by a train.py run.", self.replaced)
            elif not finished:
                self.replaced.rename(self.final)
                logger.warning("Moved the model an interrupted run had set aside back to %s.", self.final)
            # Finished, with output_dir moved aside: the publish below completes, and removes what it replaces.
        if finished:
            if self.final.is_dir() and any(self.final.iterdir()) and self._foreign_entries(self.final):
                raise UsageError(
                    f"{who.capitalize()} finished a model in {self.work}, but {self.final} now holds other files, so "
                    "it was not published. Move them away and run again to publish it, or remove the work folder."
                )
            self._swap_in(record.get("keep_checkpoints", False))
            logger.warning(
                "%s had finished and was stopped while publishing: its model is now in %s.",
                who.capitalize(),
                self.final,
            )
            return True
        if record is not None and not complete_checkpoints(self.work):
            leftovers = "; ".join(f"{path.name}: {checkpoint_problem(path)}" for path in self.checkpoints())
            _remove(self.work)
            logger.warning(
                "Removed what %s left in %s: no complete checkpoint to resume from%s.",
                who,
                self.work,
                f" ({leftovers})" if leftovers else "",
            )
        return False

    def holds_finished_run(self) -> bool:
        """True when ``output_dir`` holds a finished run's model and no run is under way in the work folder."""
        record = read_run_record(self.final) if self.final.is_dir() else None
        return not self.work.exists() and record is not None and record.get("status") == "finished"

    # -- the run's life -------------------------------------------------------------------------------------

    def create(self, resuming: bool) -> Path:
        if self.work.exists() and not resuming:
            _remove(self.work)
        self.work.mkdir(parents=True, exist_ok=True)
        _write_json_atomically(
            self.work / RUN_RECORD,
            {"writer": "pooled_models train.py", "status": "training", **_process_info()},
        )
        return self.work

    def abandon(self) -> list[Path]:
        """After a failure: keep the work folder only if it holds a complete checkpoint. Returns those checkpoints."""
        complete = complete_checkpoints(self.work)
        if not complete:
            _remove(self.work)
        return complete

    def publish(self, keep_checkpoints: bool = False) -> Path:
        """Mark the run finished, tidy the work folder and rename it to ``output_dir`` (replacing an old one only now)."""
        _reached("final_saved")
        for name in PICKLED_FILES:
            (self.work / name).unlink(missing_ok=True)
        published = sorted(
            path.name
            for path in self.work.iterdir()
            if path.name != RUN_RECORD and (keep_checkpoints or path not in self.checkpoints())
        )
        record = read_run_record(self.work) or {}
        record.update(status="finished", finished=_now(), keep_checkpoints=keep_checkpoints, files=published)
        _write_json_atomically(self.work / RUN_RECORD, record)
        _reached("finished")
        self._swap_in(keep_checkpoints)
        return self.final

    def _swap_in(self, keep_checkpoints: bool) -> None:
        """Remove the finished work folder's checkpoints, then put it in place of ``output_dir``."""
        if not keep_checkpoints:
            for checkpoint in self.checkpoints():
                shutil.rmtree(checkpoint)
                _reached("checkpoint_removed")
        if self.final.exists():
            _remove(self.replaced)
            self.final.rename(self.replaced)
            _reached("moved_aside")
        self.work.rename(self.final)
        _reached("renamed")
        _remove(self.replaced)


def push_folder(output_dir: Path, training_args) -> str:
    """Upload the finished folder (model, tokenizer, card, results, predictions) to the Hub; returns the repo id."""
    import huggingface_hub

    api = huggingface_hub.HfApi(token=training_args.hub_token)
    repo = api.create_repo(
        training_args.hub_model_id or output_dir.name, private=training_args.hub_private_repo, exist_ok=True
    )
    api.upload_folder(
        repo_id=repo.repo_id,
        folder_path=str(output_dir),
        commit_message="Upload model trained with pooled_models",
        ignore_patterns=["checkpoint-*"],
    )
    logger.info("Pushed %s to https://huggingface.co/%s", output_dir, repo.repo_id)
    return repo.repo_id
