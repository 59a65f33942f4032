"""train.py never deletes what it did not write, never lets two runs share a folder, and never strands a run."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import yaml
from helpers import FAST, REPO, leftovers, topic_rows, train, write_rows
from safetensors.torch import load_file
from transformers import BertConfig, BertModel, TrainerCallback

from pooled_models.errors import UsageError
from pooled_models.train.cli import main, run
from pooled_models.train.output_dir import RUN_RECORD, StagedOutputDir
from pooled_models.train.trainer import PooledTrainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def data(tmp_path):
    return write_rows(tmp_path / "data" / "train.csv", topic_rows(24))


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


# ----------------------------------------------------------------------------------------------------
# Folders a run must never replace
# ----------------------------------------------------------------------------------------------------


@pytest.fixture
def clone(tmp_path):
    """A stand-in for a fresh clone of this repository: .git, code, the quickstart config and its data."""
    folder = tmp_path / "clone"
    (folder / ".git").mkdir(parents=True)
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "pooled_models").mkdir()
    (folder / "pooled_models" / "__init__.py").write_text("# code\n")
    shutil.copytree(REPO / "configs", folder / "configs")
    shutil.copytree(REPO / "data" / "demo", folder / "data" / "demo")
    return folder


@pytest.mark.parametrize(
    "output_dir, reason", [(".", "is the working directory"), ("..", "is a parent of the working directory")]
)
def test_the_quickstart_never_writes_over_the_working_directory_or_its_parents(
    clone, monkeypatch, output_dir, reason
):
    monkeypatch.chdir(clone)
    before = files_of(clone.parent)
    with pytest.raises(UsageError, match=reason):
        run(["configs/quickstart.yaml", "--output_dir", output_dir, "--overwrite_output_dir"])
    assert files_of(clone.parent) == before


def test_a_repository_root_the_home_directory_and_a_file_are_refused(
    clone, tmp_path, monkeypatch, data, tiny_backbone_path
):
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    a_file = tmp_path / "model.txt"
    a_file.write_text("not a folder")
    before = files_of(tmp_path)
    for output_dir, reason in (
        (clone, "is the root of a git repository"),
        (home, "is your home directory"),
        (a_file, "is a file, not a folder"),
    ):
        with pytest.raises(UsageError, match=reason):
            train(
                tiny_backbone_path,
                output_dir,
                "--train_file",
                str(data),
                "--do_train",
                "--overwrite_output_dir",
            )
    assert files_of(tmp_path) == before


def test_overwrite_refuses_a_folder_with_content_no_run_wrote(tmp_path, data, tiny_backbone_path):
    folder = tmp_path / "work"
    write_rows(folder / "train.csv", topic_rows(4))
    (folder / "notes.txt").write_text("my notes")
    (folder / "src").mkdir()
    (folder / "src" / "main.py").write_text("print('hi')\n")
    before = files_of(folder)
    with pytest.raises(
        UsageError, match=r"holds what no train.py run wrote there \(notes.txt, src, train.csv\)"
    ):
        train(tiny_backbone_path, folder, "--train_file", str(data), "--do_train", "--overwrite_output_dir")
    assert files_of(folder) == before
    assert leftovers(folder) == [folder]


def test_a_folder_of_your_own_files_is_refused_at_once_and_the_advice_works(
    tmp_path, data, tiny_backbone_path
):
    # Without --overwrite_output_dir the message says already that the flag would not help, and what would.
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "notes.txt").write_text("my notes")
    with pytest.raises(UsageError) as refused:
        train(tiny_backbone_path, folder, "--train_file", str(data), "--do_train", "--max_steps", "1")
    message = str(refused.value)
    assert "holds what no train.py run wrote there (notes.txt)" in message
    assert "--overwrite_output_dir only replaces a folder an earlier run wrote" in message
    assert "Choose another output_dir" in message and "Pass --overwrite_output_dir" not in message
    assert (folder / "notes.txt").read_text() == "my notes" and leftovers(folder) == [folder]
    elsewhere = tmp_path / "another"  # the advice: another output_dir
    result = train(tiny_backbone_path, elsewhere, "--train_file", str(data), "--do_train", "--max_steps", "1")
    assert result.output_dir == elsewhere and (elsewhere / "model.safetensors").is_file()


def test_overwrite_replaces_an_earlier_run_but_not_a_file_added_to_it(tmp_path, data, tiny_backbone_path):
    output_dir = tmp_path / "out"
    train(tiny_backbone_path, output_dir, "--train_file", str(data), "--do_train", "--num_train_epochs", "1")
    record = json.loads((output_dir / RUN_RECORD).read_text())
    assert record["status"] == "finished" and "model.safetensors" in record["files"]
    assert not any(name.startswith("checkpoint-") for name in record["files"])
    (output_dir / "my_analysis.ipynb").write_text("{}")
    with pytest.raises(UsageError, match=r"\(my_analysis.ipynb\)"):
        train(
            tiny_backbone_path, output_dir, "--train_file", str(data), "--do_train", "--overwrite_output_dir"
        )
    (output_dir / "my_analysis.ipynb").unlink()
    train(
        tiny_backbone_path,
        output_dir,
        "--train_file",
        str(data),
        "--do_train",
        "--overwrite_output_dir",
        "--num_train_epochs",
        "1",
    )
    assert leftovers(output_dir) == [output_dir]


def test_a_symbolic_link_is_refused(tmp_path, data, tiny_backbone_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(UsageError, match="is a symbolic link"):
        train(tiny_backbone_path, tmp_path / "link", "--train_file", str(data), "--do_train")


def test_no_example_config_sets_overwrite_output_dir():
    configs = sorted((REPO / "configs").iterdir())
    assert configs
    for path in configs:
        settings = (
            json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
        )
        assert "overwrite_output_dir" not in settings, path.name


def test_a_read_only_parent_folder_is_a_usage_error(tmp_path, data, tiny_backbone_path):
    parent = tmp_path / "locked"
    parent.mkdir()
    # chattr +i stops even root (the tests may run as root, for whom permission bits do not count).
    if subprocess.run(["chattr", "+i", str(parent)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        with pytest.raises(
            UsageError, match=r"Cannot create .*out.lock next to output_dir: Operation not permitted"
        ):
            train(tiny_backbone_path, parent / "out", "--train_file", str(data), "--do_train")
    finally:
        subprocess.run(["chattr", "-i", str(parent)], check=True)
    assert list(parent.iterdir()) == []


def test_missing_parent_folders_are_made_and_removed_again_when_nothing_is_written(
    tmp_path, tiny_backbone_path
):
    bad = write_rows(tmp_path / "bad.csv", [{"text": "x", "label": "a"}, {"text": "", "label": "b"}])
    with pytest.raises(UsageError, match="row 1: the text is missing"):
        train(tiny_backbone_path, tmp_path / "new" / "deeper" / "out", "--train_file", str(bad), "--do_train")
    assert not (tmp_path / "new").exists()


# ----------------------------------------------------------------------------------------------------
# The lock: one run per output_dir
# ----------------------------------------------------------------------------------------------------


def test_a_second_run_on_a_locked_output_dir_is_refused_at_once(tmp_path, data, tiny_backbone_path):
    output_dir = tmp_path / "out"
    with StagedOutputDir(output_dir).locked():
        started = time.perf_counter()
        with pytest.raises(
            UsageError,
            match=rf"output_dir {output_dir} is in use by another run \(pid {os.getpid()} "
            r"on .+, started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d",
        ):
            train(
                tiny_backbone_path,
                output_dir,
                "--train_file",
                str(data),
                "--do_train",
                "--overwrite_output_dir",
            )
        assert time.perf_counter() - started < 5
    assert leftovers(output_dir) == []


def test_a_lock_left_by_a_killed_run_is_recognised_as_stale(tmp_path, data, tiny_backbone_path, caplog):
    output_dir = tmp_path / "out"
    lock = tmp_path / "out.lock"
    lock.write_text(json.dumps({"pid": 999999, "host": "gone", "started": "2026-01-01 00:00:00"}))
    train(tiny_backbone_path, output_dir, "--train_file", str(data), "--do_train", "--num_train_epochs", "1")
    assert "Cleared the lock on" in caplog.text and "pid 999999 on gone" in caplog.text
    assert leftovers(output_dir) == [output_dir]


WAITING_RUN = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from transformers import TrainerCallback
    from pooled_models.train.cli import run

    go = Path(sys.argv[1])

    class WaitForGo(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            while not go.exists():
                time.sleep(0.05)

    run(sys.argv[2:], callbacks=[WaitForGo()])
    """
)


@pytest.mark.slow
def test_two_concurrent_runs_on_one_output_dir(tmp_path, data, tiny_backbone_path):
    output_dir = tmp_path / "out"
    go = tmp_path / "go"
    first = subprocess.Popen(
        [
            sys.executable,
            "-c",
            WAITING_RUN,
            str(go),
            "--model_name_or_path",
            tiny_backbone_path,
            "--output_dir",
            str(output_dir),
            *FAST,
            "--train_file",
            str(data),
            "--do_train",
            "--num_train_epochs",
            "1",
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        work = tmp_path / "out.incomplete"
        deadline = time.time() + 120
        while not (work / RUN_RECORD).exists():  # the first run is training
            assert first.poll() is None and time.time() < deadline, first.communicate()[1][-3000:]
            time.sleep(0.1)
        with pytest.raises(UsageError, match=rf"is in use by another run \(pid {first.pid} "):
            train(
                tiny_backbone_path,
                output_dir,
                "--train_file",
                str(data),
                "--do_train",
                "--overwrite_output_dir",
            )
        assert (work / RUN_RECORD).exists()  # its live work folder is untouched
        go.touch()
        stdout, stderr = first.communicate(timeout=300)
    finally:
        first.kill()
    assert first.returncode == 0, stderr[-3000:]
    assert f"Saved to: {output_dir}" in stdout
    assert leftovers(output_dir) == [output_dir]


# ----------------------------------------------------------------------------------------------------
# Resuming: the newest complete checkpoint
# ----------------------------------------------------------------------------------------------------


class CrashAt(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise RuntimeError("the machine went away")


STEPS = [
    "--per_device_train_batch_size",
    "8",
    "--num_train_epochs",
    "2",
    "--save_strategy",
    "steps",
    "--save_steps",
    "2",
    "--save_total_limit",
    "3",
]


def test_resume_skips_an_incomplete_newest_checkpoint(tmp_path, data, tiny_backbone_path, caplog):
    reference = train(
        tiny_backbone_path, tmp_path / "reference", "--train_file", str(data), "--do_train", *STEPS
    )
    output_dir = tmp_path / "out"
    with pytest.raises(RuntimeError, match="went away"):
        train(
            tiny_backbone_path,
            output_dir,
            "--train_file",
            str(data),
            "--do_train",
            *STEPS,
            callbacks=[CrashAt(5)],
        )
    work = tmp_path / "out.incomplete"
    assert sorted(path.name for path in work.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    (work / "checkpoint-4" / "trainer_state.json").unlink()  # as if killed while writing it
    with pytest.raises(UsageError, match="An interrupted run left checkpoints"):
        train(tiny_backbone_path, output_dir, "--train_file", str(data), "--do_train", *STEPS)
    resumed = train(
        tiny_backbone_path,
        output_dir,
        "--train_file",
        str(data),
        "--do_train",
        *STEPS,
        "--resume_from_checkpoint",
        "true",
    )
    assert "Skipping checkpoint-4, which is incomplete: no trainer_state.json" in caplog.text
    expected, got = (
        load_file(reference.output_dir / "model.safetensors"),
        load_file(resumed.output_dir / "model.safetensors"),
    )
    assert all(torch.equal(expected[name], got[name]) for name in expected)
    assert leftovers(output_dir) == [output_dir]


def test_a_work_folder_without_a_complete_checkpoint_does_not_strand_the_run(
    tmp_path, data, tiny_backbone_path, caplog
):
    output_dir = tmp_path / "out"
    with pytest.raises(RuntimeError, match="went away"):
        train(
            tiny_backbone_path,
            output_dir,
            "--train_file",
            str(data),
            "--do_train",
            *STEPS,
            callbacks=[CrashAt(3)],
        )
    work = tmp_path / "out.incomplete"
    (work / "checkpoint-2" / "model.safetensors").write_bytes(b"\x10\x00")  # cut short
    # A resume finds nothing to resume from, says why, and clears the leftovers; a plain rerun then trains.
    with pytest.raises(UsageError, match="no checkpoint-.* folder in .* Start the run again without"):
        train(
            tiny_backbone_path,
            output_dir,
            "--train_file",
            str(data),
            "--do_train",
            *STEPS,
            "--resume_from_checkpoint",
            "true",
        )
    assert (
        "no complete checkpoint to resume from (checkpoint-2: model.safetensors is cut short" in caplog.text
    )
    assert leftovers(output_dir) == []
    train(tiny_backbone_path, output_dir, "--train_file", str(data), "--do_train", *STEPS)
    assert leftovers(output_dir) == [output_dir]


def test_ctrl_c_is_one_line_and_exit_130_and_cleans_up_as_a_failure_does(
    tmp_path, data, tiny_backbone_path, monkeypatch, capsys, caplog
):
    """Ctrl-C during training: one line that says what stays, exit 130 (as pooled-sweep), no traceback; the lock goes,
    and the staging folder too when it holds no complete checkpoint, else it stays for --resume_from_checkpoint."""
    original, steps = PooledTrainer.training_step, []

    def ctrl_c_at_step(stop_at):
        def step(self, *args, **kwargs):
            steps.append(1)
            if len(steps) == stop_at:
                raise KeyboardInterrupt
            return original(self, *args, **kwargs)

        return step

    output_dir = tmp_path / "out"
    arguments = ["--model_name_or_path", tiny_backbone_path, "--output_dir", str(output_dir), *FAST]
    arguments += ["--train_file", str(data), "--do_train", *STEPS]
    monkeypatch.setattr(PooledTrainer, "training_step", ctrl_c_at_step(1))
    assert main(arguments) == 130
    assert capsys.readouterr().err.splitlines() == [
        "train.py: interrupted; nothing was kept (no complete checkpoint had been saved)."
    ]
    assert leftovers(output_dir) == [] and not [
        record for record in caplog.records if record.levelname == "ERROR"
    ]

    steps.clear()  # after the first checkpoint (every 2 steps): it stays, and the run continues from it
    monkeypatch.setattr(PooledTrainer, "training_step", ctrl_c_at_step(3))
    assert main(arguments) == 130
    work = tmp_path / "out.incomplete"
    assert capsys.readouterr().err.splitlines() == [
        f"train.py: interrupted; checkpoint-2 in {work} stays for --resume_from_checkpoint true."
    ]
    assert leftovers(output_dir) == [
        work
    ]  # the lock is gone (resuming from there: tests/train/test_disk_full.py)


# ----------------------------------------------------------------------------------------------------
# What a run starts from: no pickle, no code
# ----------------------------------------------------------------------------------------------------


def test_a_model_folder_with_only_pickled_weights_is_refused_before_anything_is_written(tmp_path, data):
    folder = tmp_path / "pickled_bert"
    config = BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=20
    )
    BertModel(config).save_pretrained(folder)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(
        UsageError,
        match=r"holds no safetensors weights \(only pytorch_model.bin\); train.py never "
        "unpickles weights",
    ):
        train(str(folder), tmp_path / "out", "--train_file", str(data), "--do_train")
    assert leftovers(tmp_path / "out") == []


@pytest.mark.parametrize(
    "key, value, named",
    [
        ("custom_pipelines", {"text-classification": {"impl": "my_pipeline.Pipe"}}, "custom_pipelines"),
        ("auto_map", {"AutoModelForSequenceClassification": "evil--modeling.Model"}, "auto_map"),
    ],
)
def test_a_model_whose_config_names_code_is_refused(tmp_path, data, tiny_backbone_path, key, value, named):
    trained = train(
        tiny_backbone_path,
        tmp_path / "trained",
        "--train_file",
        str(data),
        "--do_train",
        "--num_train_epochs",
        "1",
    ).output_dir
    config = json.loads((trained / "config.json").read_text())
    config[key] = {**config.get(key, {}), **value}
    (trained / "config.json").write_text(json.dumps(config))
    for flags in (["--validation_file", str(data), "--do_eval"], ["--train_file", str(data), "--do_train"]):
        with pytest.raises(UsageError, match=rf"names code to run in its config.json: {named}"):
            train(str(trained), tmp_path / "again", *flags)
        assert leftovers(tmp_path / "again") == []
