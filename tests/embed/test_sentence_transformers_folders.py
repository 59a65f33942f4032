"""A sentence-transformers folder as a backbone: its pooling, max_seq_length and normalisation are encode's defaults,
so ``PooledModel.from_backbone(folder).encode(texts)`` equals ``SentenceTransformer(folder).encode(texts)``; explicit
settings override each; the settings survive save, reload and remote code; pipelines encode cannot reproduce are
refused by name. Also: every constructor returns the model in eval mode, as ``from_pretrained`` does."""

import json
import shutil

import numpy as np
import pytest
import torch
from helpers import run_without_package
from sentence_transformers import SentenceTransformer
from torch.nn import functional as F
from transformers import AutoModel, AutoTokenizer
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

from pooled_models import (
    PooledForMultiTask,
    PooledForSequenceClassification,
    PooledForTokenClassification,
    PooledModel,
)
from pooled_models.modeling.sentence_transformers_folder import (
    SENTENCE_TRANSFORMERS_POOLING_MODES,
    read_sentence_transformers_folder,
)

TEXTS = [
    "The cat sat on the mat.",
    "",  # nothing but the special tokens
    "Stock markets fell sharply on Monday, and the analysts could not agree on why. " * 20,  # > 256 tokens
    "ok",
    "A kitten was sitting on the rug, watching the rain run down the window.",
]


def st_encode(folder, texts, **kwargs):
    return SentenceTransformer(str(folder), device="cpu").encode(texts, show_progress_bar=False, **kwargs)


def assert_same(ours, theirs, tolerance=1e-5):
    assert ours.shape == theirs.shape
    difference = float(np.abs(np.asarray(ours) - np.asarray(theirs)).max())
    assert difference <= tolerance, difference


# ----------------------------------------------------------------------------------------------------
# all-MiniLM-L6-v2, the packaged folder (Transformer, mean Pooling, Normalize; max_seq_length 256)
# ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_model(minilm_path):
    return PooledModel.from_backbone(minilm_path)


def test_the_folders_settings_become_encodes_defaults(minilm_model, minilm_path, minilm_tokenizer):
    config = minilm_model.config
    assert (config.pooling, config.normalize_embeddings, config.max_seq_length) == ("mean", True, 256)
    assert minilm_tokenizer.model_max_length == 512  # the tokenizer alone would allow more
    ours = minilm_model.encode(TEXTS)
    assert_same(ours, st_encode(minilm_path, TEXTS))
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    # Control: the long text is cut at 256 tokens, which the tokenizer's own limit would not do.
    assert len(minilm_tokenizer(TEXTS[2])["input_ids"]) > 256
    longer = minilm_model.encode(TEXTS[2], max_length=512)
    assert float(np.abs(longer - ours[2]).max()) > 1e-3


def test_batch_size_one_and_a_single_text_equal_sentence_transformers(minilm_model, minilm_path):
    assert_same(minilm_model.encode(TEXTS, batch_size=1), st_encode(minilm_path, TEXTS, batch_size=1))
    assert_same(minilm_model.encode(TEXTS[0]), st_encode(minilm_path, TEXTS[0]))


def test_explicit_settings_override_the_folders(minilm_path, minilm_model):
    model = PooledModel.from_backbone(
        minilm_path, pooling="cls", normalize_embeddings=False, max_seq_length=128
    )
    assert (model.config.pooling, model.config.normalize_embeddings, model.config.max_seq_length) == (
        "cls",
        False,
        128,
    )
    # At encode time: each keyword of the call wins over the model's default.
    raw = minilm_model.encode(TEXTS, normalize_embeddings=False, max_length=512)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-3)
    assert_same(
        minilm_model.encode(TEXTS, max_length=512),
        F.normalize(torch.from_numpy(raw), dim=-1).numpy(),
        1e-6,
    )


def test_the_settings_survive_save_reload_and_a_config_edit(minilm_model, minilm_path, tmp_path):
    minilm_model.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(tmp_path)
    reloaded = AutoModel.from_pretrained(tmp_path)
    assert (reloaded.config.normalize_embeddings, reloaded.config.max_seq_length) == (True, 256)
    expected = st_encode(minilm_path, TEXTS)
    assert_same(reloaded.encode(TEXTS), expected)
    # sentence-transformers reads the saved checkpoint with the same defaults (Normalize, max_seq_length 256).
    assert_same(st_encode(tmp_path, TEXTS), expected)
    # A loading override, and an edit of a built model's config, both change encode's default.
    plain = AutoModel.from_pretrained(tmp_path, normalize_embeddings=False)
    assert not np.allclose(np.linalg.norm(plain.encode(TEXTS), axis=1), 1.0, atol=1e-3)
    reloaded.config.max_seq_length = 512
    assert float(np.abs(reloaded.encode(TEXTS)[2] - expected[2]).max()) > 1e-3
    reloaded.save_pretrained(tmp_path / "edited")
    assert AutoModel.from_pretrained(tmp_path / "edited").config.max_seq_length == 512
    with pytest.raises(ValueError, match=r"max_seq_length must be an integer >= 1"):
        AutoModel.from_pretrained(tmp_path, max_seq_length=0)


def test_from_pretrained_on_the_folder_brings_its_settings_too(minilm_path, minilm_model):
    model = PooledModel.from_pretrained(minilm_path)
    assert not model.training
    assert (model.config.pooling, model.config.normalize_embeddings, model.config.max_seq_length) == (
        "mean",
        True,
        256,
    )
    classifier = PooledForSequenceClassification.from_pretrained(minilm_path, pooling="max", num_labels=2)
    assert (classifier.config.pooling, classifier.config.normalize_embeddings) == ("max", True)


@pytest.mark.slow  # a fresh interpreter without the package
def test_remote_code_keeps_the_defaults(minilm_model, minilm_path, tmp_path):
    minilm_model.save_pretrained(tmp_path / "model")
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(tmp_path / "model")
    script = f"""
        import json
        from transformers import AutoModel
        model = AutoModel.from_pretrained({str(tmp_path / "model")!r}, trust_remote_code=True)
        print(json.dumps({{"module": type(model).__module__, "vectors": model.encode({TEXTS!r}).tolist()}}))
    """
    result = run_without_package(script, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["module"].startswith("transformers_modules.")
    assert_same(np.array(report["vectors"], dtype=np.float32), st_encode(minilm_path, TEXTS))


# ----------------------------------------------------------------------------------------------------
# Folders of every pooling mode, written around the tiny BERT
# ----------------------------------------------------------------------------------------------------


def st_folder(
    backbone,
    folder,
    pooling_config,
    normalize=True,
    max_seq_length=24,
    extra_modules=(),
    transformer_path="",
    **settings,
):
    """A sentence-transformers folder around the backbone folder, as sentence-transformers 2.x wrote them."""
    shutil.copytree(backbone, folder / transformer_path if transformer_path else folder, dirs_exist_ok=True)
    modules = [
        {"idx": 0, "name": "0", "path": transformer_path, "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        *extra_modules,
    ]
    if normalize:
        index = len(modules)
        modules.append(
            {
                "idx": index,
                "name": str(index),
                "path": f"{index}_Normalize",
                "type": "sentence_transformers.models.Normalize",
            }
        )
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / transformer_path / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False, **settings})
    )
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 32, **pooling_config})
    )
    return folder


@pytest.mark.parametrize("pooling", sorted(SENTENCE_TRANSFORMERS_POOLING_MODES))
def test_every_reproducible_pooling_mode_equals_sentence_transformers(pooling, tiny_backbone_path, tmp_path):
    modes = list(SENTENCE_TRANSFORMERS_POOLING_MODES[pooling])
    folder = st_folder(tiny_backbone_path, tmp_path, {"pooling_mode": modes[0] if len(modes) == 1 else modes})
    model = PooledModel.from_backbone(folder)
    assert model.config.pooling == pooling and model.config.max_seq_length == 24
    assert_same(model.encode(TEXTS), st_encode(folder, TEXTS))


@pytest.mark.parametrize(
    ("legacy_keys", "pooling"),
    [
        ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
        ({"pooling_mode_lasttoken": True}, "last_token"),
        ({"pooling_mode_weightedmean_tokens": True}, "weighted_mean"),
        (
            {
                "pooling_mode_cls_token": True,
                "pooling_mode_mean_tokens": True,
                "pooling_mode_max_tokens": True,
            },
            "cls_mean_max",
        ),
        ({}, "mean"),  # no mode at all: sentence-transformers' default
    ],
)
def test_the_legacy_boolean_pooling_keys_are_read(legacy_keys, pooling, tiny_backbone_path, tmp_path):
    folder = st_folder(tiny_backbone_path, tmp_path, legacy_keys, normalize=False, max_seq_length=None)
    model = PooledModel.from_backbone(folder)
    assert (model.config.pooling, model.config.normalize_embeddings, model.config.max_seq_length) == (
        pooling,
        False,
        None,
    )
    assert_same(model.encode(TEXTS), st_encode(folder, TEXTS))


def test_a_transformer_in_a_subfolder_is_found(tiny_backbone_path, tmp_path):
    folder = st_folder(
        tiny_backbone_path, tmp_path, {"pooling_mode": "max"}, transformer_path="0_Transformer"
    )
    assert not (tmp_path / "config.json").exists()
    model = PooledModel.from_backbone(folder)
    assert model.config.pooling == "max"
    assert_same(model.encode(TEXTS), st_encode(folder, TEXTS))


DENSE = {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}


@pytest.mark.parametrize(
    ("pooling_config", "extra", "settings", "refusal"),
    [
        ({"pooling_mode": "mean"}, [DENSE], {}, r"module 2 \(2_Dense\) is a Dense; encode reproduces only "),
        (
            {"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True},
            [],
            {},
            r"pools with the modes \['max', 'mean'\], which no pooling of pooled_models computes in that order "
            r"\(it reproduces: \['cls'\] -> cls; .*\['mean', 'max'\] -> mean_max",
        ),
        (
            {"pooling_mode": "mean"},
            [],
            {"modality_config": {"text": {"method": "forward", "method_output_name": "pooler_output"}}},
            r"reads the model's 'pooler_output'",
        ),
    ],
    ids=["dense", "max-then-mean", "pooler-output"],
)
def test_a_pipeline_encode_cannot_reproduce_is_refused_by_name_unless_the_pooling_is_given(
    pooling_config, extra, settings, refusal, tiny_backbone_path, tmp_path
):
    folder = st_folder(tiny_backbone_path, tmp_path, pooling_config, extra_modules=extra, **settings)
    with pytest.raises(ValueError, match=refusal) as error:
        PooledModel.from_backbone(folder)
    assert "Give the pooling by hand" in str(error.value)
    model = PooledModel.from_backbone(folder, pooling="mean")  # the transformer alone, as asked
    assert model.config.pooling == "mean" and model.config.normalize_embeddings
    # A classifier (train.py builds one, and cannot pass the default pooling explicitly) builds and warns.
    with CaptureLogger(logging.get_logger("pooled_models.modeling.sentence_transformers_folder")) as captured:
        classifier = PooledForSequenceClassification.from_backbone(folder, num_labels=2)
    assert classifier.config.pooling == "mean"
    assert "encode does not reproduce its embeddings" in captured.out


def test_a_default_prompt_is_refused(tiny_backbone_path, tmp_path):
    folder = st_folder(tiny_backbone_path, tmp_path, {"pooling_mode": "mean"})
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: "}, "default_prompt_name": "query"})
    )
    with pytest.raises(ValueError, match=r"puts the prompt 'query' before every text by default"):
        PooledModel.from_backbone(folder)


def test_lower_casing_is_accepted_where_the_tokenizer_lower_cases(tiny_backbone_path, tmp_path):
    folder = st_folder(tiny_backbone_path, tmp_path, {"pooling_mode": "mean"}, do_lower_case=True)
    assert read_sentence_transformers_folder(folder).lower_case
    model = PooledModel.from_backbone(folder)  # the MiniLM tokenizer lower-cases by itself
    assert_same(model.encode(TEXTS), st_encode(folder, TEXTS))


def test_a_plain_backbone_folder_keeps_the_old_defaults(tiny_backbone_path):
    assert read_sentence_transformers_folder(tiny_backbone_path) is None
    model = PooledModel.from_backbone(tiny_backbone_path)
    assert (model.config.pooling, model.config.normalize_embeddings, model.config.max_seq_length) == (
        "mean",
        False,
        None,
    )


# ----------------------------------------------------------------------------------------------------
# Eval mode from every constructor
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_class", "settings"),
    [
        (PooledModel, {}),
        (PooledForSequenceClassification, {"num_labels": 3}),
        (PooledForTokenClassification, {"num_labels": 3}),
        (PooledForMultiTask, {"tasks": {"topic": {"kind": "sequence", "num_labels": 2}}}),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_every_model_is_built_in_eval_mode_like_from_pretrained(model_class, settings, tiny_backbone_path):
    model = model_class.from_backbone(tiny_backbone_path, **settings)
    assert not any(module.training for module in model.modules())
    plain = model_class.from_pretrained(tiny_backbone_path, **settings)
    assert not any(module.training for module in plain.modules())
    # So a plain forward pass gives the same vectors twice (dropout is off).
    batch = {
        "input_ids": torch.tensor([[101, 2023, 2003, 102]]),
        "attention_mask": torch.ones(1, 4, dtype=torch.long),
    }
    first, second = model(**batch), model(**batch)
    key = "pooler_output" if model_class is PooledModel else "logits"
    if model_class is PooledForMultiTask:
        first, second = first["topic"], second["topic"]
    torch.testing.assert_close(first[key], second[key], rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------------
# pooled-embed and the sentence-transformers export follow the same defaults
# ----------------------------------------------------------------------------------------------------


def test_pooled_embed_on_the_folder_gives_sentence_transformers_embeddings(minilm_path, tmp_path, capsys):
    from pooled_models.embed.cli import main

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(text for text in TEXTS if text) + "\n")

    def embed(output, *flags):
        argv = ["--model", minilm_path, "--input", str(texts), "--output", str(tmp_path / output)]
        return main([*argv, "--top_pairs", "0", *flags])

    assert embed("e.npy") == 0
    printed = capsys.readouterr().out
    assert "(pooling mean) " in printed and ", normalized.\n" in printed
    assert_same(np.load(tmp_path / "e.npy"), st_encode(minilm_path, [text for text in TEXTS if text]))
    assert embed("raw.npy", "--no-normalize") == 0
    assert "normalized" not in capsys.readouterr().out
    assert not np.allclose(np.linalg.norm(np.load(tmp_path / "raw.npy"), axis=1), 1.0, atol=1e-3)


def test_the_export_keeps_the_models_defaults(tiny_backbone_path, tmp_path):
    from pooled_models.embed.export import export_sentence_transformers

    (tmp_path / "source").mkdir()
    folder = st_folder(tiny_backbone_path, tmp_path / "source", {"pooling_mode": "cls"}, max_seq_length=12)
    model = PooledModel.from_backbone(folder)
    exported = export_sentence_transformers(model, tmp_path / "exported")  # checked against encode inside
    loaded = SentenceTransformer(str(exported), device="cpu")
    assert loaded.max_seq_length == 12 and type(loaded[-1]).__name__ == "Normalize"
    assert_same(st_encode(exported, TEXTS), model.encode(TEXTS))
