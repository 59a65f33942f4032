"""The sweep's records on disk.

* Report files are replaced atomically, so an interrupted sweep (Ctrl-C, SIGTERM, a kill) leaves every file either
  as it was after the previous run or as it is after this one, never half-written.
* The train.py settings every run of a sweep shares are recorded in report.json, so that ``--resume`` can refuse to
  add runs that would not be comparable with the finished ones, and say which setting differs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "RunRecord",
    "Sweep",
    "REPORT_FILES",
    "existing_report_files",
    "write_atomically",
    "shared_settings",
    "setting_differences",
]

REPORT_FILES = ("report.md", "report.json", "report.png")


@dataclass
class RunRecord:
    """One run of the sweep: a pooling (or a baseline) with one seed."""

    name: str  # the pooling, or the baseline's name
    kind: str  # "pooling" or "baseline"
    seed: int
    status: str = "ok"  # "ok" or "failed"
    error: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # train.py's: train_*, eval_*, test_*
    parameters: int | None = None
    seconds: float | None = None  # wall time of the whole run (data, training, evaluation, saving)


@dataclass
class Sweep:
    """What the sweep ran and found; the report is written from this."""

    problem_type: str
    metric: str  # the main metric, e.g. "test_f1_macro"
    greater_is_better: bool
    names: list[str]
    seeds: list[int]
    train_arguments: list[str]
    # The train.py settings every run shares (shared_settings below): what --resume checks.
    settings: dict[str, Any] = field(default_factory=dict)
    records: list[RunRecord] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> Sweep:
        """The sweep a report.json describes (its summary, derived from the records, is left out)."""
        values = {item.name: document[item.name] for item in fields(cls) if item.name in document}
        values["records"] = [RunRecord(**record) for record in document.get("records", [])]
        return cls(**values)


# train.py settings a resumed sweep may change: the ones the sweep sets for each run, and the ones that only change
# what is printed or where downloads are cached, not what is trained.
SET_PER_RUN = ("pooling", "seed", "output_dir", "overwrite_output_dir")
NOT_AFFECTING_RESULTS = (
    "cache_dir",
    "disable_tqdm",
    "log_level",
    "log_level_replica",
    "log_on_each_node",
    "logging_strategy",
    "logging_steps",
    "logging_first_step",
    "logging_nan_inf_filter",
    "example_texts",
    "dataloader_pin_memory",  # train.py turns it off on the CPU, where it only warned
)
# Local data files are recorded by their contents: a file moved keeps its runs, a file edited in place does not.
DATA_FILES = ("train_file", "validation_file", "test_file")
DIGEST = "sha256:"


def existing_report_files(folder: Path) -> list[Path]:
    return [folder / name for name in REPORT_FILES if (folder / name).exists()]


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


def shared_settings(model_args: Any, data_args: Any, training_args: Any) -> dict[str, Any]:
    """The train.py settings every run of a sweep shares and its results depend on, as report.json holds them.

    Every argument with the config file, flags and defaults resolved (so equivalent command lines agree), except
    those in ``SET_PER_RUN`` and ``NOT_AFFECTING_RESULTS``; local data files by their contents.
    """
    settings = {**dataclasses.asdict(model_args), **dataclasses.asdict(data_args), **training_args.to_dict()}
    for name in (*SET_PER_RUN, *NOT_AFFECTING_RESULTS):
        settings.pop(name, None)
    for name in DATA_FILES:
        if settings.get(name) and Path(settings[name]).is_file():
            settings[name] = DIGEST + _file_digest(Path(settings[name]))
    # As report.json gives them back (tuples become lists), so that the two compare equal.
    return json.loads(json.dumps(settings, default=str))


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def setting_differences(earlier: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """One line per setting that differs, e.g. ``learning_rate was 0.001, now 0.0001``."""
    absent = object()
    differences = []
    for name in [*earlier, *(name for name in now if name not in earlier)]:
        before, after = earlier.get(name, absent), now.get(name, absent)
        if before == after:
            continue
        if _is_digest(before) and _is_digest(after):
            differences.append(f"{name}: the file's contents differ")
        else:
            differences.append(f"{name} was {_shown(before, absent)}, now {_shown(after, absent)}")
    return differences


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(DIGEST)


def _shown(value: Any, absent: object) -> str:
    return "not a setting" if value is absent else json.dumps(value)
