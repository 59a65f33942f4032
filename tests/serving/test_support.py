"""What the vLLM plugin serves and refuses, decided on the config alone (no vLLM needed: make test-vllm serves them),
and the model room's refusal of vLLM without the plugin."""

import importlib.metadata
import sys
import types

import pytest
from helpers import tiny_backbone_config

from pooled_models import POOLINGS, PooledConfig, PooledModel
from pooled_models.modeling.layer_pooling import LayerPooler
from pooled_models.serving import MODEL_CLASSES
from pooled_models.serving.support import (
    SERVED_ARCHITECTURES,
    refusal,
)

CLASSIFIER = "PooledForSequenceClassification"
# The poolings that put tokens of their own into the input (label tokens, label text): tested below.
INPUT_EDITING = ("label_tokens", "label_text")
TOKEN_POOLINGS = sorted(
    name for name in POOLINGS if name not in INPUT_EDITING and not issubclass(POOLINGS[name], LayerPooler)
)
LAYER_POOLINGS = sorted(name for name in POOLINGS if issubclass(POOLINGS[name], LayerPooler))


def config(pooling: str, backbone: str = "bert", **settings) -> PooledConfig:
    return PooledConfig(backbone_config=tiny_backbone_config(backbone), pooling=pooling, **settings)


def assert_refused(message: str | None, *said: str) -> None:
    assert message is not None
    for words in ("pooled_models' vLLM plugin cannot serve", "pipeline(", "ONNX Runtime", *said):
        assert words in message, (words, message)


@pytest.mark.parametrize("pooling", TOKEN_POOLINGS + LAYER_POOLINGS)
def test_every_pooling_but_the_label_poolings_is_served_on_an_encoder(pooling):
    assert refusal(config(pooling), CLASSIFIER) is None
    assert refusal(config(pooling, "roberta"), "PooledModel") is None


@pytest.mark.parametrize("pooling", TOKEN_POOLINGS)
def test_token_poolings_are_served_on_a_decoder(pooling):
    assert refusal(config(pooling, "llama"), CLASSIFIER) is None


@pytest.mark.parametrize("pooling", LAYER_POOLINGS)
def test_layer_poolings_are_served_on_a_decoder(pooling):
    assert refusal(config(pooling, "llama"), CLASSIFIER) is None  # vLLM's aux-hidden-state hook (routes.py)


def test_a_layer_pooling_that_reads_the_last_layer_only_is_served_on_a_decoder():
    assert refusal(config("concat_layers", "llama", layer_start=-1), CLASSIFIER) is None


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"label_text_scorer": "per_label"},  # train.py's few-example default
        {"label_text_pooling": "marker", "label_descriptions": {"joy": "feeling happy"}},
        {"problem_type": "multi_label_classification"},
    ],
)
def test_label_text_with_labels_apart_from_the_text_is_served(settings):
    labels = {"id2label": {0: "joy", 1: "anger"}}
    assert refusal(config("label_text", **labels, **settings), CLASSIFIER) is None


@pytest.mark.parametrize("layers", [1, 2, "all"])
def test_labels_that_attend_to_the_text_are_refused_quoting_vllm(layers):
    message = refusal(config("label_text", label_text_layers=layers), CLASSIFIER)
    assert_refused(message, f"label_text_layers={layers!r}", "new_common_attn_metadata.causal = False")
    assert "label_text_layers=0" in message  # what to train instead


def label_tokens(backbone: str = "bert", **settings) -> PooledConfig:
    return config("label_tokens", backbone, label_token_init="random", num_labels=3, **settings)


# label_token_layers=2: every layer of the tiny BERT, as "all"
@pytest.mark.parametrize("settings", [{}, {"label_token_layers": 2}, {"label_token_scorer": "shared"}])
def test_label_tokens_with_full_insertion_in_one_pass_are_served(settings):
    assert refusal(label_tokens(**settings), CLASSIFIER) is None


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"label_token_attention": "one_way"}, "new_common_attn_metadata.causal = False"),
        ({"label_token_layers": 1}, "two sequences of different lengths for one request"),
        ({"label_tokens_per_pass": 2}, "one prompt per request"),
    ],
)
def test_other_label_token_settings_are_refused_with_the_reason_and_what_to_train(settings, said):
    message = refusal(label_tokens(**settings), CLASSIFIER)
    assert_refused(message, "pooling='label_tokens'", said, "label_text_layers=0")


# Every backbone the plugin serves (vLLM's encoders and decoders, the transformers route: DeBERTa's relative
# positions, a BERT with relative positions), label_token_position where a tokenizer's template puts label tokens
# (the serving tokenizer checks it against the tokenizer); served equal to transformers in
# tests/serving_vllm/test_label_backbones.py.
LABEL_BACKBONES = ["bert", "modernbert", "llama", "gpt2", "distilbert", "deberta-v2", "relative_key"]


def backbone_config_of(backbone: str):
    if backbone != "relative_key":
        return tiny_backbone_config(backbone)
    relative = tiny_backbone_config("bert")  # a BERT that runs through the transformers route
    relative.position_embedding_type = "relative_key"
    return relative


@pytest.mark.parametrize("backbone", LABEL_BACKBONES)
def test_label_poolings_are_served_on_every_backbone(backbone):
    labels = {"id2label": {0: "joy", 1: "anger"}}
    text = PooledConfig(backbone_config=backbone_config_of(backbone), pooling="label_text", **labels)
    assert refusal(text, CLASSIFIER) is None
    for position in (0, 1, -1):
        tokens = PooledConfig(
            backbone_config=backbone_config_of(backbone),
            pooling="label_tokens",
            label_token_init="random",
            label_token_position=position,
            num_labels=3,
        )
        assert refusal(tokens, CLASSIFIER) is None


def test_a_label_token_embedder_is_refused():
    assert_refused(refusal(label_tokens(), "PooledModel"), "one vector per label token")


def test_a_label_text_embedder_is_refused():
    message = refusal(config("label_text"), "PooledModel")
    assert_refused(message, "one vector per label", "PooledForSequenceClassification")


@pytest.mark.parametrize("backbone", ["distilbert", "esm", "gpt2"])
def test_a_backbone_without_a_vllm_implementation_is_served_by_the_transformers_route(backbone):
    assert refusal(config("mean", backbone), CLASSIFIER) is None  # tests/serving/test_routes.py: which route


def test_relative_positions_are_served_by_the_transformers_route():
    backbone = tiny_backbone_config("bert")
    backbone.position_embedding_type = "relative_key"
    assert refusal(PooledConfig(backbone_config=backbone, pooling="mean"), CLASSIFIER) is None


def test_the_plugin_registers_a_class_for_every_pooled_architecture():
    assert set(MODEL_CLASSES) == set(SERVED_ARCHITECTURES)
    assert set(SERVED_ARCHITECTURES) == {
        CLASSIFIER,
        "PooledModel",
        "PooledForTokenClassification",
        "PooledForMultiTask",
    }


def test_the_entry_point_vllm_loads_is_declared():
    plugins = importlib.metadata.entry_points(group="vllm.general_plugins")
    assert [plugin.value for plugin in plugins if plugin.name == "pooled_models"] == [
        "pooled_models.serving:register"
    ]


# -- vLLM without the plugin: the checkpoint's own code refuses (modeling/engines.py) ------------------------


@pytest.fixture
def fake_vllm(monkeypatch):
    """vLLM imported in this process (as a module named vllm), and the plugin's module as it is before registering."""
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    plugin = sys.modules["pooled_models.serving"]
    monkeypatch.setattr(plugin, "registered", False)
    return plugin


def build_from_vllm_code():
    """A pooled config built by code of a module named vllm.* (as vLLM's config loader builds one)."""
    namespace = {
        "__name__": "vllm.transformers_utils.config",
        "PooledConfig": PooledConfig,
        "tiny": tiny_backbone_config,
    }
    exec("result = PooledConfig(backbone_config=tiny('bert'), pooling='mean')", namespace)
    return namespace["result"]


def test_vllm_building_a_pooled_config_without_the_plugin_is_refused_naming_it(fake_vllm):
    with pytest.raises(ValueError, match=r'pip install "pooled_models\[vllm\]"'):
        build_from_vllm_code()


def test_with_the_plugin_registered_or_outside_vllm_the_config_builds(fake_vllm, monkeypatch):
    assert config("mean") is not None  # vLLM imported, but the config is built by this code, not vLLM's
    monkeypatch.setattr(fake_vllm, "registered", True)
    assert build_from_vllm_code().pooling == "mean"


def test_the_model_refuses_vllm_transformers_backend_attention():
    pooled = config("mean")
    pooled.backbone_config._attn_implementation = (
        "vllm"  # what vLLM's Transformers backend sets before it builds one
    )
    with pytest.raises(ValueError, match=r"pooled_models\[vllm\]"):
        PooledModel(pooled)


def engine(max_model_len: int = 128, chunked: bool = False) -> types.SimpleNamespace:
    """What document_refusal reads of vLLM's model config."""
    pooler = types.SimpleNamespace(enable_chunked_processing=chunked)
    return types.SimpleNamespace(max_model_len=max_model_len, pooler_config=pooler)


def test_document_models_are_served_and_refused_by_name_where_not_exact():
    from pooled_models.serving.document_support import document_refusal

    served = config("mean", document_window=32, document_pooling="transformer")
    assert document_refusal(served, CLASSIFIER, engine()) is None
    assert document_refusal(config("max", document_window=32), "PooledModel", engine()) is None
    assert (
        document_refusal(config("mean"), CLASSIFIER, engine(max_model_len=8)) is None
    )  # not a document model
    assert_refused(
        document_refusal(config("label_text", document_window=32), CLASSIFIER, engine()),
        "pooling='label_text'",
        "document mode",
    )
    too_long = document_refusal(served, CLASSIFIER, engine(max_model_len=16))
    assert "a window is 32 tokens" in too_long and "--max-model-len 32" in too_long
    chunked = document_refusal(served, CLASSIFIER, engine(chunked=True))
    assert "enable_chunked_processing" in chunked and "document_pooling" in chunked


def test_an_empty_text_is_refused_as_the_vllm_plugin_refuses_it_and_a_real_one_is_not():
    """The rule the plugin applies to each prompt vLLM builds (serving/empty_texts.py): an empty or blank text, or
    token ids that are all special tokens ([CLS] [SEP]), is refused naming it; any real token passes."""
    from pooled_models.serving.empty_texts import empty_text_refusal

    special = {101, 102}
    assert empty_text_refusal(
        {"type": "token", "prompt": "", "prompt_token_ids": [101, 102]}, special
    ).startswith("The text is empty: ")
    assert "The text is empty (' \\n')" in empty_text_refusal({"type": "token", "prompt": " \n"}, special)
    assert "token ids [101, 102], all special" in empty_text_refusal(
        {"type": "token", "prompt_token_ids": [101, 102]}, special
    )
    for prompt in (
        {"type": "token", "prompt": "a", "prompt_token_ids": [101, 1037, 102]},
        {"type": "token", "prompt_token_ids": [101, 1037, 102]},
        {"type": "embeds"},
    ):
        assert empty_text_refusal(prompt, special) is None
