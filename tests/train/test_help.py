"""--help documents every flag of train.py and sweep.py, every PooledConfig setting among them."""

import pytest

from pooled_models.sweep.command_line import _parser as sweep_parser
from pooled_models.train.arguments import parser as _parser
from pooled_models.train.arguments import pooled_config_fields


def test_every_pooled_config_setting_is_a_flag_with_help():
    helps = {action.dest: action.help for action in _parser()._actions}
    assert [item.name for item in pooled_config_fields() if len(helps.get(item.name) or "") <= 20] == []


@pytest.mark.parametrize("parser", [_parser, sweep_parser], ids=["train", "sweep"])
def test_every_flag_has_help(parser):
    undocumented = [
        action.option_strings[0]
        for action in parser()._actions
        if action.option_strings and not (action.help and action.help.strip())
    ]
    assert undocumented == []


def test_help_lists_the_label_token_settings_with_their_meaning(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in (
        "--label_token_init",
        "--label_token_init_ids",
        "--label_tokens_per_pass",
        "--label_token_layers",
    ):
        assert flag in text
    assert "`label_tokens` only. Where each label's learned token starts" in text
    # Removed in 0.3 (tests/train/test_removed_options.py): config fields still, flags no more.
    for flag in ("--label_token_scorer", "--label_token_position", "--classifier_dropout_samples"):
        assert flag not in text
    assert "A PooledConfig setting." not in text


@pytest.mark.parametrize(
    "invoked, advice",
    [
        ("/venv/bin/pooled-train", "Run pooled-train --help for the list."),
        ("train.py", "Run python train.py --help for the list."),
    ],
)
def test_an_unknown_argument_points_to_the_help_of_the_command_the_user_ran_and_it_lists_the_settings(
    invoked, advice, monkeypatch, tmp_path, capsys
):
    from pooled_models.train.cli import main

    monkeypatch.setattr("sys.argv", [invoked])
    config = tmp_path / "run.yaml"
    config.write_text("output_dir: out\nlearning_rat: 0.001\n")
    assert main([str(config)]) == 2
    error = capsys.readouterr().err
    assert "unknown settings: learning_rat (did you mean learning_rate or" in error and advice in error
    assert main(["--output_dir", "out", "--no_such_flag", "1"]) == 2
    assert advice in capsys.readouterr().err
    with pytest.raises(SystemExit) as finished:  # the advice: the command with --help
        main(advice.removeprefix("Run ").removesuffix(" for the list.").split()[-1:])
    assert finished.value.code == 0 and "--learning_rate" in capsys.readouterr().out


def test_the_help_states_the_few_examples_default_the_code_applies():
    """Issue 42: --help for --pooling said label text applies at "at most 64 rows per label"; the code used 32."""
    from pooled_models.train.arguments.defaults import FEW_EXAMPLES_PER_LABEL, FEW_EXAMPLES_POOLING

    helps = {action.dest: " ".join((action.help or "").split()) for action in _parser()._actions}
    threshold = f"at most {FEW_EXAMPLES_PER_LABEL} rows per label"
    assert threshold in helps["pooling"] and threshold in helps["learning_rate"]
    assert threshold in helps["num_train_epochs"]
    scorer = f"{FEW_EXAMPLES_POOLING['pooling']} ({FEW_EXAMPLES_POOLING['label_text_scorer']} scorer)"
    assert scorer in helps["pooling"]


def test_the_help_states_train_pys_other_defaults_from_the_constants_the_code_applies():
    from pooled_models.train.arguments.defaults import (
        ASYMMETRIC_UNTUNED_THRESHOLD,
        LABEL_TOKEN_LAYERS_DEFAULT,
        MULTI_LABEL_DEFAULT_LOSS,
    )

    helps = {action.dest: " ".join((action.help or "").split()) for action in _parser()._actions}
    assert f"train.py's default: {LABEL_TOKEN_LAYERS_DEFAULT} where" in helps["label_token_layers"]
    assert f"train.py's default: {MULTI_LABEL_DEFAULT_LOSS!r}" in helps["multi_label_loss"]
    assert f"with {ASYMMETRIC_UNTUNED_THRESHOLD} for a new asymmetric-loss head" in helps["tune_thresholds"]


def test_a_parts_setting_states_the_default_its_part_fills_in():
    """Where a pooling's, a head's or a loss's setting says "Defaults to X", X is the registered part's default."""
    from pooled_models.train.arguments.defaults import defaults_to, part_default

    helps = {action.dest: " ".join((action.help or "").split()) for action in _parser()._actions}
    checked = []
    for item in pooled_config_fields():
        try:
            part_default(item.name)
        except KeyError:
            continue  # no constant default (the backbone's size, or none)
        if "Defaults to" not in helps[item.name]:
            continue  # a setting whose help gives train.py's own default (label_token_layers)
        assert helps[item.name].count("Defaults to") == 1, item.name
        assert helps[item.name].endswith(defaults_to(item.name)), item.name
        checked.append(item.name)
    assert {"gem_p", "focal_gamma", "asymmetric_clip", "label_text_scorer", "classifier_activation"} <= set(
        checked
    )


def test_a_misspelled_flag_gets_a_suggestion_as_a_misspelled_config_key_does():
    """Issue 42: a misspelled YAML key got "did you mean", the same misspelled flag only "Unknown arguments"."""
    from pooled_models.errors import UsageError
    from pooled_models.train.arguments import parse_arguments

    with pytest.raises(UsageError) as error:
        parse_arguments(
            ["--output_dir", "o", "--do_train", "--valdation_file", "v.csv", "--lerning_rate=1e-4"]
        )
    message = str(error.value)
    assert "--valdation_file (did you mean --validation_file" in message
    assert "--lerning_rate=1e-4 (did you mean --learning_rate" in message
    with pytest.raises(UsageError, match=r"Unknown arguments: --zzzz\. Run"):  # nothing close: no suggestion
        parse_arguments(["--output_dir", "o", "--zzzz"])
