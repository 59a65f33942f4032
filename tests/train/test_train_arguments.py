"""train.py's arguments: config files and flags, one argument for every PooledConfig setting (typed, with its help and
the config's default), refused code references."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from helpers import REPO
from transformers import BertConfig, GPT2Config

from pooled_models.errors import UsageError
from pooled_models.train.arguments import (
    TRAIN_PY_DEFAULTS,
    ModelArguments,
    chosen_model_settings,
    parse_arguments,
    pooled_config_fields,
)
from pooled_models.train.arguments.model import config_default
from pooled_models.train.plan import default_label_token_settings

SETTINGS = {
    "model_name_or_path": "some/backbone",
    "pooling": "attention",
    "attention_heads": 2,
    "classifier_head": "dense",
    "train_file": "train.csv",
    "label_column": "topic",
    "output_dir": "out",
    "do_train": True,
    "learning_rate": 3e-5,
    "example_texts": ["one", "two"],
}


def write_config(folder: Path, suffix: str, values: dict) -> Path:
    path = folder / f"run{suffix}"
    path.write_text(json.dumps(values) if suffix == ".json" else yaml.safe_dump(values))
    return path


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_config_files_give_the_same_arguments_as_flags(tmp_path, suffix):
    from_file = parse_arguments([str(write_config(tmp_path, suffix, SETTINGS))])
    flags = []
    for key, value in SETTINGS.items():
        flags += [f"--{key}", *(value if isinstance(value, list) else [str(value)])]
    from_flags = parse_arguments(flags)
    assert from_file[0] == from_flags[0]
    assert from_file[1] == from_flags[1]
    assert from_file[2].to_dict() == from_flags[2].to_dict()
    model_args, data_args, training_args = from_file
    assert (model_args.pooling, model_args.attention_heads, model_args.classifier_head) == (
        "attention",
        2,
        "dense",
    )
    assert data_args.label_column == "topic" and data_args.example_texts == ["one", "two"]
    assert training_args.learning_rate == 3e-5 and training_args.do_train


def test_flags_after_the_config_file_override_it(tmp_path):
    config = write_config(tmp_path, ".yaml", SETTINGS)
    model_args, data_args, training_args = parse_arguments(
        [str(config), "--pooling", "max", "--learning_rate", "1e-4", "--label_column", "label"]
    )
    assert model_args.pooling == "max" and model_args.classifier_head == "dense"
    assert training_args.learning_rate == 1e-4
    assert data_args.label_column == "label" and data_args.train_file == "train.csv"


@pytest.mark.parametrize("config", sorted((REPO / "configs").glob("*.*")), ids=lambda path: path.name)
def test_every_shipped_config_parses(config):
    model_args, data_args, training_args = parse_arguments([str(config)])
    assert model_args.model_name_or_path
    # A multi-task config names each task's data in its tasks; the others name one dataset.
    tasks = getattr(data_args, "tasks", None)
    assert (
        data_args.dataset_name
        or data_args.train_file
        or (tasks and all(t.get("train_file") for t in tasks.values()))
    )
    assert training_args.output_dir


def test_every_pooled_config_setting_is_an_argument():
    argument_names = {item.name for item in dataclasses.fields(ModelArguments)}
    config_names = {item.name for item in pooled_config_fields()}
    assert config_names <= argument_names
    assert "backbone_config" not in argument_names and "id2label" not in argument_names
    assert {
        "pooling",
        "layer_start",
        "attention_heads",
        "gem_p",
        "classifier_head",
        "position_ids_from_mask",
    } <= config_names


def test_every_model_argument_has_the_configs_default_or_train_pys_and_help():
    arguments = {item.name: item for item in dataclasses.fields(ModelArguments)}
    for config_field in pooled_config_fields():
        argument = arguments[config_field.name]
        expected = TRAIN_PY_DEFAULTS.get(config_field.name, config_default(config_field))
        assert argument.default == expected, config_field.name
        assert len(argument.metadata["help"]) > 20, config_field.name
    # train.py's own defaults are the ones the help names as train.py's
    for name in TRAIN_PY_DEFAULTS:
        assert "train.py's default" in arguments[name].metadata["help"]


def test_a_model_argument_is_typed_as_the_flag_gives_it(tmp_path):
    flags = ["--output_dir", "o", "--gem_p", "2.5", "--attention_heads", "3", "--packed_batches", "true"]
    flags += ["--decision_threshold", "[0.3, 0.6]", "--label_token_init_ids", "[[1, 2], [3]]"]
    model_args, _, _ = parse_arguments(flags)
    assert (model_args.gem_p, model_args.attention_heads, model_args.packed_batches) == (2.5, 3, True)
    assert model_args.decision_threshold == [0.3, 0.6]
    assert model_args.label_token_init_ids == [[1, 2], [3]]


def test_only_the_settings_the_user_changed_reach_the_config():
    model_args, _, _ = parse_arguments(["--pooling", "gem", "--gem_p", "2.0", "--output_dir", "out"])
    assert chosen_model_settings(model_args) == {"pooling": "gem", "gem_p": 2.0}


@pytest.mark.parametrize("given, expected", [("2", 2), ("all", "all")])
def test_label_token_layers_reaches_the_config_as_a_number_or_all(tmp_path, given, expected):
    flags = ["--pooling", "label_tokens", "--label_token_layers", given, "--output_dir", "out"]
    model_args, _, _ = parse_arguments(flags)
    assert chosen_model_settings(model_args) == {"pooling": "label_tokens", "label_token_layers": expected}
    config = write_config(
        tmp_path, ".yaml", {"pooling": "label_tokens", "label_token_layers": expected, "output_dir": "out"}
    )
    assert chosen_model_settings(parse_arguments([str(config)])[0])["label_token_layers"] == expected


@pytest.mark.parametrize("key", ["trust_remote_code", "auto_map", "custom_pipelines"])
def test_a_config_file_naming_code_is_refused(tmp_path, key):
    config = write_config(tmp_path, ".yaml", {**SETTINGS, key: True})
    with pytest.raises(UsageError, match=f"sets '{key}', which is refused"):
        parse_arguments([str(config)])


def test_trust_remote_code_on_the_command_line_is_refused():
    with pytest.raises(UsageError, match="trust_remote_code"):
        parse_arguments(["--model_name_or_path", "x", "--output_dir", "o", "--trust_remote_code", "true"])


def test_unknown_config_keys_are_named_with_a_suggestion(tmp_path):
    config = write_config(tmp_path, ".yaml", {**SETTINGS, "pooling_type": "mean", "learnin_rate": 1e-4})
    with pytest.raises(UsageError) as error:
        parse_arguments([str(config)])
    assert "pooling_type" in str(error.value) and "did you mean learning_rate" in str(error.value)


def test_unreadable_config_files_are_reported(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("pooling: [mean\n")
    with pytest.raises(UsageError, match="broken.yaml is not valid YAML"):
        parse_arguments([str(broken)])
    with pytest.raises(UsageError, match="Cannot read config file"):
        parse_arguments([str(tmp_path / "missing.yaml")])
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(UsageError, match="must hold a mapping"):
        parse_arguments([str(listed)])


def test_training_defaults_follow_the_validation_data():
    _, _, evaluating = parse_arguments(["--output_dir", "o", "--do_train", "--do_eval"])
    assert (evaluating.eval_strategy, evaluating.save_strategy) == ("epoch", "epoch")
    _, _, training_only = parse_arguments(["--output_dir", "o", "--do_train"])
    assert (training_only.eval_strategy, training_only.save_strategy, training_only.do_eval) == (
        "no",
        "epoch",
        False,
    )
    _, _, early = parse_arguments(
        ["--output_dir", "o", "--do_train", "--do_eval", "--early_stopping_patience", "2"]
    )
    assert early.load_best_model_at_end and not early.best_metric_chosen


def test_output_dir_is_required():
    with pytest.raises(UsageError, match="output_dir is required"):
        parse_arguments(["--model_name_or_path", "x"])


def test_inconsistent_training_settings_are_usage_errors():
    with pytest.raises(UsageError, match="save and eval strategy to match"):
        parse_arguments(
            [
                "--output_dir",
                "o",
                "--do_train",
                "--do_eval",
                "--early_stopping_patience",
                "2",
                "--save_strategy",
                "steps",
            ]
        )


@pytest.mark.parametrize(
    "flags, expected",
    [
        ([], None),
        (["--pos_weight", "auto"], "auto"),
        (["--pos_weight", "1", "4.5"], [1.0, 4.5]),
        (["--pos_weight", "[1, 4.5]"], [1.0, 4.5]),
    ],
)
def test_pos_weight_is_auto_or_one_number_per_label(flags, expected):
    model_args, _, _ = parse_arguments(["--output_dir", "o", *flags])
    assert model_args.pos_weight == expected


def test_pos_weight_from_a_config_file_and_its_errors(tmp_path):
    for value, expected in (("auto", "auto"), ([1, 2], [1.0, 2.0])):
        model_args, _, _ = parse_arguments(
            [str(write_config(tmp_path, ".yaml", {"output_dir": "o", "pos_weight": value}))]
        )
        assert model_args.pos_weight == expected
    for flags in (["--pos_weight", "often"], ["--pos_weight", "1", "auto"], ["--pos_weight", '[1, "a"]']):
        with pytest.raises(UsageError, match="pos_weight must be 'auto' .* or one number per label"):
            parse_arguments(["--output_dir", "o", *flags])


def test_threshold_tuning_settings_default_and_are_checked_in_config_files(tmp_path):
    _, _, training_args = parse_arguments(["--output_dir", "o"])
    assert (training_args.tune_thresholds, training_args.threshold_average) == ("auto", "micro")
    for key, value in (("tune_thresholds", "both"), ("threshold_average", "weighted")):
        config = write_config(tmp_path, ".yaml", {"output_dir": "o", key: value})
        with pytest.raises(UsageError, match=f"Unknown {key} '{value}'. Valid choices"):
            parse_arguments([str(config)])


@pytest.mark.parametrize(
    "backbone_config, given, expected",
    [
        (BertConfig(num_hidden_layers=6), None, 2),  # train.py's default: the top 2 layers
        (BertConfig(num_hidden_layers=1), None, 1),  # never more layers than the backbone has
        (BertConfig(num_hidden_layers=6), "all", "all"),  # what the user gave wins
        (BertConfig(num_hidden_layers=6), 4, 4),
        (GPT2Config(n_layer=6), None, None),  # a decoder runs label tokens in every layer only: left unset
        (BertConfig(num_hidden_layers=6, is_decoder=True), None, None),
    ],
)
def test_train_py_puts_label_tokens_in_the_top_two_layers_where_the_backbone_can(
    backbone_config, given, expected
):
    flags = ["--pooling", "label_tokens", "--output_dir", "out"]
    flags += ["--label_token_layers", str(given)] if given is not None else []
    settings = chosen_model_settings(parse_arguments(flags)[0])
    default_label_token_settings(settings, backbone_config)
    assert settings.get("label_token_layers") == expected


@pytest.mark.parametrize(
    "backbone_config, flags, expected",
    [
        (
            BertConfig(num_hidden_layers=6),
            [],
            "one_way",
        ),  # train.py's default where the layers run one by one
        (
            BertConfig(num_hidden_layers=6),
            ["--label_token_layers", "all"],
            "one_way",
        ),  # every layer, still one-way
        (
            BertConfig(num_hidden_layers=6),
            ["--label_token_attention", "two_way"],
            "two_way",
        ),  # the user's wins
        (GPT2Config(n_layer=6), [], None),  # a decoder: left unset (PooledConfig's two-way)
        (BertConfig(num_hidden_layers=6, is_decoder=True), [], None),
    ],
)
def test_train_py_makes_label_token_attention_one_way_where_the_backbone_can(
    backbone_config, flags, expected
):
    settings = chosen_model_settings(
        parse_arguments(["--pooling", "label_tokens", "--output_dir", "out", *flags])[0]
    )
    default_label_token_settings(settings, backbone_config)
    assert settings.get("label_token_attention") == expected


def test_the_label_token_layers_default_leaves_other_poolings_alone():
    settings = chosen_model_settings(parse_arguments(["--pooling", "mean", "--output_dir", "out"])[0])
    default_label_token_settings(settings, BertConfig(num_hidden_layers=6))
    assert "label_token_layers" not in settings and "label_token_attention" not in settings
