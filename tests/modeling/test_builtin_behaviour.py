"""What transformers' own ModelTesterMixin and ConfigTester expect of every built-in model, held by the pooled models:
built from a config alone (label tokens too), re-headed to more labels, the new head listed as missing when built
around a plain backbone, a config whose sizes and dict survive a save and reload (a composite config's sub-config
too), a vocabulary resized to any size (label tokens too), a config read without its tokenizer, and an exported
graph that gives eager mode's outputs."""

from __future__ import annotations

import pytest
import torch
import transformers
from helpers import random_batch, tiny_backbone_config
from transformers import AutoConfig, AutoModelForSequenceClassification, BertConfig, BertModel
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

from pooled_models import (
    PooledConfig,
    PooledForMultiTask,
    PooledForSequenceClassification,
    PooledForTokenClassification,
    PooledModel,
    PooledMultiTaskConfig,
)
from pooled_models.modeling import label_token_inits

# ----------------------------------------------------------------------------------------------------
# Label tokens from a config alone
# ----------------------------------------------------------------------------------------------------


def _fallback_warnings(build) -> tuple[object, int]:
    """What ``build()`` returns, and how many times it warned that label tokens start from the vocabulary mean."""
    logging.warning_once.cache_clear()  # "once" per process: start counting afresh
    logger = logging.get_logger(label_token_inits.__name__)
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


def test_a_label_token_model_builds_and_resizes_from_a_vocabulary_smaller_than_its_starting_ids():
    # ModelTesterMixin.test_resize_tokens_embeddings' last step: config.vocab_size = 4, then the model is built and
    # resized. The label tokens' starting ids (5, 6...) are past that vocabulary: the edit leaves them behind, so they
    # are dropped and the label tokens start from the vocabulary mean (before: IndexError, index 5 out of bounds).
    config = PooledConfig(
        backbone_config=tiny_backbone_config("bert"),
        pooling="label_tokens",
        num_labels=3,
        label_token_init_ids=[[5], [6, 7], [8]],
    )
    config.vocab_size = 4
    config.backbone_config.pad_token_id = 3
    model, warnings = _fallback_warnings(lambda: PooledForSequenceClassification(config).eval())
    assert warnings == 1 and model.config.label_token_init_ids is None
    torch.testing.assert_close(
        model.pooler.label_embeddings.weight.detach(), _vocabulary_mean(model).expand(3, -1)
    )
    vectors = model.pooler.label_embeddings.weight.detach().clone()
    for size in (14, 4, 64):
        embeddings = model.resize_token_embeddings(size)
        assert embeddings.weight.shape[0] == model.config.vocab_size == size
        batch = {
            "input_ids": torch.tensor([[2, size - 1, 1]]),
            "attention_mask": torch.ones(1, 3, dtype=torch.long),
        }
        assert model(**batch).logits.shape == (1, 3)
    # Resizing leaves the label vectors alone.
    assert torch.equal(model.pooler.label_embeddings.weight, vectors)


def test_starting_ids_that_still_fit_a_resized_vocabulary_are_kept():
    config = PooledConfig(
        backbone_config=tiny_backbone_config("bert"),
        pooling="label_tokens",
        num_labels=3,
        label_token_init_ids=[[5], [6, 7], [8]],
    )
    model = PooledForSequenceClassification(config)
    model.resize_token_embeddings(9)  # ids up to 8 fit
    assert model.config.label_token_init_ids == [[5], [6, 7], [8]]
    model.resize_token_embeddings(8)
    assert model.config.label_token_init_ids is None


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


@pytest.mark.parametrize("model_class", [PooledModel, PooledForSequenceClassification])
@pytest.mark.parametrize(
    "pooling, settings",
    [("attention", {}), ("label_tokens", {"label_token_init": "random"})],
    ids=["attention", "label_tokens"],
)
def test_a_base_checkpoint_reports_the_pooler_it_did_not_hold_as_missing(
    model_class, pooling, settings, tmp_path
):
    # ModelTesterMixin.test_correct_missing_keys saves model.base_model (the backbone) and loads the model class from
    # it. A plain backbone's folder cannot say which pooling the model had: the pooling given (config= as the mixin's
    # own models are built, or pooling=) is built, and its weights, which the folder does not hold, are reported.
    config = PooledConfig(
        backbone_config=tiny_backbone_config("bert"), pooling=pooling, num_labels=3, **settings
    )
    model = model_class(config)
    model.base_model.save_pretrained(tmp_path)
    expected = {name for name, _ in model.named_parameters() if not name.startswith("backbone.")}
    for given in ({"config": config}, {"pooling": pooling, "num_labels": 3, **settings}):
        reloaded, info = model_class.from_pretrained(tmp_path, output_loading_info=True, **given)
        assert reloaded.config.pooling == pooling
        assert info["missing_keys"] == expected and not info["unexpected_keys"], given
        for name, tensor in model.backbone.state_dict().items():
            assert torch.equal(reloaded.backbone.state_dict()[name], tensor), name


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


@pytest.mark.parametrize("config_class", ["pooled", "pooled_multitask"])
def test_the_backbone_sub_config_loads_alone_from_the_saved_folder_as_it_was(config_class, tmp_path):
    # ConfigTester.create_and_test_config_from_and_save_pretrained_composite: the sub-config class reads its part of
    # the saved folder and gives the composite's dict of it, `_name_or_path` included (before: the composite's dict
    # left it out, the sub-config's has it).
    backbone = tiny_backbone_config("bert")
    backbone.name_or_path = "/home/someone/bert"  # as a backbone loaded with from_pretrained has it
    if config_class == "pooled":
        config = PooledConfig(backbone_config=backbone, pooling="attention", num_labels=3)
    else:
        config = PooledMultiTaskConfig(
            backbone_config=backbone, tasks={"a": {"kind": "sequence", "num_labels": 2}}
        )
    config.save_pretrained(tmp_path)
    expected = config.to_dict()["backbone_config"]
    alone = BertConfig.from_pretrained(tmp_path).to_dict()
    for part in (expected, alone):
        part.pop("transformers_version", None)
    assert alone == expected and expected["_name_or_path"] == ""
    assert "/home/someone" not in (tmp_path / "config.json").read_text()
    assert type(config).from_pretrained(tmp_path).to_dict() == config.to_dict()
    assert type(AutoConfig.from_pretrained(tmp_path)) is type(config)


def test_a_config_read_with_new_labels_reads_no_tokenizer(tmp_path, monkeypatch):
    # The starting ids of new labels are read from the checkpoint's tokenizer when a model is built, not when its
    # config is read: AutoConfig / from_dict load nothing but the config.
    config = PooledConfig(
        backbone_config=tiny_backbone_config("bert"),
        pooling="label_tokens",
        id2label={0: "a", 1: "b"},
        label_token_init_ids=[[5], [6]],
    )
    model = PooledForSequenceClassification(config)
    model.save_pretrained(tmp_path)
    names = {0: "sport", 1: "food", 2: "music"}
    read = []
    monkeypatch.setattr(
        transformers.AutoTokenizer,
        "from_pretrained",
        lambda *args, **kwargs: read.append(args) or _Tokenizer(),
    )
    loaded = PooledConfig.from_pretrained(tmp_path, id2label=names)
    assert read == [] and loaded.num_labels == 3 and loaded.label_token_init_ids is None
    rebuilt = AutoModelForSequenceClassification.from_pretrained(
        tmp_path, id2label=names, ignore_mismatched_sizes=True
    )
    assert [str(source) for source, *_ in read] == [str(tmp_path)]  # the folder's, when the model is built
    assert rebuilt.config.label_token_init_ids == [[ord(name[0])] for name in names.values()]


class _Tokenizer:
    """A stand-in tokenizer: each label name is the id of its first letter; [CLS] is special."""

    all_special_ids = [101]

    def __call__(self, text, add_special_tokens=True):
        ids = [ord(str(text)[0])]
        return {"input_ids": [101, *ids] if add_special_tokens else ids}


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


# ----------------------------------------------------------------------------------------------------
# Funnel: the sequence models read the pooled FunnelBaseModel, as transformers' own sequence classifier
# ----------------------------------------------------------------------------------------------------


def _funnel_config():
    return transformers.FunnelConfig(
        vocab_size=120,
        block_sizes=[1, 1, 1],
        d_model=32,
        n_head=4,
        d_head=8,
        d_inner=37,
        num_decoder_layers=1,
    )


def _drift(model, text_length: int, padded_to: int) -> float:
    """How far the first text's logits move when it is padded on the right to ``padded_to`` tokens."""
    ids = torch.randint(5, 99, (1, text_length), generator=torch.Generator().manual_seed(0))
    alone = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    padded = {
        key: torch.nn.functional.pad(value, (0, padded_to - text_length)) for key, value in alone.items()
    }
    with torch.no_grad():
        return float((model(**padded).logits - model(**alone).logits).abs().max())


def test_funnel_poolings_keep_the_padding_invariance_of_funnels_own_classifier():
    # FunnelForSequenceClassification reads FunnelBaseModel's first state, which padding leaves alone for these
    # lengths; the poolings read FunnelModel's upsampled full-length states before, which moved with the padding
    # (cls by 4e-2). They now read FunnelBaseModel under its pooled mask: cls moves as little as the built-in, and
    # every pooling does where Funnel's pooled states themselves stay (its blocks truncate the last token before
    # pooling, so the other pooled states may move with the padded length: Funnel's, not the pooling's).
    from pooled_models.modeling.pooling import poolings_that_work

    torch.manual_seed(0)
    config = _funnel_config()
    built_in = transformers.FunnelForSequenceClassification(_funnel_config()).eval()
    lengths = [(6, 9), (8, 12), (10, 15)]
    assert all(_drift(built_in, *pair) < 1e-5 for pair in lengths)  # the built-in's invariance, the reference
    base = transformers.FunnelBaseModel(config).eval()
    poolings = poolings_that_work(base)
    assert "mean" in poolings and "label_tokens" not in poolings and "weighted_layer" not in poolings
    states_stay = (8, 12)  # every pooled state of FunnelBaseModel is unchanged by this padding:
    assert _states_drift(base, *states_stay) < 1e-5
    for pooling in poolings:
        torch.manual_seed(0)
        model = PooledForSequenceClassification(
            PooledConfig(backbone_config=config, pooling=pooling, num_labels=3)
        )
        assert type(model.backbone).__name__ == "FunnelBaseModel"
        for pair in lengths if pooling == "cls" else [states_stay]:
            assert _drift(model.eval(), *pair) < 1e-5, (pooling, pair)


def _states_drift(base, text_length: int, padded_to: int) -> float:
    ids = torch.randint(5, 99, (1, text_length), generator=torch.Generator().manual_seed(0))
    alone = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    padded = {
        key: torch.nn.functional.pad(value, (0, padded_to - text_length)) for key, value in alone.items()
    }
    with torch.no_grad():
        short, long = base(**alone).last_hidden_state, base(**padded).last_hidden_state
    return float((long[:, : short.shape[1]] - short).abs().max())


def test_funnel_token_models_keep_a_state_per_token():
    model = PooledForTokenClassification(PooledConfig(backbone_config=_funnel_config(), num_labels=3)).eval()
    assert type(model.backbone).__name__ == "FunnelModel"
    assert model(**random_batch([6, 4])).logits.shape == (2, 6, 3)


def test_a_funnel_multitask_model_reads_the_backbone_its_kind_of_heads_read(tmp_path):
    sequence = {"topic": {"kind": "sequence", "num_labels": 2}}
    only_sequences = PooledForMultiTask(
        PooledMultiTaskConfig(backbone_config=_funnel_config(), tasks=sequence)
    )
    assert type(only_sequences.backbone).__name__ == "FunnelBaseModel"
    # The standalone classifier reads the same backbone: exported.
    only_sequences.export_head("topic", tmp_path / "topic")
    with_tokens = PooledForMultiTask(
        PooledMultiTaskConfig(
            backbone_config=_funnel_config(), tasks={**sequence, "tags": {"kind": "token", "num_labels": 3}}
        )
    )
    assert type(with_tokens.backbone).__name__ == "FunnelModel"
    # A standalone sequence classifier of Funnel reads FunnelBaseModel: exported from FunnelModel's states it would
    # give other outputs than the head, so the export is refused, saying why.
    with pytest.raises(ValueError, match=r"runs FunnelModel .* loads as FunnelBaseModel"):
        with_tokens.export_head("topic", tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
