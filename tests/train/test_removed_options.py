"""The options removed in 0.3 (EMA, LP-FT, --pooling auto, multi-sample dropout, the shared label-token scorer, label
tokens after the text): train.py refuses each one by name, from the command line, a config file or a task, saying
what it measured and what to do instead; a saved model that records one of the three removed model settings still
loads, predicts and is evaluated by train.py; a checkpoint that an EMA run wrote still resumes."""

import json
import shutil

import pytest
import torch
from helpers import leftovers, topic_rows, train, write_rows
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

from pooled_models import PooledConfig, PooledForSequenceClassification
from pooled_models.errors import UsageError
from pooled_models.train.arguments import parse_arguments
from pooled_models.train.options import REMOVED_OPTIONS

# flag -> a value it took, and a figure its message must quote
REMOVED = {
    "ema_decay": ("0.99", "-1.2"),
    "linear_probe_epochs": ("1", "-0.4"),
    "auto_poolings": ("mean,lstm", "-1.1"),
    "auto_pooling_budget": ("0.25", "-1.1"),
    "classifier_dropout_samples": ("4", "-0.7"),
    "label_token_scorer": ("shared", "0.44"),
    "label_token_position": ("-1", "-2.7"),
}


def test_every_removed_option_is_tested():
    assert set(REMOVED) == set(REMOVED_OPTIONS)


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_a_removed_flag_is_refused_with_what_it_measured(name):
    value, figure = REMOVED[name]
    with pytest.raises(UsageError) as error:
        parse_arguments(["--output_dir", "out", f"--{name}", value])
    message = str(error.value)
    assert f"The command line sets {name!r}, which was removed in pooled_models 0.3" in message
    assert figure in message


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_a_removed_setting_in_a_config_file_is_refused(tmp_path, name):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"output_dir": "out", name: REMOVED[name][0]}))
    with pytest.raises(
        UsageError, match=rf"Config file {config} sets {name!r}, which was removed in pooled_models 0.3"
    ):
        parse_arguments([str(config)])


@pytest.mark.parametrize(
    "argv",
    [["--pooling", "auto"], ["--pooling=auto"]],
)
def test_pooling_auto_is_refused_with_the_sweep_as_the_way_instead(argv):
    with pytest.raises(
        UsageError, match=r"pooling 'auto', which was removed .* -1.1 .* 1.3x .* pooled-sweep"
    ):
        parse_arguments(["--output_dir", "out", *argv])


def test_pooling_auto_in_a_config_file_is_refused(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("output_dir: out\npooling: auto\n")
    with pytest.raises(UsageError, match=rf"Config file {config} sets pooling 'auto', which was removed"):
        parse_arguments([str(config)])


def test_a_task_setting_a_removed_option_is_refused_by_name(tiny_backbone_path, tmp_path):
    data = write_rows(tmp_path / "train.csv", topic_rows(8))
    config = tmp_path / "tasks.yaml"
    config.write_text(
        f"model_name_or_path: {tiny_backbone_path}\noutput_dir: {tmp_path / 'out'}\ndo_train: true\n"
        f"tasks:\n  topic:\n    kind: sequence\n    train_file: {data}\n    classifier_dropout_samples: 4\n"
    )
    from pooled_models.train.cli import run

    with pytest.raises(
        UsageError, match=r"tasks\['topic'\] sets 'classifier_dropout_samples', which was removed"
    ):
        run([str(config)])
    assert leftovers(tmp_path / "out") == []


@pytest.mark.parametrize(
    "settings",
    [
        {"pooling": "mean", "classifier_dropout_samples": 4},
        {"pooling": "label_tokens", "label_token_scorer": "shared", "label_token_init": "random"},
        {"pooling": "label_tokens", "label_token_position": -1, "label_token_init": "random"},
    ],
    ids=["multi_sample_dropout", "shared_scorer", "label_tokens_after_text"],
)
def test_a_saved_model_recording_a_removed_setting_loads_predicts_and_evaluates(
    settings, tiny_backbone_path, tmp_path
):
    """The settings stay PooledConfig fields: the saved model loads with them, and train.py evaluates it."""
    torch.manual_seed(0)
    config = PooledConfig(
        backbone_config=AutoConfig.from_pretrained(tiny_backbone_path),
        id2label={0: "sport", 1: "food"},
        **settings,
    )
    config.problem_type = "single_label_classification"  # as train.py saves it
    model = PooledForSequenceClassification(config).eval()
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(folder)
    loaded = AutoModelForSequenceClassification.from_pretrained(folder)
    for name, value in settings.items():
        assert getattr(loaded.config, name) == value
    batch = {"input_ids": torch.tensor([[2, 7, 9, 3]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    with torch.no_grad():
        assert torch.allclose(loaded.eval()(**batch).logits, model.eval()(**batch).logits)
    rows = topic_rows(8, topics=("sport", "food"))
    validation = write_rows(tmp_path / "validation.csv", rows)
    result = train(str(folder), tmp_path / "out", "--validation_file", str(validation), "--do_eval")
    assert 0.0 <= result.metrics["eval_accuracy"] <= 1.0
    assert not (result.output_dir / "config.json").exists()  # only evaluated: the model stays where it is


def test_a_checkpoint_an_ema_run_wrote_still_resumes(tiny_backbone_path, tmp_path):
    """0.2's --ema_decay kept ema.safetensors in each checkpoint: a run resumed from one ignores the file, and ends
    with the weights of the run that never stopped."""
    data = write_rows(tmp_path / "train.csv", topic_rows(16))
    flags = [
        "--train_file",
        str(data),
        "--do_train",
        "--per_device_train_batch_size",
        "8",
        "--num_train_epochs",
        "2",
    ]
    flags += ["--save_strategy", "epoch", "--keep_checkpoints"]
    reference = train(tiny_backbone_path, tmp_path / "reference", *flags)
    checkpoint = tmp_path / "checkpoint-2"
    shutil.copytree(reference.output_dir / "checkpoint-2", checkpoint)
    weights = load_file(checkpoint / "model.safetensors")
    save_file({name: tensor * 0 for name, tensor in weights.items()}, checkpoint / "ema.safetensors")
    resumed = train(
        tiny_backbone_path, tmp_path / "resumed", *flags, "--resume_from_checkpoint", str(checkpoint)
    )
    expected = load_file(reference.output_dir / "model.safetensors")
    got = load_file(resumed.output_dir / "model.safetensors")
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[name], got[name]) for name in expected)
