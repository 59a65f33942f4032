"""PooledConfig: validation with clear errors, defaults filled in, exact JSON round trip, no code references."""

import dataclasses
import json

import pytest
from helpers import TINY_BACKBONES, tiny_backbone_config
from huggingface_hub.errors import StrictDataclassFieldValidationError
from transformers import AutoConfig, BertConfig, PreTrainedConfig

from pooled_models import POOLERS, PooledConfig, PooledMultiTaskConfig


def config(**settings):
    settings.setdefault("backbone_config", tiny_backbone_config("bert"))
    return PooledConfig(**settings)


# Settings a pooling cannot do without when built from a bare config (from_backbone fills them in).
REQUIRED_SETTINGS = {"label_tokens": {"label_token_init_ids": [[5], [6, 7], [8]]}}


@pytest.mark.parametrize("pooling", sorted(POOLERS))
def test_json_round_trip_is_exact(pooling, tmp_path):
    original = config(
        pooling=pooling,
        num_labels=3,
        classifier_head="dense",
        problem_type="multi_label_classification",
        **REQUIRED_SETTINGS.get(pooling, {}),
    )
    assert PooledConfig.from_dict(original.to_dict()).to_dict() == original.to_dict()
    original.save_pretrained(tmp_path / "first")
    reloaded = AutoConfig.from_pretrained(tmp_path / "first")
    assert isinstance(reloaded, PooledConfig)
    reloaded.save_pretrained(tmp_path / "second")
    first, second = ((tmp_path / name / "config.json").read_text() for name in ("first", "second"))
    assert first == second
    assert json.loads(first)["pooling"] == pooling


@pytest.mark.parametrize("backbone", sorted(TINY_BACKBONES))
def test_nested_backbone_config_keeps_its_model_type(backbone, tmp_path):
    original = config(backbone_config=tiny_backbone_config(backbone))
    original.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "pooled"
    assert saved["backbone_config"]["model_type"] == tiny_backbone_config(backbone).model_type
    reloaded = PooledConfig.from_pretrained(tmp_path)
    assert type(reloaded.backbone_config) is type(tiny_backbone_config(backbone))
    assert reloaded.backbone_config.to_dict() == original.backbone_config.to_dict()


def test_backbone_config_given_as_dict():
    as_dict = tiny_backbone_config("roberta").to_dict()
    built = config(backbone_config=as_dict)
    assert built.backbone_config.model_type == "roberta"
    assert built.backbone_config.hidden_size == 32


def test_code_references_are_removed_from_the_backbone_config(tmp_path):
    backbone = tiny_backbone_config("bert").to_dict()
    backbone["auto_map"] = {"AutoModel": "evil.EvilModel"}
    backbone["trust_remote_code"] = True
    backbone["custom_pipelines"] = {"x": {"impl": "evil.Pipeline"}}
    built = config(backbone_config=backbone)
    for key in ("auto_map", "trust_remote_code", "custom_pipelines"):
        assert not hasattr(built.backbone_config, key)
    built.save_pretrained(tmp_path)
    saved_backbone = json.loads((tmp_path / "config.json").read_text())["backbone_config"]
    assert not {"auto_map", "trust_remote_code", "custom_pipelines"} & set(saved_backbone)


def test_where_the_backbone_was_loaded_from_stays_off_disk(tmp_path):
    built = config()
    loaded_from = "/home/someone/models/bert"
    built.backbone_config.name_or_path = loaded_from  # as from_pretrained leaves a loaded backbone's
    built.save_pretrained(tmp_path)
    saved_backbone = json.loads((tmp_path / "config.json").read_text())["backbone_config"]
    # Blank (or left out, as transformers before 5.20 saves sub-configs), as transformers saves a backbone sub-config
    # built in place (UperNetConfig().backbone_config's).
    assert saved_backbone.get("_name_or_path", "") == ""
    assert loaded_from not in (tmp_path / "config.json").read_text()
    assert built.backbone_config.name_or_path == loaded_from  # encode finds the tokenizer there


def test_backbone_model_type_must_be_built_into_transformers():
    with pytest.raises(ValueError, match="not a model type built into transformers.*Valid choices: .*bert"):
        config(backbone_config={"model_type": "my_remote_model", "hidden_size": 8})
    with pytest.raises(ValueError, match="itself a pooled config"):
        config(backbone_config=config().to_dict())


def test_default_backbone_is_bert_base():
    assert PooledConfig().backbone_config.model_type == "bert"


# A name no registry holds, or a value outside a closed choice: refused as it is set, at construction or by assignment
# (@strict runs the field's check on every assignment, as for a built-in config's Literal fields), naming the choices.
UNKNOWN_NAMES = [
    ("pooling", "average", r"Unknown pooling 'average'\. Valid choices: .*cls_mean_max.*weighted_layer"),
    ("classifier_head", "mlp", r"Unknown classifier_head 'mlp'\. Valid choices: dense, linear"),
    (
        "multi_label_loss",
        "hinge",
        r"Unknown multi_label_loss 'hinge'\. Valid choices: asymmetric, bce, focal",
    ),
    (
        "label_token_init",
        "zeros",
        r"Unknown label_token_init 'zeros'\. Valid choices: cls, label_text, random",
    ),
    ("label_token_scorer", "mlp", r"expected one of \('per_label', 'shared'\), got mlp"),
    ("label_token_attention", "both", r"expected one of \('two_way', 'one_way'\), got both"),
]


@pytest.mark.parametrize("name, value, message", UNKNOWN_NAMES, ids=[name for name, *_ in UNKNOWN_NAMES])
def test_an_unknown_name_is_refused_when_set_naming_the_choices(name, value, message):
    with pytest.raises(StrictDataclassFieldValidationError, match=rf"field '{name}'(.|\n)*{message}"):
        config(**{name: value})
    built = config()
    with pytest.raises(StrictDataclassFieldValidationError, match=message):
        setattr(built, name, value)
    assert getattr(built, name) != value


@pytest.mark.parametrize(
    "name, value",
    [
        ("attention_heads", "2"),
        ("gem_p", "3"),
        ("packed_batches", 1),
        ("pos_weight", [1.0, "2"]),
        ("layer_start", 1.0),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_when_set(name, value):
    with pytest.raises(StrictDataclassFieldValidationError, match=rf"field '{name}'"):
        config(**{name: value})


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"pooling": "mean", "lstm_hidden_size": 8},
            r"lstm_hidden_size=8 does not apply to pooling='mean'; it is a setting of pooling='lstm'\.",
        ),
        ({"pooling": "cls", "layer_start": 1}, r"layer_start=1 does not apply to pooling='cls'.*none"),
        (
            {"pooling": "concat_layers", "gem_p": 2.0},
            r"gem_p=2.0 does not apply.*layer_start, layer_token_pooling",
        ),
        ({"pooling": "lstm", "attention_heads": 2}, r"attention_heads=2 does not apply"),
        (
            {"classifier_head": "linear", "classifier_hidden_size": 8},
            r"classifier_hidden_size=8 does not apply",
        ),
        (
            {"classifier_head": "linear", "classifier_activation": "gelu"},
            r"classifier_activation='gelu' does not apply",
        ),
    ],
)
def test_settings_that_do_not_apply_are_rejected(settings, message):
    with pytest.raises(ValueError, match=message):
        config(**settings)


@pytest.mark.parametrize("pooling", ["concat_layers", "weighted_layer", "lstm"])
@pytest.mark.parametrize("layer_start", [3, -4, 10])
def test_layer_index_the_backbone_does_not_have(pooling, layer_start):
    # the tiny BERT has 2 layers: hidden_states 0 (embeddings), 1, 2
    with pytest.raises(
        ValueError, match=rf"layer_start={layer_start} is not a layer.*2 layers.*Valid choices: -3 to 2"
    ):
        config(pooling=pooling, layer_start=layer_start)


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"pooling": "concat_layers", "layer_token_pooling": "lstm"},
            r"layer_token_pooling must be a token pooling.*Valid choices: attention, cls",
        ),
        ({"pooling": "attention", "attention_heads": 0}, r"attention_heads must be an integer >= 1"),
        ({"pooling": "gem", "gem_p": 0.5}, r"gem_p must be a number >= 1"),
        ({"pooling": "lstm", "lstm_hidden_size": -1}, r"lstm_hidden_size must be an integer >= 1"),
        (
            {"classifier_head": "dense", "classifier_activation": "swishy"},
            r"Unknown classifier_activation 'swishy'\. Valid choices: .*gelu.*tanh",
        ),
        ({"classifier_dropout": 1.5}, r"classifier_dropout must be a number in \[0, 1\)"),
        ({"problem_type": "single_label_classification", "num_labels": 1}, r"requires `num_labels > 1`"),
    ],
)
def test_bad_values_are_rejected(settings, message):
    with pytest.raises(ValueError, match=message):
        config(**settings)


def test_defaults_are_filled_in_for_the_chosen_pooling_and_head():
    built = config(pooling="concat_layers", classifier_head="dense")
    assert built.layer_start == -2  # "last 4 layers", capped at the 2 layers the tiny backbone has
    assert built.layer_token_pooling == "cls"
    assert built.classifier_hidden_size == 32 and built.classifier_activation == "tanh"
    assert built.lstm_hidden_size is None and built.gem_p is None  # settings of other poolings stay unset
    deep = config(pooling="concat_layers", backbone_config=BertConfig(num_hidden_layers=12))
    assert deep.layer_start == -4
    assert config(pooling="weighted_layer").layer_start == 1
    assert config(pooling="lstm").lstm_hidden_size == 32
    attention = config(pooling="concat_layers", layer_token_pooling="attention")
    assert attention.attention_heads == 1 and attention.attention_hidden_size == 32


def test_dropout_defaults_to_the_backbones():
    assert config(backbone_config=BertConfig(hidden_dropout_prob=0.3)).classifier_dropout == 0.3
    assert config(backbone_config=BertConfig(classifier_dropout=0.2)).classifier_dropout == 0.2


def test_label_maps():
    built = config(id2label={0: "neg", 1: "pos"})
    assert built.num_labels == 2 and built.label2id == {"neg": 0, "pos": 1}
    assert config(num_labels=5).num_labels == 5


@pytest.mark.parametrize("config_class", [PooledConfig, PooledMultiTaskConfig])
def test_every_setting_is_a_typed_field_with_help_text(config_class):
    base = {field.name for field in dataclasses.fields(PreTrainedConfig)}
    own = [field for field in dataclasses.fields(config_class) if field.name not in base]
    assert own and all(field.type is not None and not isinstance(field.type, str) for field in own)
    undocumented = [field.name for field in own if f"    {field.name} (`" not in config_class.__doc__]
    assert not undocumented, undocumented
