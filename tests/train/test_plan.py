"""Settings resolved once: a run works out its plan (the backbone, the saved config, the data-derived defaults, the
staging folder, the best-model metric) before it builds a model, and neither the plan nor the arguments it was made
from change afterwards."""

import copy
import dataclasses
import json

import pytest
from helpers import multi_label_rows, train, write_rows

import pooled_models.train.cli as cli
import pooled_models.train.pipeline as pipeline

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def snapshot(arguments) -> list:
    model_args, data_args, training_args = arguments
    return [dataclasses.asdict(model_args), dataclasses.asdict(data_args), training_args.to_dict()]


@pytest.fixture(scope="module")
def watched_run(tiny_backbone_path, tmp_path_factory):
    """A multi-label run whose settings the pipeline used to write back into its arguments: pos_weight auto, the
    multi-label loss, label-token layers and attention, the staging folder, the best-model metric."""
    tmp_path = tmp_path_factory.mktemp("watched")
    rows = write_rows(tmp_path / "rows.jsonl", multi_label_rows(24))
    seen = {}
    with pytest.MonkeyPatch.context() as patch:
        parse, make_plan = cli.parse_arguments, pipeline.make_plan

        def parse_and_remember(argv):
            seen["arguments"] = parse(argv)
            seen["before"] = copy.deepcopy(snapshot(seen["arguments"]))
            return seen["arguments"]

        def plan_and_remember(*args, **kwargs):
            seen["plan"] = make_plan(*args, **kwargs)
            return seen["plan"]

        patch.setattr(cli, "parse_arguments", parse_and_remember)
        patch.setattr(pipeline, "make_plan", plan_and_remember)
        seen["result"] = train(
            tiny_backbone_path,
            tmp_path / "out",
            *("--train_file", str(rows), "--validation_file", str(rows)),
            *("--do_train", "--do_eval", "--num_train_epochs", "1", "--load_best_model_at_end"),
            *("--pooling", "label_tokens", "--pos_weight", "auto"),
        )
    return seen


def test_a_run_writes_into_none_of_its_arguments(watched_run):
    assert snapshot(watched_run["arguments"]) == watched_run["before"]
    model_args, _, training_args = watched_run["arguments"]
    assert model_args.pos_weight == "auto" and model_args.multi_label_loss is None
    assert training_args.metric_for_best_model == "loss"  # TrainingArguments' own, unchosen
    assert not training_args.output_dir.endswith(".incomplete")


def test_the_plan_holds_what_the_run_worked_out(watched_run):
    plan, result = watched_run["plan"], watched_run["result"]
    (task,) = plan.tasks.values()
    saved = json.loads((result.output_dir / "config.json").read_text())
    assert list(task.settings["pos_weight"]) == pytest.approx(saved["pos_weight"])
    assert task.settings["multi_label_loss"] == saved["multi_label_loss"] == "asymmetric"
    assert task.settings["label_token_layers"] == saved["label_token_layers"] == 2
    assert task.pos_weight_origin == "computed" and task.thresholds.tunes
    assert plan.publishes == "sequence" and plan.single
    args = plan.trainer_args
    assert (args.metric_for_best_model, args.greater_is_better) == ("f1_micro", True)
    assert args.output_dir.endswith("out.incomplete") and not args.push_to_hub


def test_the_plan_cannot_be_written(watched_run):
    plan = watched_run["plan"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.publishes = "multitask"
    (task,) = plan.tasks.values()
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.thresholds = None
    with pytest.raises(TypeError):
        task.settings["pooling"] = "mean"
    with pytest.raises(TypeError):
        plan.tasks["another"] = task


def test_the_snapshot_sees_a_write(watched_run):
    # The control: a write into an argument shows in the snapshot the first test compares.
    arguments = copy.deepcopy(watched_run["arguments"])
    before = snapshot(arguments)
    arguments[0].multi_label_loss = "focal"
    assert snapshot(arguments) != before
