"""What transformers' own ModelTesterMixin expects of every built-in model, held by the pooled models: built from a
config alone (label tokens too), re-headed to more labels, the new head listed as missing when built around a plain
backbone, a config whose sizes and dict survive a save and reload, and an exported graph that gives eager mode's
outputs."""

from __future__ import annotations

import pytest
import torch
from helpers import random_batch, tiny_backbone_config
from transformers import AutoModelForSequenceClassification, BertModel
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

from pooled_models import PooledConfig, PooledForSequenceClassification, PooledModel
from pooled_models.modeling import label_tokens

# ----------------------------------------------------------------------------------------------------
# Label tokens from a config alone
# ----------------------------------------------------------------------------------------------------


def _fallback_warnings(build) -> tuple[object, int]:
    """What ``build()`` returns, and how many times it warned that label tokens start from the vocabulary mean."""
    logging.warning_once.cache_clear()  # "once" per process: start counting afresh
    logger = logging.get_logger(label_tokens.__name__)
    with CaptureLogger(logger) as captured:
        built = build()
    return built, captured.out.count("has no label_token_init_ids")


def _vocabulary_mean(model) -> torch.Tensor:
    return model.get_input_embeddings().weight.mean(dim=0)


def test_label_tokens_build_from_a_config_alone_and_say_so_once():
    config = PooledConfig(backbone_config=tiny_backbone_config("bert"), pooling="label_tokens", num_labels=3)
    assert config.label_token_init == "label_text" and config.label_token_init_ids is None

    def two_models():
        return [PooledForSequenceClassification(config).eval() for _ in range(2)]

    models, warnings = _fallback_warnings(two_models)
    assert warnings == 1
    for model in models:
        expected = _vocabulary_mean(model).expand(3, -1)
        torch.testing.assert_close(model.pooler.label_embeddings.weight.detach(), expected)
        assert model(**random_batch([4, 2])).logits.shape == (2, 3)


def test_new_labels_of_a_re_headed_label_token_model_start_without_a_tokenizer(tmp_path):
    config = PooledConfig(
        backbone_config=tiny_backbone_config("bert"),
        pooling="label_tokens",
        num_labels=3,
        label_token_init_ids=[[10], [11], [12]],
    )
    PooledForSequenceClassification(config).save_pretrained(tmp_path)  # no tokenizer in the folder

    def reheaded():
        return AutoModelForSequenceClassification.from_pretrained(
            tmp_path, num_labels=5, ignore_mismatched_sizes=True
        ).eval()

    model, warnings = _fallback_warnings(reheaded)
    assert warnings == 1 and model.config.num_labels == 5 and model.config.label_token_init_ids is None
    torch.testing.assert_close(
        model.pooler.label_embeddings.weight.detach(), _vocabulary_mean(model).expand(5, -1)
    )
    assert model(**random_batch([4])).logits.shape == (1, 5)


@pytest.mark.parametrize(
    "problem_type", ["regression", "single_label_classification", "multi_label_classification"]
)
def test_every_problem_type_from_a_label_token_config(problem_type):
    num_labels = 1 if problem_type == "regression" else 3
    config = PooledConfig(
        backbone_config=tiny_backbone_config("bert"),
        pooling="label_tokens",
        num_labels=num_labels,
        problem_type=problem_type,
    )
    model = PooledForSequenceClassification(config)
    labels = {
        "regression": torch.tensor([[0.5], [1.0]]),
        "single_label_classification": torch.tensor([0, 2]),
        "multi_label_classification": torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]),
    }[problem_type]
    assert torch.isfinite(model(**random_batch([4, 3]), labels=labels).loss)


# ----------------------------------------------------------------------------------------------------
# Loading info
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model_class, pooling", [(PooledForSequenceClassification, "mean"), (PooledModel, "attention")]
)
def test_a_plain_backbone_folder_reports_the_new_weights_as_missing(model_class, pooling, tmp_path):
    BertModel(tiny_backbone_config("bert"), add_pooling_layer=False).save_pretrained(tmp_path)
    model, info = model_class.from_pretrained(tmp_path, pooling=pooling, output_loading_info=True)
    new = {name for name, _ in model.named_parameters() if not name.startswith("backbone.")}
    assert new  # the pooler's or the head's weights
    # As transformers reports a new classification head: sets of names.
    assert info == {"missing_keys": new, "unexpected_keys": set(), "mismatched_keys": set(), "error_msgs": []}


# ----------------------------------------------------------------------------------------------------
# The config
# ----------------------------------------------------------------------------------------------------

SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings")


def test_the_config_answers_the_text_sizes_from_its_backbone():
    backbone = tiny_backbone_config("bert")
    config = PooledConfig(backbone_config=backbone, num_labels=2)
    assert {name: getattr(config, name) for name in SIZES} == {
        name: getattr(backbone, name) for name in SIZES
    }
    assert not set(SIZES) & set(config.to_dict())  # kept once, in the backbone's config


def test_a_nested_text_config_answers_too():
    from transformers import Gemma3Config

    text = {
        "vocab_size": 99,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "head_dim": 8,
    }
    vision = {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "image_size": 16,
        "patch_size": 8,
    }
    config = PooledConfig(backbone_config=Gemma3Config(text_config=text, vision_config=vision), num_labels=2)
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (99, 32, 2)


def test_the_config_dict_survives_a_save_and_reload(tmp_path):
    config = PooledConfig(backbone_config=tiny_backbone_config("bert"), pooling="attention", num_labels=4)
    config.save_pretrained(tmp_path)
    assert PooledConfig.from_pretrained(tmp_path).to_dict() == config.to_dict()


def test_resizing_the_embeddings_writes_one_vocab_size_which_survives_a_reload(tmp_path):
    model = PooledForSequenceClassification(
        PooledConfig(backbone_config=tiny_backbone_config("bert"), num_labels=2)
    ).eval()
    model.resize_token_embeddings(130)
    assert model.config.vocab_size == model.config.backbone_config.vocab_size == 130
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert reloaded.config.vocab_size == reloaded.config.backbone_config.vocab_size == 130
    assert reloaded.get_input_embeddings().weight.shape[0] == 130
    batch = {"input_ids": torch.tensor([[5, 129, 7]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits)


# ----------------------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------------------


def test_an_exported_label_token_model_gives_eager_outputs():
    torch.manual_seed(0)
    config = PooledConfig(backbone_config=tiny_backbone_config("bert"), pooling="label_tokens", num_labels=3)
    model = PooledModel(config).eval()
    batch, seq = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("seq", min=2, max=32)
    example = random_batch([6, 4])
    exported = torch.export.export(
        model,
        (),
        dict(example),
        dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
        strict=False,
    ).module()
    # Another shape than the example's, with padding columns no row needs (a batch padded to a fixed width).
    inputs = random_batch([5, 3, 2], seed=3)
    inputs = {key: torch.nn.functional.pad(value, (0, 4)) for key, value in inputs.items()}
    with torch.no_grad():
        eager, graph = model(**inputs), exported(**inputs)
    assert graph.last_hidden_state.shape == eager.last_hidden_state.shape
    torch.testing.assert_close(graph.last_hidden_state, eager.last_hidden_state, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(graph.pooler_output, eager.pooler_output, atol=1e-5, rtol=1e-5)
