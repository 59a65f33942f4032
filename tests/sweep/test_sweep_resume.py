"""An interrupted sweep keeps what it finished, and --resume continues it: report files replaced whole after every
run, Ctrl-C stops with exit status 130 and says how to continue, a resumed sweep runs only what is not finished, and
a report made with other settings (or any report, without --resume) is refused before any run.

Most tests replace the runs by an instant fake (``fake_runs``): what they test is the sweep's bookkeeping; one test
trains the tiny backbone and interrupts it inside the Trainer, as Ctrl-C would."""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest
from helpers import REPO, data_flags, multi_label_rows, png_size, write_rows
from transformers import TrainerCallback

import pooled_models.sweep.runner as sweep_module
from pooled_models.sweep.records import write_atomically
from pooled_models.sweep.runner import RunRecord, main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# One epoch of a tiny model on 48 rows: a run takes about a second.
TRAINING = ["--num_train_epochs", "1", "--learning_rate", "1e-3", "--per_device_train_batch_size", "16"]
TRAINING += ["--disable_tqdm", "true"]
REPORT_FILES = ("report.md", "report.json", "report.png")


@pytest.fixture
def data(tmp_path):
    """train.py's data flags for tiny single-label train, validation and test files, written once."""
    return data_flags(tmp_path / "data")


def sweep_argv(data, report_dir, *options, backbone="unused", training=TRAINING):
    """sweep.py's arguments: its ``options``, then train.py's (the backbone is only loaded by real runs)."""
    return [*options, "--report_dir", str(report_dir), "--model_name_or_path", backbone, *data, *training]


def report(report_dir):
    return json.loads((report_dir / "report.json").read_text())


def runs_in(document):
    return [(record["name"], record["seed"], record["status"]) for record in document["records"]]


def report_bytes(report_dir):
    return {name: (report_dir / name).read_bytes() for name in REPORT_FILES}


class FakeRuns:
    """Stands in for ``run_one``: an instant run whose score depends on the pooling and seed. Records every call;
    runs of a name in ``failing`` fail, a run in ``interrupted`` raises KeyboardInterrupt (as Ctrl-C would), and
    ``before_each(index)`` is called before each run."""

    SCORES = {"mean": 0.8, "max": 0.6, "cls": 0.7}

    def __init__(self):
        self.calls, self.failing, self.interrupted, self.before_each = [], set(), set(), None

    def __call__(self, name, kind, seed, train_arguments, runs_dir, keep_model, verbose=False):
        if self.before_each:
            self.before_each(len(self.calls))
        self.calls.append((name, seed))
        if (name, seed) in self.interrupted:
            raise KeyboardInterrupt
        if name in self.failing:
            return RunRecord(
                name, kind, seed, status="failed", error="RuntimeError: broken on purpose", seconds=0.0
            )
        score = self.SCORES[name] + seed / 100
        metrics = {"test_f1_macro": score, "eval_f1_macro": score, "test_accuracy": score}
        return RunRecord(name, kind, seed, metrics=metrics, parameters=1000, seconds=0.0)


@pytest.fixture
def fake_runs(monkeypatch):
    runs = FakeRuns()
    monkeypatch.setattr(sweep_module, "run_one", runs)
    return runs


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


class CtrlCAtFirstStep(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        raise KeyboardInterrupt


@pytest.fixture
def interrupt_second_training(monkeypatch):
    """train.py's run, interrupted (as by Ctrl-C) at the first training step of its second call; returns the
    arguments of every call."""
    import pooled_models.train.cli as run_module

    real_run, calls = run_module.run, []

    def run(argv, callbacks=(), model_factory=None):
        calls.append(argv)
        if len(calls) == 2:
            callbacks = [*callbacks, CtrlCAtFirstStep()]
        return real_run(argv, callbacks=callbacks, model_factory=model_factory)

    monkeypatch.setattr(run_module, "run", run)  # run_one imports it when it runs
    return calls


def test_ctrl_c_keeps_the_finished_runs_and_resume_runs_the_rest(
    tiny_backbone_path, tmp_path, data, interrupt_second_training, capsys
):
    report_dir = tmp_path / "report"
    options = ["--poolings", "mean,max", "--baselines", "none", "--seeds", "0", "--keep_models"]
    argv = sweep_argv(data, report_dir, *options, backbone=tiny_backbone_path)
    assert main(argv) == 130
    assert len(interrupt_second_training) == 2
    interrupted = report(report_dir)
    assert runs_in(interrupted) == [("mean", 0, "ok")]
    assert "test_f1_macro" in interrupted["records"][0]["metrics"]
    assert any(line.startswith("| mean |") for line in (report_dir / "report.md").read_text().splitlines())
    assert png_size(report_dir / "report.png")[0] > 100
    # The finished run's model is kept; the interrupted run leaves no folder, finished-looking or not.
    assert sorted(path.name for path in (report_dir / "runs").iterdir()) == ["mean-seed0"]
    message = capsys.readouterr().err
    assert "sweep.py: interrupted during pooling max, seed 0." in message
    assert "Finished runs (1): mean seed 0." in message
    assert f"Their report: {report_dir / 'report.md'}, {report_dir / 'report.json'}" in message
    assert (
        f"To continue (successful runs are skipped, failed ones run again): python sweep.py {shlex.join(argv)} --resume"
        in message
    )

    assert main([*argv, "--resume"]) == 0
    assert len(interrupt_second_training) == 3  # only max ran again
    resumed = report(report_dir)
    assert runs_in(resumed) == [("mean", 0, "ok"), ("max", 0, "ok")]
    assert (
        resumed["records"][0] == interrupted["records"][0]
    )  # mean's run is the one from before the interruption
    assert sorted(path.name for path in (report_dir / "runs").iterdir()) == ["max-seed0", "mean-seed0"]


def test_ctrl_c_in_the_first_run_writes_nothing(tmp_path, data, fake_runs, capsys):
    report_dir = tmp_path / "report"
    fake_runs.interrupted = {("mean", 0)}
    assert (
        main(sweep_argv(data, report_dir, "--poolings", "mean", "--baselines", "none", "--seeds", "0")) == 130
    )
    assert not report_dir.exists() or not any(report_dir.iterdir())
    message = capsys.readouterr().err
    assert (
        "sweep.py: interrupted during pooling mean, seed 0.\nNo run had finished; nothing was written."
        in message
    )


def test_the_report_is_complete_after_every_run(tmp_path, data, fake_runs):
    report_dir = tmp_path / "report"
    planned = [("mean", 0), ("max", 0), ("mean", 1), ("max", 1)]

    def check_report(index):
        """Before run ``index``: a whole report of the runs before it, and no temporary file."""
        if index == 0:
            assert not any((report_dir / name).exists() for name in REPORT_FILES)
            return
        assert sorted(path.name for path in report_dir.iterdir() if path.is_file()) == sorted(REPORT_FILES)
        assert [(name, seed) for name, seed, _ in runs_in(report(report_dir))] == planned[:index]
        assert f"**Partial report**: {index} of 4 runs finished" in (report_dir / "report.md").read_text()
        assert png_size(report_dir / "report.png")[0] > 100

    fake_runs.before_each = check_report
    assert (
        main(
            sweep_argv(data, report_dir, "--poolings", "mean,max", "--baselines", "none", "--seeds", "0", "1")
        )
        == 0
    )
    assert fake_runs.calls == planned
    assert [(name, seed) for name, seed, _ in runs_in(report(report_dir))] == planned
    assert "Partial report" not in (report_dir / "report.md").read_text()


def test_resume_skips_finished_runs_reruns_failed_ones_and_adds_new_ones(tmp_path, data, fake_runs):
    report_dir = tmp_path / "report"
    fake_runs.failing = {"max"}
    # --resume with no report yet starts the sweep.
    argv = sweep_argv(
        data, report_dir, "--resume", "--poolings", "mean,max", "--baselines", "none", "--seeds", "0"
    )
    assert main(argv) == 0
    first = report(report_dir)
    assert runs_in(first) == [("mean", 0, "ok"), ("max", 0, "failed")]

    fake_runs.calls.clear()
    fake_runs.failing = set()
    assert main(sweep_argv(data, report_dir, "--resume", "--poolings", "cls", "--seeds", "1")) == 0
    # The failed run again, the added pooling cls with the earlier seed, every pooling with the added seed 1.
    assert fake_runs.calls == [("max", 0), ("cls", 0), ("mean", 1), ("max", 1), ("cls", 1)]
    second = report(report_dir)
    assert (second["names"], second["seeds"]) == (["mean", "max", "cls"], [0, 1])
    assert sorted(runs_in(second)) == sorted(
        (name, seed, "ok") for name in ("mean", "max", "cls") for seed in (0, 1)
    )
    assert second["records"][0] == first["records"][0]  # mean, seed 0: not run again
    assert [row["name"] for row in second["summary"]] == ["mean", "cls", "max"]

    # Without poolings, baselines or seeds, --resume continues the earlier sweep as it was: here, nothing is left.
    fake_runs.calls.clear()
    assert main(sweep_argv(data, report_dir, "--resume")) == 0
    assert fake_runs.calls == []
    assert report(report_dir)["records"] == second["records"]


def test_only_the_report_says_a_run_is_finished_not_its_folder(tmp_path, data, fake_runs, capsys):
    report_dir = tmp_path / "report"
    fake_runs.interrupted = {("max", 0)}
    argv = sweep_argv(data, report_dir, "--poolings", "mean,max", "--baselines", "none", "--seeds", "0")
    assert main(argv) == 130
    assert runs_in(report(report_dir)) == [("mean", 0, "ok")]
    assert "interrupted during pooling max, seed 0" in capsys.readouterr().err
    # What a kill after train.py saved max's model, before the report recorded the run, would leave.
    (report_dir / "runs" / "max-seed0").mkdir(parents=True)
    (report_dir / "runs" / "max-seed0" / "config.json").write_text("{}")

    fake_runs.calls.clear()
    fake_runs.interrupted = set()
    assert main([*argv, "--resume"]) == 0
    assert fake_runs.calls == [("max", 0)]
    assert runs_in(report(report_dir)) == [("mean", 0, "ok"), ("max", 0, "ok")]


def test_a_report_is_never_overwritten_without_resume(tmp_path, data, fake_runs, capsys):
    report_dir = tmp_path / "report"
    argv = sweep_argv(data, report_dir, "--poolings", "mean", "--baselines", "none")
    assert main(argv) == 0
    before = report_bytes(report_dir)
    fake_runs.calls.clear()
    assert main(argv) == 2
    assert fake_runs.calls == [] and report_bytes(report_dir) == before
    message = capsys.readouterr().err
    assert (
        f"sweep.py: error: {report_dir} already holds a sweep's report (report.md, report.json, report.png)"
        in message
    )
    assert "Pass --resume to continue that sweep" in message and "or choose another --report_dir" in message


def other_learning_rate(argv, data_dir):
    return [*argv, "--learning_rate", "1e-4"]


def edited_training_file(argv, data_dir):
    path = data_dir / "train.jsonl"
    path.write_text(path.read_text().replace("football", "rugby"))
    return argv


def multi_label_data(argv, data_dir):
    write_rows(data_dir / "train.jsonl", multi_label_rows(48, 0))
    write_rows(data_dir / "validation.jsonl", multi_label_rows(24, 1))
    write_rows(data_dir / "test.jsonl", multi_label_rows(24, 2))
    return argv


def no_test_split(argv, data_dir):
    test_file = argv.index("--test_file")
    return [
        arg
        for index, arg in enumerate(argv)
        if index not in (test_file, test_file + 1) and arg != "--do_predict"
    ]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (other_learning_rate, "learning_rate was 0.001, now 0.0001"),
        (edited_training_file, "train_file: the file's contents differ"),
        (
            multi_label_data,
            "the problem type was single_label_classification, now multi_label_classification",
        ),
        (no_test_split, "the main metric was test_f1_macro, now eval_f1_macro"),
    ],
)
def test_resume_refuses_runs_that_would_not_be_comparable(
    tmp_path, data, fake_runs, capsys, change, expected
):
    report_dir = tmp_path / "report"
    argv = sweep_argv(data, report_dir, "--poolings", "mean", "--baselines", "none")
    assert main(argv) == 0
    before = report_bytes(report_dir)
    fake_runs.calls.clear()
    capsys.readouterr()
    assert main([*change(argv, tmp_path / "data"), "--resume", "--seeds", "7"]) == 2
    assert fake_runs.calls == [] and report_bytes(report_dir) == before
    message = capsys.readouterr().err
    assert f"--resume: the sweep in {report_dir} was made with other settings" in message
    assert f"\n  {expected}\n" in message
    assert f"Its train.py arguments were: {shlex.join(argv[argv.index('--model_name_or_path') :])}" in message


def test_resume_accepts_moved_data_and_equivalent_flags(tmp_path, data, fake_runs):
    report_dir = tmp_path / "report"
    assert main(sweep_argv(data, report_dir, "--poolings", "mean", "--baselines", "none")) == 0
    shutil.copytree(tmp_path / "data", tmp_path / "moved")
    moved = [arg.replace(str(tmp_path / "data"), str(tmp_path / "moved")) for arg in data]
    shutil.rmtree(tmp_path / "data")
    training = [arg for arg in TRAINING if arg not in ("--learning_rate", "1e-3")] + ["--learning_rate=0.001"]
    fake_runs.calls.clear()
    assert main(sweep_argv(moved, report_dir, "--resume", "--seeds", "1", training=training)) == 0
    assert fake_runs.calls == [("mean", 1)]


def test_resume_refuses_a_report_that_did_not_record_its_settings(tmp_path, data, fake_runs, capsys):
    report_dir = tmp_path / "report"
    argv = sweep_argv(data, report_dir, "--poolings", "mean", "--baselines", "none")
    assert main(argv) == 0
    document = report(report_dir)
    del document["settings"]  # as sweep.py wrote it before it recorded them
    (report_dir / "report.json").write_text(json.dumps(document))
    fake_runs.calls.clear()
    assert main([*argv, "--resume"]) == 2
    assert fake_runs.calls == []
    assert "did not record the settings of its runs" in capsys.readouterr().err


# sweep.py in its own process, signalled by the real signal during the first training step of its second run: SIGINT
# is Ctrl-C; SIGKILL leaves no chance to clean up, as when a job is pre-empted.
SIGNALLED_SWEEP = textwrap.dedent(
    """
    import os, signal, sys
    from transformers import TrainerCallback
    import pooled_models.train.cli as run_module
    from pooled_models.sweep.runner import main

    # A Python started from a terminal turns SIGINT into KeyboardInterrupt; one started under a shell's background
    # job (`make test &`) inherits SIGINT ignored, and Python then leaves it ignored. Be the terminal's.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    class SignalAtFirstStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            os.kill(os.getpid(), getattr(signal, os.environ["TEST_SIGNAL"]))

    real_run, calls = run_module.run, []

    def run(argv, callbacks=(), model_factory=None):
        calls.append(argv)
        if len(calls) == 2:
            callbacks = [*callbacks, SignalAtFirstStep()]
        return real_run(argv, callbacks=callbacks, model_factory=model_factory)

    run_module.run = run
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize(("signal_name", "status"), [("SIGINT", 130), ("SIGKILL", -signal.SIGKILL)])
def test_a_signalled_sweep_process_keeps_its_finished_run(
    tiny_backbone_path, tmp_path, data, signal_name, status
):
    report_dir = tmp_path / "report"
    argv = sweep_argv(
        data, report_dir, "--poolings", "mean,max", "--baselines", "none", backbone=tiny_backbone_path
    )
    environment = {**os.environ, "PYTHONPATH": str(REPO), "TEST_SIGNAL": signal_name, "OMP_NUM_THREADS": "1"}
    signalled = subprocess.run(
        [sys.executable, "-c", SIGNALLED_SWEEP, *argv],
        env=environment,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert signalled.returncode == status, signalled.stderr[-3000:]
    if signal_name == "SIGINT":
        assert "Finished runs (1): mean seed 42." in signalled.stderr
        assert not (report_dir / "runs").exists()  # the interrupted run removed its folder
    else:  # killed: the run's work folder and stale lock stay, but the report does not count the run
        names = sorted(path.name for path in (report_dir / "runs").iterdir())
        assert names == ["max-seed42.incomplete", "max-seed42.lock"]
    assert runs_in(report(report_dir)) == [("mean", 42, "ok")]
    assert png_size(report_dir / "report.png")[0] > 100
    assert not list(report_dir.glob(".*.tmp"))

    with pytest.MonkeyPatch.context() as patch:
        import pooled_models.train.cli as run_module

        real_run, calls = run_module.run, []
        patch.setattr(
            run_module, "run", lambda argv, **kwargs: calls.append(argv) or real_run(argv, **kwargs)
        )
        assert main([*argv, "--resume"]) == 0
    assert len(calls) == 1  # max only
    assert runs_in(report(report_dir)) == [("mean", 42, "ok"), ("max", 42, "ok")]
    assert not (
        report_dir / "runs"
    ).exists()  # what the killed run left is gone with the run that replaced it
