"""What a run prints (console.py), without training: one bar per phase, also over several tasks' evaluation
loaders (transformers' own bar overran its total there: the stray "26it" after the multi-task demo); one line per
evaluation during training; quiet logging and library bars unless --log_level info; pinned memory where the run computes on an accelerator only."""

import logging
from types import SimpleNamespace

import datasets
import pytest
import torch
import transformers

from pooled_models.train.arguments import parse_arguments, uses_an_accelerator
from pooled_models.train.console import RunProgress, epoch_metrics, quiet_libraries, set_up_logging


def state(**values):
    return SimpleNamespace(
        **{"is_world_process_zero": True, "global_step": 0, "max_steps": 4, "epoch": None, **values}
    )


ARGS = SimpleNamespace(disable_tqdm=False)


def test_an_evaluation_over_several_tasks_fills_one_bar_to_its_total():
    progress = RunProgress()
    first, second = [0] * 3, [0] * 2  # two tasks' evaluation loaders
    with progress.running("evaluate"):
        for loader in (first, first, first, second, second):
            progress.on_prediction_step(ARGS, state(), None, eval_dataloader=loader)
        bar = progress.bar
        assert (bar.desc, bar.total, bar.n) == ("evaluate", 5, 5)
    assert progress.bar is None and progress.phase == "evaluate"


def test_training_shows_one_bar_and_a_line_per_evaluation(capsys):
    progress = RunProgress()
    progress.on_train_begin(ARGS, state(), None)
    progress.on_prediction_step(
        ARGS, state(), None, eval_dataloader=[0] * 3
    )  # no bar inside the training bar
    progress.on_log(ARGS, state(epoch=1.0), None, logs={"loss": 0.5})
    logs = {
        "eval_loss": 0.25,
        "eval_team_loss": 0.2,
        "eval_team_f1_macro": 0.75,
        "eval_entities_f1": 0.5,
        "eval_entities_precision": 0.4,
        "eval_entities_recall": 0.6,
        "eval_runtime": 1.5,
        "eval_samples_per_second": 80.0,
        "epoch": 1.0,
    }
    progress.on_log(ARGS, state(epoch=1.0), None, logs=logs)
    assert progress.bar.desc == "train" and progress.bar.postfix == "loss=0.5"
    progress.on_train_end(ARGS, state(), None)
    printed = capsys.readouterr().out
    assert printed.strip() == "epoch 1: eval_entities_f1 0.5, eval_loss 0.25, eval_team_f1_macro 0.75"
    assert epoch_metrics({"eval_loss": 0.25, "eval_accuracy": 1.0}) == {
        "eval_loss": 0.25,
        "eval_accuracy": 1.0,
    }


@pytest.mark.parametrize("log_level, verbose", [(None, False), ("warning", False), ("info", True)])
def test_the_libraries_speak_only_with_log_level_info(log_level, verbose, tmp_path):
    argv = ["--output_dir", str(tmp_path / "out")] + (["--log_level", log_level] if log_level else [])
    _, _, training_args = parse_arguments(argv)
    levels = {name: logging.getLogger(name).level for name in ("accelerate", "datasets", "pooled_models")}
    try:
        set_up_logging(training_args)
        assert logging.getLogger("pooled_models").getEffectiveLevel() == logging.INFO
        assert (logging.getLogger("accelerate").getEffectiveLevel() <= logging.INFO) == verbose
        bars = (
            transformers.utils.logging.is_progress_bar_enabled(),
            datasets.utils.are_progress_bars_disabled(),
        )
        with quiet_libraries(verbose):
            assert transformers.utils.logging.is_progress_bar_enabled() == (verbose and bars[0])
            assert datasets.utils.are_progress_bars_disabled() == (not verbose or bars[1])
        assert (
            transformers.utils.logging.is_progress_bar_enabled(),
            datasets.utils.are_progress_bars_disabled(),
        ) == bars
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        transformers.utils.logging.set_verbosity_error()


def test_pin_memory_follows_the_device_the_run_computes_on_unless_asked_for(tmp_path):
    # What the code decides from the device it sees: on where torch sees an accelerator, off on the CPU.
    assert uses_an_accelerator(use_cpu=False) == torch.accelerator.is_available()
    assert uses_an_accelerator(use_cpu=True) is False
    _, _, default = parse_arguments(["--output_dir", str(tmp_path / "a")])
    assert default.dataloader_pin_memory == torch.accelerator.is_available()
    _, _, on_cpu = parse_arguments(["--output_dir", str(tmp_path / "c"), "--use_cpu", "true"])
    assert on_cpu.dataloader_pin_memory is False
    _, _, asked = parse_arguments(["--output_dir", str(tmp_path / "b"), "--dataloader_pin_memory", "true"])
    assert asked.dataloader_pin_memory is True
