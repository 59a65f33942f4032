"""--pooling auto: a short search on the training data chooses the pooling by its validation score, then the run
trains it as --pooling <choice> would, says what it chose and why, and leaves nothing of the search behind."""

import dataclasses
import json
import logging
import math
import tempfile
from pathlib import Path

import pytest
import torch
from helpers import (
    data_flags,
    entity_rows,
    leftovers,
    multi_label_rows,
    topic_rows,
    train,
    write_rows,
)
from safetensors.torch import load_file

from pooled_models import PooledForSequenceClassification
from pooled_models.train import pooling_search, run
from pooled_models.train.arguments import AUTO_POOLING_CANDIDATES, HEAD_LEARNING_RATE, parse_arguments
from pooled_models.train.errors import UsageError
from pooled_models.train.pooling_search import (
    SEARCH_RESULTS_KEY,
    choose_pooling,
    refuse_resuming_a_search,
    search_metric,
    trial_arguments,
)

# Made-up validation scores: attention clearly best, and not the first candidate.
SCORES = {"mean": 0.40, "mean_max": 0.55, "attention": 0.90, "lstm": 0.20}


@pytest.fixture
def temporary_directories(monkeypatch):
    """Every temporary directory the search makes: to check that none is left."""
    made = []
    real = tempfile.TemporaryDirectory

    def recording(*args, **kwargs):
        directory = real(*args, **kwargs)
        made.append(Path(directory.name))
        return directory

    monkeypatch.setattr(pooling_search.tempfile, "TemporaryDirectory", recording)
    return made


@pytest.fixture
def made_up_scores(monkeypatch):
    """The trials train for real; their validation scores are SCORES (the trials' pooling -> its score)."""
    scored = []

    def validation_metrics(trainer, validation, problem_type, threshold_plan):
        pooling = trainer.model.config.pooling
        scored.append(pooling)
        return {"eval_f1_macro": SCORES[pooling], "eval_accuracy": 0.0}

    monkeypatch.setattr(pooling_search, "validation_metrics", validation_metrics)
    return scored


def weights(folder: Path) -> dict:
    return load_file(folder / "model.safetensors")


# ----------------------------------------------------------------------------------------------------
# End to end
# ----------------------------------------------------------------------------------------------------


def test_auto_trains_the_best_candidate_as_if_it_had_been_given(
    tiny_backbone_path, tmp_path, made_up_scores, temporary_directories, caplog, monkeypatch, one_torch_thread
):
    # The random state each model is built in (its new head's initial weights are drawn from it).
    random_states = []
    build_model = run.build_model

    def recording_build_model(*args, **kwargs):
        random_states.append(torch.get_rng_state())
        return build_model(*args, **kwargs)

    monkeypatch.setattr(run, "build_model", recording_build_model)
    flags = [*data_flags(tmp_path), "--do_train"]
    with caplog.at_level(logging.INFO, logger="pooled_models.train"):
        auto = train(tiny_backbone_path, tmp_path / "auto", *flags, "--pooling", "auto")
    assert made_up_scores == list(AUTO_POOLING_CANDIDATES)  # every candidate trained and was scored, in order
    *trials, real_run = random_states
    assert len(trials) == len(AUTO_POOLING_CANDIDATES)
    assert all(torch.equal(state, trials[0]) for state in trials)  # the same seed for every candidate
    folder = auto.output_dir
    assert json.loads((folder / "config.json").read_text())["pooling"] == "attention"

    # What it chose and why: the log line, all_results.json and the model card.
    said = [record.getMessage() for record in caplog.records if "--pooling auto chose" in record.getMessage()]
    assert len(said) == 1
    assert "chose attention: the highest eval_f1_macro on the validation split (24 rows)" in said[0]
    assert "mean 0.4000, mean_max 0.5500, attention 0.9000 (chosen), lstm 0.2000" in said[0]
    assert "--auto_pooling_budget 0.0625 of the run's steps, seed 0" in said[0]
    search = json.loads((folder / "all_results.json").read_text())[SEARCH_RESULTS_KEY]
    assert search["chosen"] == "attention" and search["scores"] == SCORES
    assert (search["metric"], search["budget"], search["steps_per_candidate"]) == ("eval_f1_macro", 0.0625, 1)
    card = (folder / "README.md").read_text()
    assert "| pooling | `attention`, chosen by `--pooling auto` |" in card
    assert "mean 0.4000, mean_max 0.5500, **attention 0.9000**, lstm 0.2000" in card

    # Nothing of the search is left: no folder beside output_dir, no checkpoint in it, no temporary directory.
    assert leftovers(tmp_path / "auto") == [folder]
    assert not list(folder.glob("checkpoint-*"))
    assert len(temporary_directories) == len(AUTO_POOLING_CANDIDATES)
    assert [directory for directory in temporary_directories if directory.exists()] == []

    # The run is the one --pooling attention gives: the same weights, the same metrics.
    given = train(tiny_backbone_path, tmp_path / "given", *flags, "--pooling", "attention")
    assert torch.equal(random_states[-1], real_run)  # the search left no trace on the random state
    expected, got = weights(given.output_dir), weights(folder)
    assert expected.keys() == got.keys()
    assert all((expected[name] == got[name]).all() for name in expected)
    assert {key: value for key, value in auto.metrics.items() if key.startswith(("eval_f1", "test_f1"))} == {
        key: value for key, value in given.metrics.items() if key.startswith(("eval_f1", "test_f1"))
    }


@pytest.mark.parametrize(
    ("rows", "metric"),
    [(topic_rows, "eval_f1_macro"), (multi_label_rows, "eval_f1_micro")],
    ids=["single", "multi"],
)
def test_a_whole_run_trial_scores_what_the_run_itself_scores(
    tiny_backbone_path, tmp_path, one_torch_thread, rows, metric
):
    # With a budget of 1 the trial of the chosen pooling is the run itself: same steps, seed and schedule, so its
    # validation score (from the real scorer; multi-label: at the threshold tuned on validation, as the run tunes it)
    # is the run's. (The run must not evaluate while training, which a trial does not do: each evaluation draws a
    # seed for its data loader from the random state the training reads.)
    flags = [*data_flags(tmp_path, rows), "--do_train", "--eval_strategy", "no", "--pooling", "auto"]
    flags += ["--auto_poolings", "mean,max"]
    result = train(tiny_backbone_path, tmp_path / "out", *flags, "--auto_pooling_budget", "1")
    search = result.metrics[SEARCH_RESULTS_KEY]
    assert (list(search["scores"]), search["metric"]) == (["mean", "max"], metric)
    assert search["chosen"] == max(search["scores"], key=search["scores"].get)
    assert search["steps_per_candidate"] == 9  # 3 epochs of 3 steps (48 rows, batch 16)
    assert search["scores"][search["chosen"]] == pytest.approx(result.metrics[metric])


def test_a_search_that_fails_leaves_nothing(
    tiny_backbone_path, tmp_path, monkeypatch, temporary_directories, one_torch_thread
):
    def failing(trainer, validation, problem_type, threshold_plan):
        raise RuntimeError("the scorer broke")

    monkeypatch.setattr(pooling_search, "validation_metrics", failing)
    with pytest.raises(RuntimeError, match="the scorer broke"):
        train(tiny_backbone_path, tmp_path / "out", *data_flags(tmp_path), "--do_train", "--pooling", "auto")
    assert leftovers(tmp_path / "out") == []
    assert temporary_directories and not any(directory.exists() for directory in temporary_directories)


# ----------------------------------------------------------------------------------------------------
# Refused, before anything is written
# ----------------------------------------------------------------------------------------------------


def refused(backbone: str, tmp_path: Path, *flags: str) -> str:
    with pytest.raises(UsageError) as error:
        train(backbone, tmp_path / "out", *flags)
    assert leftovers(tmp_path / "out") == []
    return str(error.value)


def test_auto_needs_validation_data_and_training(tiny_backbone_path, tmp_path):
    train_file = write_rows(tmp_path / "train.jsonl", topic_rows(24))
    message = refused(
        tiny_backbone_path, tmp_path, "--train_file", str(train_file), "--do_train", "--pooling", "auto"
    )
    assert (
        "chooses by the score on the validation split: give validation data" in message
        and "--do_eval" in message
    )
    flags = [flag for flag in data_flags(tmp_path) if flag != "--do_predict"]
    assert "it needs --do_train" in refused(tiny_backbone_path, tmp_path, *flags, "--pooling", "auto")


def test_auto_refuses_a_setting_that_not_every_candidate_takes(tiny_backbone_path, tmp_path):
    flags = [*data_flags(tmp_path), "--do_train", "--pooling", "auto"]
    message = refused(tiny_backbone_path, tmp_path, *flags, "--attention_heads", "2")
    assert "tries mean, mean_max, attention, lstm, and 'mean' does not take this run's settings" in message
    assert "attention_heads=2 does not apply to pooling='mean'" in message
    assert "or 'mean' out of --auto_poolings" in message
    # A label-token setting: label tokens are no candidate, and their settings fit no other pooling.
    message = refused(tiny_backbone_path, tmp_path, *flags, "--label_token_init", "random")
    assert "label_token_init='random' does not apply to pooling='mean'" in message


def test_auto_refuses_token_classification_and_multitask_runs(tiny_backbone_path, tmp_path):
    rows = write_rows(tmp_path / "entities.jsonl", entity_rows(12))
    flags = ["--train_file", str(rows), "--validation_file", str(rows), "--tags_column", "tags"]
    message = refused(tiny_backbone_path, tmp_path, *flags, "--do_train", "--do_eval", "--pooling", "auto")
    assert "chooses the pooling of a sequence classifier; a token-classification or multi-task run" in message


def test_auto_refuses_a_trained_pooled_model(tiny_backbone_path, minilm_tokenizer, tmp_path):
    saved = tmp_path / "saved"
    PooledForSequenceClassification.from_backbone(
        tiny_backbone_path, pooling="max", num_labels=3
    ).save_pretrained(saved)
    minilm_tokenizer.save_pretrained(saved)
    with pytest.raises(
        UsageError, match=r"is a trained pooled model, with pooling='max': --pooling auto chooses"
    ):
        train(str(saved), tmp_path / "out", *data_flags(tmp_path), "--do_train", "--pooling", "auto")
    assert leftovers(tmp_path / "out") == []


def test_search_settings_without_auto_are_refused(tiny_backbone_path, tmp_path):
    flags = [*data_flags(tmp_path), "--do_train", "--auto_pooling_budget", "0.5"]
    message = refused(tiny_backbone_path, tmp_path, *flags)
    assert "auto_pooling_budget is a setting of --pooling auto; this run's pooling is 'mean'" in message


def test_resuming_a_search_is_refused_naming_the_pooling_it_chose(tmp_path):
    checkpoint = tmp_path / "checkpoint-3"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"pooling": "lstm"}))
    with pytest.raises(UsageError, match=r"search again .* \(it chose 'lstm'.*resume it with --pooling lstm"):
        refuse_resuming_a_search(str(checkpoint))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--auto_poolings", "mean"], r"auto_poolings needs at least two poolings to choose from"),
        (
            ["--auto_poolings", "mean", "median"],
            r"Unknown pooling 'median' in auto_poolings. Valid choices: cls,",
        ),
        (["--auto_poolings", "mean,label_tokens"], r"auto_poolings cannot hold 'label_tokens': it inserts"),
        (["--auto_poolings", "mean,cls,mean"], r"auto_poolings names mean more than once"),
        (["--auto_pooling_budget", "0"], r"auto_pooling_budget must be a number in \(0, 1\], got 0"),
        (["--auto_pooling_budget", "1.5"], r"auto_pooling_budget must be a number in \(0, 1\], got 1.5"),
    ],
)
def test_bad_search_settings_are_refused_with_the_valid_choices(flags, message):
    with pytest.raises(UsageError, match=message):
        parse_arguments(["--output_dir", "out", "--pooling", "auto", *flags])


def test_candidates_are_names_or_comma_separated_lists_and_auto_is_a_pooling_choice(tmp_path):
    model_args, _, training_args = parse_arguments(
        ["--output_dir", "out", "--pooling", "auto", "--auto_poolings", "mean,cls", "max"]
    )
    assert (model_args.pooling, training_args.auto_poolings) == ("auto", ["mean", "cls", "max"])
    config_file = tmp_path / "run.yaml"
    config_file.write_text("output_dir: out\npooling: auto\nauto_poolings: mean, attention\n")
    assert parse_arguments([str(config_file)])[2].auto_poolings == ["mean", "attention"]
    with pytest.raises(SystemExit):  # argparse: an unknown pooling is not a choice
        parse_arguments(["--output_dir", "out", "--pooling", "automatic"])


# ----------------------------------------------------------------------------------------------------
# The parts
# ----------------------------------------------------------------------------------------------------


def test_the_best_score_wins_the_earlier_candidate_on_a_tie_and_nan_never():
    assert choose_pooling({"mean": 0.5, "cls": 0.7, "max": 0.6}, greater_is_better=True) == "cls"
    assert choose_pooling({"mean": 0.5, "cls": 0.7, "max": 0.6}, greater_is_better=False) == "mean"
    assert choose_pooling({"mean": 0.7, "cls": 0.7}, greater_is_better=True) == "mean"
    assert choose_pooling({"cls": 0.7, "mean": 0.7}, greater_is_better=True) == "cls"
    assert choose_pooling({"mean": math.nan, "cls": 0.1}, greater_is_better=True) == "cls"
    assert choose_pooling({"mean": math.nan, "cls": 0.1}, greater_is_better=False) == "cls"
    with pytest.raises(UsageError, match=r"no candidate got a validation score \(mean, cls all scored NaN\)"):
        choose_pooling({"mean": math.nan, "cls": math.nan}, greater_is_better=True)


@pytest.mark.parametrize(
    ("flags", "problem_type", "expected"),
    [
        ([], "single_label_classification", ("eval_f1_macro", True)),
        ([], "multi_label_classification", ("eval_f1_micro", True)),
        ([], "regression", ("eval_mse", False)),
        (["--metric_for_best_model", "accuracy"], "single_label_classification", ("eval_accuracy", True)),
        (["--metric_for_best_model", "eval_loss"], "single_label_classification", ("eval_loss", False)),
    ],
)
def test_the_search_scores_by_the_metric_that_picks_the_best_model(flags, problem_type, expected):
    training_args = parse_arguments(["--output_dir", "out", *flags])[2]
    assert search_metric(training_args, problem_type) == expected


def test_a_trial_is_the_run_in_miniature_that_saves_evaluates_and_reports_nothing():
    run_args = parse_arguments(
        [
            *("--output_dir", "out", "--do_train", "--do_eval", "--early_stopping_patience", "2"),
            *("--num_train_epochs", "4", "--warmup_steps", "100", "--ema_decay", "0.9"),
            *("--linear_probe_epochs", "1", "--learning_rate", "3e-5"),
        ]
    )[2]
    before = dataclasses.asdict(run_args)
    trial = trial_arguments(run_args, 0.25, "/tmp/trial")
    assert dataclasses.asdict(run_args) == before  # the run's own arguments are untouched
    assert (trial.num_train_epochs, trial.warmup_steps) == (1.0, 25)
    assert (trial.learning_rate, trial.seed, trial.head_learning_rate) == (
        3e-5,
        run_args.seed,
        HEAD_LEARNING_RATE,
    )
    assert trial.eval_strategy == "no" and trial.save_strategy == "no"
    assert not trial.load_best_model_at_end and trial.early_stopping_patience is None
    assert (trial.report_to, trial.push_to_hub, trial.output_dir) == ([], False, "/tmp/trial")
    assert (trial.ema_decay, trial.linear_probe_epochs) == (None, 0.0)
    capped = trial_arguments(
        parse_arguments(["--output_dir", "out", "--max_steps", "10"])[2], 0.25, "/tmp/trial"
    )
    assert capped.max_steps == 3  # a started step counts
    assert trial_arguments(parse_arguments(["--output_dir", "out"])[2], 0.25, "/tmp/t").warmup_steps == 0.1
