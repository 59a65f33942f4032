"""An interrupted sweep keeps what it finished, and --resume continues it: report files replaced whole after every
run, Ctrl-C stops with exit status 130 and says how to continue, a resumed sweep runs only what is not finished, and
a report made with other settings (or any report, without --resume) is refused before any run."""

import json
import shlex

import pytest
from test_sweep import data_flags, png_size
from transformers import TrainerCallback

from pooled_models.sweep import main
from pooled_models.sweep_records import write_atomically

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# One epoch of a tiny model on 48 rows, no baseline: a run takes about a second.
QUICK = ["--baselines", "none", "--seeds", "0", "--num_train_epochs", "1", "--learning_rate", "1e-3",
         "--per_device_train_batch_size", "16", "--disable_tqdm", "true"]


def sweep_flags(tmp_path, report_dir, *flags, backbone="unused"):
    """sweep.py's arguments for the tiny data in ``tmp_path``: ``flags`` override the quick defaults."""
    return [*QUICK, "--report_dir", str(report_dir), "--model_name_or_path", backbone, *data_flags(tmp_path), *flags]


class CtrlCAtFirstStep(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        raise KeyboardInterrupt


def test_a_report_file_is_replaced_whole_or_not_at_all(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("after run 1")

    def interrupted(handle):
        handle.write(b"after run")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, interrupted)
    assert path.read_text() == "after run 1"
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind
    write_atomically(path, lambda handle: handle.write(b"after run 2"))
    assert path.read_text() == "after run 2" and list(tmp_path.iterdir()) == [path]


@pytest.fixture
def interrupt_second_training(monkeypatch):
    """train.py's run, interrupted (as by Ctrl-C) at the first training step of its second call; returns the
    arguments of every call."""
    import pooled_models.run as run_module

    real_run, calls = run_module.run, []

    def run(argv, callbacks=(), model_factory=None):
        calls.append(argv)
        if len(calls) == 2:
            callbacks = [*callbacks, CtrlCAtFirstStep()]
        return real_run(argv, callbacks=callbacks, model_factory=model_factory)

    monkeypatch.setattr(run_module, "run", run)  # run_one imports it when it runs
    return calls


def test_ctrl_c_keeps_the_finished_runs_and_says_how_to_continue(
    tiny_backbone_path, tmp_path, interrupt_second_training, capsys
):
    report_dir = tmp_path / "report"
    argv = sweep_flags(tmp_path, report_dir, "--poolings", "mean,max", "--keep_models", backbone=tiny_backbone_path)
    assert main(argv) == 130
    assert len(interrupt_second_training) == 2
    document = json.loads((report_dir / "report.json").read_text())
    assert [(record["name"], record["seed"], record["status"]) for record in document["records"]] == [
        ("mean", 0, "ok")
    ]
    assert "test_f1_macro" in document["records"][0]["metrics"]
    assert any(line.startswith("| mean |") for line in (report_dir / "report.md").read_text().splitlines())
    assert png_size(report_dir / "report.png")[0] > 100
    # The finished run's model is kept; the interrupted run leaves no folder, finished-looking or not.
    assert sorted(path.name for path in (report_dir / "runs").iterdir()) == ["mean-seed0"]
    message = capsys.readouterr().err
    assert "sweep.py: interrupted during pooling max, seed 0." in message
    assert "Finished runs (1): mean seed 0." in message
    assert f"Their report: {report_dir / 'report.md'}, {report_dir / 'report.json'}" in message
    assert f"To continue (finished runs are skipped): python sweep.py {shlex.join(argv)} --resume" in message
