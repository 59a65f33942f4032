"""A save that fills the disk (pooled_models/train/disk_full.py): the model already in output_dir and the complete
checkpoints stay, the unfinished save goes (the staging folder too when no complete checkpoint is left), the run ends
with one line naming the folder and the bytes, and --resume_from_checkpoint true continues."""

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import FAST, leftovers, topic_rows, write_rows

from pooled_models.train import pipeline
from pooled_models.train.cli import main
from pooled_models.train.disk_full import is_disk_full
from pooled_models.train.output_dir import RUN_RECORD
from pooled_models.train.trainer import PooledTrainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# A run of 6 steps (24 rows, 8 a batch, 2 epochs), with a checkpoint every 2 steps when CHECKPOINTS is given.
STEPS = ["--per_device_train_batch_size", "8", "--num_train_epochs", "2"]
CHECKPOINTS = ["--save_strategy", "steps", "--save_steps", "2", "--save_total_limit", "3"]


@pytest.fixture
def data(tmp_path):
    return write_rows(tmp_path / "data" / "train.csv", topic_rows(24))


def arguments(backbone: str, output_dir: Path, data: Path, *flags: str) -> list[str]:
    command = ["--model_name_or_path", backbone, "--output_dir", str(output_dir), *FAST]
    return [*command, "--train_file", str(data), "--do_train", *STEPS, *flags]


def error_line(capsys) -> str:
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("train.py: error:")]
    return line


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def size_of(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def test_a_full_disk_is_one_line_and_the_complete_checkpoint_resumes(
    tmp_path, data, tiny_backbone_path, monkeypatch, capsys
):
    """Simulated: the optimizer's file of the second checkpoint raises ENOSPC (the real disk test is below)."""
    original = PooledTrainer._save_optimizer_and_scheduler
    calls = []

    def disk_full_on_the_second_checkpoint(self, output_dir):
        calls.append(output_dir)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(Path(output_dir) / "optimizer.pt"))
        return original(self, output_dir)

    monkeypatch.setattr(PooledTrainer, "_save_optimizer_and_scheduler", disk_full_on_the_second_checkpoint)
    command = arguments(tiny_backbone_path, tmp_path / "out", data, *CHECKPOINTS)
    assert main(command) == 1
    message, work = error_line(capsys), tmp_path / "out.incomplete"
    assert message.startswith(
        f"train.py: error: No space left on the device of {work} while saving checkpoint-4: "
    )
    assert "it needs about " in message and ", the size of checkpoint-2, and the disk had " in message
    assert f"Removed the unfinished checkpoint-4; checkpoint-2 in {work} stays." in message
    assert message.endswith("then run again with --resume_from_checkpoint true.")
    assert sorted(path.name for path in work.iterdir()) == [
        "checkpoint-2",
        RUN_RECORD,
    ]  # the space given back
    monkeypatch.setattr(PooledTrainer, "_save_optimizer_and_scheduler", original)
    assert main([*command, "--resume_from_checkpoint", "true"]) == 0
    assert leftovers(tmp_path / "out") == [tmp_path / "out"]


def test_a_full_disk_at_the_final_save_keeps_the_previous_model_and_leaves_no_staging_folder(
    tmp_path, data, tiny_backbone_path, monkeypatch, capsys
):
    """Simulated: no checkpoint (--save_strategy no), and the final model's save raises ENOSPC halfway."""
    output_dir = tmp_path / "out"
    command = [
        *arguments(tiny_backbone_path, output_dir, data),
        "--save_strategy",
        "no",
        "--overwrite_output_dir",
    ]
    assert main(command) == 0
    before = files_of(output_dir)
    original = PooledTrainer.save_model

    def full_halfway(self, output_dir=None, _internal_call=False):
        original(self, output_dir, _internal_call)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(PooledTrainer, "save_model", full_halfway)
    assert main(command) == 1
    message = error_line(capsys)
    assert f"No space left on the device of {tmp_path / 'out.incomplete'} while saving the model: " in message
    assert "it needs more than the " in message and " bytes) the disk had for it" in message
    assert f"the model already in {output_dir} is untouched" in message and message.endswith(
        "then run again."
    )
    assert files_of(output_dir) == before and leftovers(output_dir) == [output_dir]


def test_a_full_disk_while_publishing_keeps_the_checkpoints_for_the_resume(
    tmp_path, data, tiny_backbone_path, monkeypatch, capsys
):
    """Simulated: the model is saved, then writing all_results.json raises ENOSPC; the final model's files go, the
    checkpoints stay, and the resume publishes."""

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pipeline, "write_results", full)
    command = arguments(tiny_backbone_path, tmp_path / "out", data, *CHECKPOINTS)
    assert main(command) == 1
    work = tmp_path / "out.incomplete"
    assert "while saving the model: it needs more than the " in error_line(capsys)
    assert sorted(path.name for path in work.iterdir()) == [
        "checkpoint-2",
        "checkpoint-4",
        "checkpoint-6",
        RUN_RECORD,
    ]
    monkeypatch.undo()
    assert main([*command, "--resume_from_checkpoint", "true"]) == 0
    assert leftovers(tmp_path / "out") == [tmp_path / "out"]


def test_a_failure_that_is_not_a_full_disk_is_not_called_one(tmp_path):
    """The check can say no: a plain error on a disk with room is none, an ENOSPC or safetensors' words are one."""
    assert not is_disk_full(RuntimeError("the machine went away"), tmp_path)
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"), tmp_path)
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = ValueError(
        "Error while serializing: I/O error: No space left on device (os error 28)"
    )
    assert is_disk_full(wrapped, tmp_path)


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs at tmp_path/disk whose size the test sets (``resize(bytes)``): root only, skipped where the container
    refuses mounts (the simulated tests above run everywhere)."""
    disk = tmp_path / "disk"
    disk.mkdir()

    def resize(size: int) -> None:
        options = f"size={size}" if not os.path.ismount(disk) else f"remount,size={size}"
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(disk)], capture_output=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")

    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    yield disk, resize
    if os.path.ismount(disk):  # lazily: a failed run's traceback may still hold a file of it open
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


def test_a_real_full_disk_keeps_the_previous_model_and_the_first_checkpoint(
    tmp_path, data, tiny_backbone_path, small_disk, capsys
):
    """A real full disk: output_dir on a tmpfs with room for the previous model and one checkpoint and a half, so the
    second checkpoint's save fails however its writer reports it (torch.save says only 'unexpected pos')."""
    reference = tmp_path / "reference"
    assert (
        main(arguments(tiny_backbone_path, reference, data, *CHECKPOINTS, "--keep_checkpoints", "true")) == 0
    )
    checkpoint = size_of(reference / "checkpoint-2")
    model = size_of(reference) - sum(size_of(path) for path in reference.glob("checkpoint-*"))
    disk, resize = small_disk
    resize(model + checkpoint * 3 // 2)
    output_dir = disk / "out"
    shutil.copytree(reference, output_dir, ignore=shutil.ignore_patterns("checkpoint-*"))
    before = files_of(output_dir)
    command = arguments(tiny_backbone_path, output_dir, data, *CHECKPOINTS, "--overwrite_output_dir")
    assert main(command) == 1
    message, work = error_line(capsys), disk / "out.incomplete"
    assert f"No space left on the device of {work} while saving checkpoint-4: it needs about " in message
    assert f"checkpoint-2 in {work} stays; the model already in {output_dir} is untouched" in message
    assert files_of(output_dir) == before
    assert sorted(path.name for path in work.iterdir()) == ["checkpoint-2", RUN_RECORD]
    resize(4 * (model + checkpoint))  # space freed: the run continues from checkpoint-2
    assert main([*command, "--resume_from_checkpoint", "true"]) == 0
    assert leftovers(output_dir) == [output_dir] and files_of(output_dir) != before
