"""The checkpoints a run can resume from: ``checkpoint-<step>`` folders, newest first, and whether each is complete
(safetensors weights whole, the trainer state written last, the optimizer's and scheduler's state there); the
checkpoint ``--resume_from_checkpoint`` names or means."""

from __future__ import annotations

import json
import logging
import re
import struct
from pathlib import Path

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME

from ..errors import UsageError

__all__ = [
    "TRUE_WORDS",
    "checkpoints_in",
    "checkpoint_problem",
    "complete_checkpoints",
    "resolve_checkpoint",
]

logger = logging.getLogger("pooled_models.train")


TRAINER_STATE = "trainer_state.json"


# What Trainer needs to continue a run where it stopped; the RNG states are optional (Trainer warns without them).
OPTIMIZER_FILES = ("optimizer.pt", "scheduler.pt")


TRUE_WORDS = ("true", "yes", "last")


_STEP = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


def checkpoints_in(folder: Path) -> list[Path]:
    """The ``checkpoint-<step>`` folders of ``folder``, newest (highest step) first."""
    if not folder.is_dir():
        return []
    found = [
        (int(match.group(1)), path)
        for path in folder.iterdir()
        if path.is_dir() and (match := _STEP.match(path.name))
    ]
    return [path for _, path in sorted(found, reverse=True)]


def _safetensors_problem(path: Path) -> str | None:
    """Why a safetensors file is unusable (missing, or cut short by a kill or a full disk), or None."""
    if not path.is_file():
        return f"no {path.name}"
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            (header_length,) = struct.unpack("<Q", handle.read(8))
            if 8 + header_length > size:
                return f"{path.name} is cut short"
            header = json.loads(handle.read(header_length))
    except (struct.error, ValueError, UnicodeDecodeError):
        return f"{path.name} is cut short or not safetensors"
    data_end = max(
        (entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0
    )
    if 8 + header_length + data_end > size:
        return f"{path.name} is cut short ({size} of {8 + header_length + data_end} bytes)"
    return None


def _weights_problem(folder: Path) -> str | None:
    index = folder / SAFE_WEIGHTS_INDEX_NAME
    if not index.is_file():
        return _safetensors_problem(folder / SAFE_WEIGHTS_NAME)
    try:
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (ValueError, KeyError):
        return f"{index.name} is cut short"
    for shard in shards:
        problem = _safetensors_problem(folder / shard)
        if problem:
            return problem
    return None


def checkpoint_problem(folder: Path) -> str | None:
    """Why Trainer could not resume from ``folder``, or None when it holds everything a resume needs."""
    state = folder / TRAINER_STATE
    # trainer_state.json is written last: without it the run was stopped while the checkpoint was being written.
    if not state.is_file():
        return f"no {TRAINER_STATE} (the run stopped while writing this checkpoint)"
    try:
        json.loads(state.read_text())
    except (ValueError, UnicodeDecodeError):
        return f"{TRAINER_STATE} is cut short"
    weights = _weights_problem(folder)
    if weights:
        return weights
    missing = [name for name in OPTIMIZER_FILES if not (folder / name).is_file()]
    if missing:
        return f"no {' or '.join(missing)} (saved with --save_only_model?)"
    return None


def complete_checkpoints(folder: Path) -> list[Path]:
    """The checkpoints of ``folder`` that a resume can use, newest first."""
    return [path for path in checkpoints_in(folder) if checkpoint_problem(path) is None]


def resolve_checkpoint(resume_from_checkpoint: str | None, work_dir: Path) -> str | None:
    """The checkpoint folder to resume from: ``true``/``last`` means the newest complete one in ``work_dir``.

    Incomplete newer checkpoints are skipped, each named with its reason (the resumed run writes them again). The model weights must be a safetensors file: resuming never unpickles weights.
    """
    if resume_from_checkpoint is None or resume_from_checkpoint.lower() in ("false", "no", "none", ""):
        return None
    if resume_from_checkpoint.lower() not in TRUE_WORDS:
        return _given_checkpoint(Path(resume_from_checkpoint))
    found = checkpoints_in(work_dir)
    if not found:
        raise UsageError(
            f"resume_from_checkpoint={resume_from_checkpoint}: no {PREFIX_CHECKPOINT_DIR}-* folder in {work_dir}, "
            "where an interrupted run with this output_dir keeps its checkpoints. Start the run again without "
            "--resume_from_checkpoint."
        )
    for path in found:
        problem = checkpoint_problem(path)
        if problem is None:
            logger.info("Resuming from %s, the newest complete checkpoint in %s.", path.name, work_dir)
            return str(path)
        logger.warning(
            "Skipping %s, which is incomplete: %s. The resumed run writes it again.", path.name, problem
        )
    reasons = "; ".join(f"{path.name}: {checkpoint_problem(path)}" for path in found)
    raise UsageError(
        f"resume_from_checkpoint={resume_from_checkpoint}: no complete checkpoint in {work_dir} ({reasons}). "
        "Start the run again without --resume_from_checkpoint."
    )


def _given_checkpoint(path: Path) -> str:
    if not path.is_dir():
        raise UsageError(f"resume_from_checkpoint: {path} is not a folder.")
    if _weights_problem(path) == f"no {SAFE_WEIGHTS_NAME}":
        raise UsageError(
            f"resume_from_checkpoint: {path} holds no {SAFE_WEIGHTS_NAME}; train.py only resumes from "
            "safetensors weights (it never unpickles a model)."
        )
    problem = checkpoint_problem(path)
    if problem:
        raise UsageError(f"resume_from_checkpoint: {path} cannot be resumed from: {problem}.")
    return str(path)
