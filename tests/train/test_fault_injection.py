"""A run killed (SIGKILL: no cleanup runs) at each stage of writing leaves the old model or the new one intact, and
the same command run again with --resume_from_checkpoint true ends with the new model published and no leftovers."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import FAST, REPO, leftovers, topic_rows, train, write_rows
from safetensors.torch import load_file

from pooled_models.train.output_dir import RUN_RECORD, read_run_record

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

# Runs train.py's run() and SIGKILLs the process at the stage named by KILL_AT: a publishing stage (through the
# staging module's test seam), or in the middle of writing the second checkpoint (after its weights, before its
# optimizer state and trainer_state.json).
KILLED_RUN = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    from pooled_models.train import output_dir as staging
    from pooled_models.train.cli import run
    from pooled_models.train.trainer import PooledTrainer

    torch.set_num_threads(int(os.environ["TEST_TORCH_THREADS"]))  # as in the test process: same float reductions
    stage = os.environ["KILL_AT"]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    if stage == "checkpoint_write":
        original, calls = PooledTrainer._save_optimizer_and_scheduler, []

        def save(self, output_dir):
            calls.append(output_dir)
            if len(calls) == 2:
                die()
            return original(self, output_dir)

        PooledTrainer._save_optimizer_and_scheduler = save
    else:
        staging.STAGE_HOOKS.append(lambda reached: die() if reached == stage else None)
    run(sys.argv[1:])
    """
)

# Stage -> what output_dir holds right after the kill (the old model; nothing, the old one being set aside in
# .replaced and the new one finished in .incomplete; or the new model), and what the rerun reports doing about it.
PUBLISHED_NOW = "had finished and was stopped while publishing: its model is now in"
STAGES = {
    "checkpoint_write": ("old", "Skipping checkpoint-8, which is incomplete: no trainer_state.json"),
    "final_saved": (
        "old",
        "Resuming from checkpoint-8, the newest complete checkpoint",
    ),  # the last checkpoint: nothing left to train
    "finished": ("old", PUBLISHED_NOW),
    "checkpoint_removed": ("old", PUBLISHED_NOW),
    "moved_aside": ("set aside", PUBLISHED_NOW),
    "renamed": ("new", "the model an interrupted publish had already replaced"),
}


@pytest.fixture(scope="module")
def setting(tmp_path_factory, tiny_backbone_path):
    """The data, the run's arguments, and the weights of the old model and of an uninterrupted new run."""
    folder = tmp_path_factory.mktemp("faults")
    data = write_rows(folder / "train.csv", topic_rows(32))
    arguments = [
        "--train_file",
        str(data),
        "--do_train",
        "--per_device_train_batch_size",
        "8",
        "--num_train_epochs",
        "2",
        "--save_strategy",
        "epoch",
    ]
    old = train(tiny_backbone_path, folder / "old", *arguments, "--seed", "0").output_dir
    new = train(tiny_backbone_path, folder / "new", *arguments, "--seed", "1").output_dir
    return arguments + ["--seed", "1"], old, new


def same_weights(folder: Path, reference: Path) -> bool:
    got, expected = load_file(folder / "model.safetensors"), load_file(reference / "model.safetensors")
    return got.keys() == expected.keys() and all(torch.equal(got[name], expected[name]) for name in expected)


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_kill_at_any_stage_leaves_a_model_intact_and_a_rerun_publishes_the_new_one(
    stage, setting, tmp_path, tiny_backbone_path, caplog
):
    arguments, old, new = setting
    output_dir = tmp_path / "out"
    # The model the killed run replaces: the old run's folder as that run published it (a copy, not a retrained one).
    shutil.copytree(old, output_dir)
    assert read_run_record(output_dir)["status"] == "finished"

    command = [
        "--model_name_or_path",
        tiny_backbone_path,
        "--output_dir",
        str(output_dir),
        *FAST,
        *arguments,
        "--overwrite_output_dir",
    ]
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, *command],
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "KILL_AT": stage,
            "TEST_TORCH_THREADS": str(torch.get_num_threads()),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]

    work, replaced = tmp_path / "out.incomplete", tmp_path / "out.replaced"
    state, report = STAGES[stage]
    if state == "old":
        assert same_weights(output_dir, old) and not replaced.exists()
    elif state == "set aside":
        assert not output_dir.exists() and same_weights(replaced, old)
        assert read_run_record(work)["status"] == "finished" and same_weights(work, new)
    else:
        assert same_weights(output_dir, new) and same_weights(replaced, old)
    assert (tmp_path / "out.lock").exists()  # left by the killed run; the rerun sees it is stale

    result = train(
        tiny_backbone_path,
        output_dir,
        *arguments,
        "--overwrite_output_dir",
        "--resume_from_checkpoint",
        "true",
    )
    assert result.output_dir == output_dir
    assert report in caplog.text
    assert same_weights(output_dir, new)
    assert read_run_record(output_dir)["status"] == "finished"
    assert (output_dir / RUN_RECORD).exists() and not list(output_dir.glob("checkpoint-*"))
    assert leftovers(output_dir) == [output_dir]
