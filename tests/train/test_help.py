"""--help documents every flag of train.py and sweep.py; every PooledConfig setting is documented once, in its
docstring, which is where train.py's help comes from."""

import pytest

from pooled_models import PooledConfig
from pooled_models.sweep.runner import _parser as sweep_parser
from pooled_models.train.cli import _documented_settings, _parser
from pooled_models.train.model import pooled_config_fields


def test_every_pooled_config_setting_is_documented():
    documented = _documented_settings(PooledConfig)
    fields = [field.name for field in pooled_config_fields()] + ["backbone_config"]
    assert [name for name in fields if name not in documented] == []
    assert all(len(documented[name]) > 20 for name in fields)


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
