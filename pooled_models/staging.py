"""A run's output folder appears only when the run has succeeded.

Everything (checkpoints, the final model, the card) is written to ``<output_dir>.incomplete`` next to
``output_dir``, which is renamed into place at the end. A killed run therefore leaves no half-written
``output_dir``, only its ``.incomplete`` sibling, whose checkpoints ``--resume_from_checkpoint true`` continues
from. A run that fails before its first checkpoint removes the sibling too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .arguments import UsageError

__all__ = ["StagedOutputDir", "PICKLED_FILES"]

# Written by Trainer with torch.save next to the model; the published folder holds no pickle.
PICKLED_FILES = ("training_args.bin",)


class StagedOutputDir:
    def __init__(self, output_dir: str | Path, overwrite: bool = False):
        self.final = Path(output_dir).absolute()
        self.work = self.final.with_name(self.final.name + ".incomplete")
        self.overwrite = overwrite

    def checkpoints(self) -> list[Path]:
        if not self.work.is_dir():
            return []
        return sorted(self.work.glob(f"{PREFIX_CHECKPOINT_DIR}-*"), key=lambda path: path.stat().st_mtime)

    def check(self, resuming: bool) -> None:
        """Refuse to clobber a finished run or silently restart an interrupted one."""
        if self.final.exists() and not self.overwrite and (not self.final.is_dir() or any(self.final.iterdir())):
            raise UsageError(
                f"output_dir {self.final} already exists and is not empty. Pass --overwrite_output_dir to replace it "
                "(the old folder stays until the new run has succeeded)."
            )
        if self.checkpoints() and not resuming and not self.overwrite:
            raise UsageError(
                f"An interrupted run left checkpoints in {self.work}. Pass --resume_from_checkpoint true to continue "
                "it, or --overwrite_output_dir to start again."
            )

    def create(self, resuming: bool) -> Path:
        if self.work.exists() and not resuming:
            shutil.rmtree(self.work)
        self.work.mkdir(parents=True, exist_ok=True)
        return self.work

    def abandon(self) -> bool:
        """After a failure: keep the work folder only if it holds a checkpoint to resume from. True if kept."""
        if self.checkpoints():
            return True
        shutil.rmtree(self.work, ignore_errors=True)
        return False

    def publish(self, keep_checkpoints: bool = False) -> Path:
        """Tidy the work folder and rename it to ``output_dir`` (replacing an old one only now)."""
        if not keep_checkpoints:
            for checkpoint in self.checkpoints():
                shutil.rmtree(checkpoint)
        for name in PICKLED_FILES:
            (self.work / name).unlink(missing_ok=True)
        replaced = None
        if self.final.exists():
            replaced = self.final.with_name(self.final.name + ".replaced")
            _remove(replaced)
            self.final.rename(replaced)
        self.work.rename(self.final)
        if replaced is not None:
            _remove(replaced)
        return self.final


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
