"""train.py's defaults for few examples per label (bench/labels.py measured them; docs/label-text.md, "Defaults"):
more epochs on a small training set, and a decision threshold of 0.7 for an asymmetric-loss head that nothing tunes."""

import json
import logging
import types

import pytest
from helpers import FAST, multi_label_rows, topic_rows, write_rows

import pooled_models.train.pipeline as pipeline
from pooled_models.train.arguments import MAX_DEFAULT_EPOCHS, MIN_TRAIN_STEPS, NUM_TRAIN_EPOCHS
from pooled_models.train.arguments.defaults import ASYMMETRIC_UNTUNED_THRESHOLD
from pooled_models.train.arguments.training import FEW_EXAMPLES_LEARNING_RATE, LEARNING_RATE
from pooled_models.train.cli import run
from pooled_models.train.few_examples import (
    default_epochs,
    default_learning_rate,
    default_pooling,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _without(flags: list[str], name: str) -> list[str]:
    at = flags.index(name)
    return flags[:at] + flags[at + 2 :]


# the tests' fast settings without their --num_train_epochs, so that train.py's default applies
NO_EPOCHS = _without(FAST, "--num_train_epochs")


def run_without_epochs(backbone, tmp_path, rows, *flags):
    data = write_rows(tmp_path / "train.jsonl", rows)
    seen = {}
    make_plan = pipeline.make_plan

    def plan_and_remember(*args, **kwargs):
        seen["plan"] = make_plan(*args, **kwargs)
        return seen["plan"]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "make_plan", plan_and_remember)
        result = run(
            ["--model_name_or_path", backbone, "--output_dir", str(tmp_path / "out"), *NO_EPOCHS]
            + ["--train_file", str(data), "--do_train", *flags]
        )
    return seen["plan"], result.output_dir


def test_the_fast_settings_without_epochs_keep_the_rest():
    assert "--num_train_epochs" not in NO_EPOCHS and len(NO_EPOCHS) == len(FAST) - 2


def test_a_small_training_set_trains_for_enough_steps(tiny_backbone_path, tmp_path):
    plan, folder = run_without_epochs(tiny_backbone_path, tmp_path, topic_rows(40), "--pooling", "mean")
    # 40 rows in batches of 16: 3 steps an epoch; 250 steps would take 84 epochs, capped at 32
    assert plan.trainer_args.num_train_epochs == MAX_DEFAULT_EPOCHS == 32
    results = json.loads((folder / "all_results.json").read_text())
    assert results["epoch"] == pytest.approx(MAX_DEFAULT_EPOCHS)


def test_chosen_epochs_and_steps_are_kept(tiny_backbone_path, tmp_path):
    plan, _ = run_without_epochs(
        tiny_backbone_path, tmp_path / "a", topic_rows(40), "--num_train_epochs", "2"
    )
    assert plan.trainer_args.num_train_epochs == 2
    plan, _ = run_without_epochs(tiny_backbone_path, tmp_path / "b", topic_rows(40), "--max_steps", "5")
    assert plan.trainer_args.num_train_epochs == NUM_TRAIN_EPOCHS and plan.trainer_args.max_steps == 5


def _args(**changes):
    settings = dict(
        epochs_chosen=False,
        learning_rate_chosen=False,
        max_steps=-1,
        do_train=True,
        per_device_train_batch_size=16,
        world_size=1,
        gradient_accumulation_steps=1,
    )
    return types.SimpleNamespace(**{**settings, **changes})


def _tasks(*sizes, labels=28, problem_type="single_label_classification", names=None):
    label_space = types.SimpleNamespace(
        num_labels=labels, problem_type=problem_type, names=names or [f"topic {i}" for i in range(labels)]
    )
    return {
        f"task{index}": types.SimpleNamespace(
            splits={"train": types.SimpleNamespace(dataset=range(size))}, labels=label_space
        )
        for index, size in enumerate(sizes)
    }


@pytest.mark.parametrize(
    ("rows", "labels", "epochs"),
    [
        (171, 29, 23),  # bench/labels.py, debtags with 8 examples per label: 11 steps an epoch
        (224, 28, 18),  # fortunes with 8 examples per label: 14 steps an epoch
        (608, 29, 7),  # debtags with 32 examples per label
        (896, 28, 5),  # fortunes with 32 examples per label
        (1008, 28, None),  # fortunes' full training split: 36 rows per label
        (1500, 29, None),  # debtags' full training split
        (400, 4, None),  # the README quickstart: 100 rows per label, 25 steps an epoch
    ],
)
def test_default_epochs_by_rows_per_label(rows, labels, epochs):
    assert default_epochs(_args(), _tasks(rows, labels=labels)) == epochs
    if epochs is not None:
        steps = -(-rows // 16)
        assert epochs * steps >= MIN_TRAIN_STEPS > (epochs - 1) * steps


def test_default_epochs_count_every_process_every_accumulation_and_every_task():
    assert default_epochs(_args(), _tasks(100, 71)) == 23  # one epoch is a pass over every task
    assert default_epochs(_args(), _tasks(100, 2000)) is None  # one task has many examples per label
    assert default_epochs(_args(world_size=2), _tasks(342)) == 23  # 32 rows a step
    assert default_epochs(_args(gradient_accumulation_steps=2), _tasks(342)) == 23
    assert default_epochs(_args(epochs_chosen=True), _tasks(10)) is None
    assert default_epochs(_args(max_steps=100), _tasks(10)) is None
    assert default_epochs(_args(do_train=False), _tasks(10)) is None


def test_default_learning_rate_for_few_examples_per_label():
    assert default_learning_rate(_args(), _tasks(896)) == FEW_EXAMPLES_LEARNING_RATE == 1e-4  # 32 per label
    assert default_learning_rate(_args(), _tasks(1008)) is None  # 36 per label: LEARNING_RATE stands
    assert default_learning_rate(_args(learning_rate_chosen=True), _tasks(224)) is None
    assert default_learning_rate(_args(do_train=False), _tasks(224)) is None


def test_a_run_without_a_learning_rate_gets_the_few_example_one(tiny_backbone_path, tmp_path):
    flags = _without(NO_EPOCHS, "--learning_rate")
    data = write_rows(tmp_path / "train.jsonl", topic_rows(40))
    result = run(
        ["--model_name_or_path", tiny_backbone_path, "--output_dir", str(tmp_path / "out"), *flags]
        + ["--train_file", str(data), "--do_train", "--pooling", "mean", "--max_steps", "2"]
    )
    settings = json.loads((result.output_dir / "training_args.json").read_text())
    assert settings["learning_rate"] == FEW_EXAMPLES_LEARNING_RATE != LEARNING_RATE


@pytest.mark.parametrize(
    ("rows", "changes", "settings", "pooling"),
    [
        (224, {}, {}, "label_text"),  # 8 per label
        (896, {}, {}, "label_text"),  # 32 per label
        (1008, {}, {}, None),  # 36 per label: mean pooling stays
        (224, {"problem_type": "multi_label_classification"}, {}, None),
        (224, {"names": [str(i) for i in range(28)]}, {}, None),  # labels without words to read
        (224, {}, {"position_ids_from_mask": False}, None),  # a setting label text cannot take
    ],
)
def test_default_pooling_reads_the_labels_of_few_single_label_examples(rows, changes, settings, pooling):
    from helpers import tiny_backbone_config

    (task,) = _tasks(rows, **changes).values()
    given = dict(settings)
    default_pooling(settings, task, tiny_backbone_config("bert"))
    assert settings.get("pooling") == pooling
    if pooling:
        assert settings == {**given, "pooling": "label_text", "label_text_scorer": "per_label"}
    else:
        assert settings == given
    chosen = {"pooling": "mean"}
    default_pooling(chosen, task, tiny_backbone_config("bert"))
    assert chosen == {"pooling": "mean"}


def test_a_few_example_run_reads_its_labels_unless_told(tiny_backbone_path, tmp_path):
    # One epoch: the number of epochs does not enter the choice of pooling (few_examples.default_pooling), and the
    # default 32 epochs are trained by test_a_small_training_set_trains_for_enough_steps.
    plan, folder = run_without_epochs(
        tiny_backbone_path, tmp_path / "default", topic_rows(40), "--num_train_epochs", "1"
    )
    config = json.loads((folder / "config.json").read_text())
    assert (config["pooling"], config["label_text_scorer"]) == ("label_text", "per_label")
    plan, folder = run_without_epochs(
        tiny_backbone_path, tmp_path / "mean", topic_rows(40), "--pooling", "mean", "--num_train_epochs", "1"
    )
    assert json.loads((folder / "config.json").read_text())["pooling"] == "mean"


def test_an_untuned_asymmetric_head_decides_at_0_7(tiny_backbone_path, tmp_path):
    plan, folder = run_without_epochs(tiny_backbone_path, tmp_path, multi_label_rows(24))
    config = json.loads((folder / "config.json").read_text())
    assert config["multi_label_loss"] == "asymmetric"
    assert config["decision_threshold"] == ASYMMETRIC_UNTUNED_THRESHOLD == 0.7
    (task,) = plan.tasks.values()
    assert task.thresholds.origin == "asymmetric default"
    assert "train.py's default for the asymmetric loss" in (folder / "README.md").read_text()


@pytest.mark.parametrize(
    ("flags", "threshold"),
    [
        (("--multi_label_loss", "bce"), None),  # a calibrated loss keeps the model's 0.5
        (("--decision_threshold", "0.4"), 0.4),  # the user's threshold stands
        (("--validation_split", "train", "--do_eval"), "tuned"),
    ],
)
def test_the_untuned_threshold_only_where_nothing_else_decides(
    tiny_backbone_path, tmp_path, flags, threshold
):
    rows = multi_label_rows(24)
    if "--validation_split" in flags:
        flags = ("--validation_file", str(write_rows(tmp_path / "validation.jsonl", rows)), "--do_eval")
    plan, folder = run_without_epochs(tiny_backbone_path, tmp_path, rows, "--num_train_epochs", "1", *flags)
    config = json.loads((folder / "config.json").read_text())
    (task,) = plan.tasks.values()
    if "--multi_label_loss" in flags:  # given, it is chosen though it equals PooledConfig's default
        assert config["multi_label_loss"] == "bce"
    if threshold == "tuned":
        assert task.thresholds.origin == "tuned"
    else:
        assert config.get("decision_threshold") == threshold
        assert task.thresholds.origin != "asymmetric default"


def test_a_setting_that_rules_label_text_out_keeps_mean_pooling_and_says_why(caplog):
    from helpers import tiny_backbone_config

    (task,) = _tasks(224).values()
    settings = {"position_ids_from_mask": False}
    with caplog.at_level(logging.INFO, logger="pooled_models.train"):
        default_pooling(settings, task, tiny_backbone_config("bert"))
    assert settings == {"position_ids_from_mask": False}
    (line,) = [record.getMessage() for record in caplog.records if record.getMessage().startswith("Pooling:")]
    assert line.startswith("Pooling: mean (label text, the default for few examples per label, cannot: ")
    assert "position_ids_from_mask=True" in line  # the config's own reason, naming the setting


def test_the_few_example_default_says_it_reads_the_labels(caplog):
    from helpers import tiny_backbone_config

    (task,) = _tasks(224).values()
    with caplog.at_level(logging.INFO, logger="pooled_models.train"):
        default_pooling({}, task, tiny_backbone_config("bert"))
    (line,) = [record.getMessage() for record in caplog.records if record.getMessage().startswith("Pooling:")]
    assert line.startswith("Pooling: label_text with the per_label scorer")
