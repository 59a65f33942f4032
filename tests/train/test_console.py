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
from pooled_models.train.console import (
    RunProgress,
    describe_head,
    epoch_metrics,
    print_summary,
    quiet_libraries,
    set_up_logging,
)


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


QUIET_ARGS = SimpleNamespace(disable_tqdm=True, eval_strategy="no")


def test_without_bars_training_prints_a_line_per_logged_loss_and_per_epoch_and_each_final_phase(capsys):
    """Issue 42: --disable_tqdm left nothing on screen for a 20-minute epoch."""
    progress = RunProgress()
    progress.on_train_begin(QUIET_ARGS, state(), None)
    progress.on_log(QUIET_ARGS, state(global_step=1, epoch=0.5), None, logs={"loss": 0.75})
    progress.on_epoch_end(QUIET_ARGS, state(global_step=2, epoch=1.0), None)
    progress.on_train_end(QUIET_ARGS, state(), None)
    with progress.running("predict"):
        for _ in range(3):
            progress.on_prediction_step(QUIET_ARGS, state(), None, eval_dataloader=[0] * 3)
        progress.on_predict(QUIET_ARGS, state(), None)  # Trainer's call at the end of predict: the bar closes
    assert capsys.readouterr().out.splitlines() == [
        "step 1 of 4: loss 0.75",
        "epoch 1: step 2 of 4",
        "predict: done, 3 batches",
    ]
    # Evaluating every epoch, the evaluation's line is the epoch's; with bars, the bar is.
    evaluating = SimpleNamespace(disable_tqdm=True, eval_strategy="epoch")
    progress.on_train_begin(evaluating, state(), None)
    progress.on_epoch_end(evaluating, state(global_step=2, epoch=1.0), None)
    progress.on_log(evaluating, state(epoch=1.0), None, logs={"eval_accuracy": 0.5})
    progress.on_train_end(evaluating, state(), None)
    assert capsys.readouterr().out.splitlines() == ["epoch 1: eval_accuracy 0.5"]
    progress.on_train_begin(ARGS, state(), None)
    progress.on_epoch_end(SimpleNamespace(disable_tqdm=False, eval_strategy="no"), state(epoch=1.0), None)
    progress.on_train_end(ARGS, state(), None)
    assert "epoch 1" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "epoch, rows, said",
    [
        (1.0, 1, "Trained 1 epoch on 1 row in 3 s"),
        (4.0, 400, "Trained 4 epochs on 400 rows in 3 s"),
        (0.153846, 26, "Trained 0.15 epochs on 26 rows in 3 s"),
        (2.999, 26, "Trained 3 epochs on 26 rows in 3 s"),
    ],
)
def test_the_summary_says_epochs_and_rows_as_people_do(epoch, rows, said, tmp_path, capsys):
    metrics = {"epoch": epoch, "train_rows": rows, "train_runtime": 3.0, "train_loss": 0.5}
    print_summary(tmp_path, metrics, [], {"sequence": "sequence"}, single=True)
    assert said in capsys.readouterr().out


def test_a_label_text_model_is_described_by_its_scorer_not_as_a_linear_head():
    from transformers import BertConfig

    from pooled_models import PooledConfig

    backbone = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37)
    shared = PooledConfig(backbone_config=backbone, pooling="label_text", id2label={0: "a", 1: "b"})
    assert describe_head(shared) == (
        "label_text pooling, shared scorer (the scaled cosine of the text and each label, any labels)"
    )
    per_label = PooledConfig(
        backbone_config=backbone,
        pooling="label_text",
        label_text_scorer="per_label",
        id2label={0: "a", 1: "b"},
    )
    assert describe_head(per_label).startswith("label_text pooling, per_label scorer (")
    assert (
        describe_head(PooledConfig(backbone_config=backbone, pooling="mean")) == "mean pooling, linear head"
    )
    tokens = PooledConfig(backbone_config=backbone, pooling="label_tokens", id2label={0: "a", 1: "b"})
    assert describe_head(tokens) == "label_tokens pooling, linear head on each label token"
