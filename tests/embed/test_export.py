"""sentence-transformers' own loader on pooled models: the folders export_sentence_transformers writes, and the
folders save_pretrained writes, give encode's embeddings for every pooling, or a clear error."""

import json
import sys

import pytest
import torch
from helpers import run_without_package, tiny_backbone_config
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer, GPT2Model

from pooled_models import POOLINGS, PooledForSequenceClassification, PooledModel
from pooled_models.embed import (
    NATIVE_POOLING_MODES,
    ExportError,
    export_sentence_transformers,
    sentence_transformers_route,
)

TEXTS = [
    "A short one.",
    "This sentence is quite a bit longer than the one before it, with more words.",
    "",
    "Medium length text about pooling heads.",
]
LABELS = {0: "sport", 1: "food", 2: "music"}
EVERY_POOLING = sorted(POOLINGS)
# Poolings sentence-transformers computes with its own modules (weighted_layer: over a token pooling it has).
NATIVE = {*NATIVE_POOLING_MODES, "weighted_layer"}


def build(path, pooling, model_class=PooledModel, **settings):
    torch.manual_seed(0)
    if pooling == "label_tokens":
        settings.setdefault("id2label", LABELS)
    if pooling == "weighted_layer":
        settings.setdefault("layer_token_pooling", "mean")
    model = model_class.from_backbone(path, pooling=pooling, **settings).eval()
    if pooling == "weighted_layer":  # layers mixed unevenly, so that the mix's weights are checked
        with torch.no_grad():
            model.pooler.layer_logits.copy_(torch.arange(len(model.pooler.layer_indices), dtype=torch.float))
    return model


def assert_same(sentence_model, model, normalize=False):
    theirs = torch.as_tensor(sentence_model.encode(TEXTS, show_progress_bar=False))
    ours = torch.from_numpy(model.encode(TEXTS, normalize_embeddings=normalize))
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pooling", sorted(set(EVERY_POOLING) - {"label_tokens"}))
def test_an_exported_folder_gives_encodes_embeddings_in_sentence_transformers(
    pooling, tiny_backbone_path, tmp_path
):
    model = build(tiny_backbone_path, pooling)
    route = sentence_transformers_route(model)
    assert route == ("native" if pooling in NATIVE else "pooled")
    folder = export_sentence_transformers(model, tmp_path / "st")
    modules = [entry["type"].rsplit(".", 1)[1] for entry in json.loads((folder / "modules.json").read_text())]
    if route == "native":
        assert modules[-1] == "Pooling" and not list(folder.glob("modeling_pooled.py"))
    else:
        assert modules == ["Transformer"] and (folder / "modeling_pooled.py").is_file()
    assert not [path.name for path in folder.rglob("*") if path.suffix in (".bin", ".pt", ".pth", ".pkl")]
    assert_same(SentenceTransformer(str(folder)), model)


@pytest.mark.parametrize("pooling", ["cls", "attention"])  # one of each route
def test_normalized_export_ends_with_sentence_transformers_normalize(pooling, tiny_backbone_path, tmp_path):
    model = build(tiny_backbone_path, pooling)
    folder = export_sentence_transformers(model, tmp_path / "st", normalize=True)
    assert json.loads((folder / "modules.json").read_text())[-1]["type"].endswith("Normalize")
    loaded = SentenceTransformer(str(folder))
    assert_same(loaded, model, normalize=True)
    torch.testing.assert_close(torch.as_tensor(loaded.encode(TEXTS)).norm(dim=-1), torch.ones(len(TEXTS)))


def test_a_classifier_exports_as_its_encoder_and_pooled_is_possible_for_native_poolings(
    tiny_backbone_path, tmp_path
):
    classifier = build(tiny_backbone_path, "mean_max", PooledForSequenceClassification, num_labels=3)
    native = export_sentence_transformers(classifier, tmp_path / "native")
    pooled = export_sentence_transformers(classifier, tmp_path / "pooled", modules="pooled")
    assert (pooled / "modeling_pooled.py").is_file()
    for folder in (native, pooled):
        assert_same(SentenceTransformer(str(folder)), classifier)


def test_what_cannot_be_exported_is_refused_with_the_reason(tiny_backbone_path, tmp_path):
    with pytest.raises(ExportError, match="one vector per label.*encode\\(texts, label=...\\)"):
        export_sentence_transformers(build(tiny_backbone_path, "label_tokens"), tmp_path / "labels")
    with pytest.raises(
        ExportError, match="no module for pooling='lstm'. It has: cls, mean.*modules='pooled'"
    ):
        export_sentence_transformers(build(tiny_backbone_path, "lstm"), tmp_path / "lstm", modules="native")
    with pytest.raises(ExportError, match="layer_token_pooling='attention'"):
        sentence_transformers_route(
            build(tiny_backbone_path, "weighted_layer", layer_token_pooling="attention"), "native"
        )
    with pytest.raises(ExportError, match="modules must be one of auto, native, pooled"):
        sentence_transformers_route(build(tiny_backbone_path, "mean"), "onnx")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="is not an empty folder"):
        export_sentence_transformers(build(tiny_backbone_path, "mean"), tmp_path / "used")
    assert (tmp_path / "used" / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "labels").exists() and not (tmp_path / "lstm").exists()


def test_a_folder_that_would_give_other_embeddings_is_removed_with_an_error(
    tiny_backbone_path, tmp_path, monkeypatch
):
    # A wrong translation of a pooling into sentence-transformers' modes, as a future mistake would make.
    monkeypatch.setitem(NATIVE_POOLING_MODES, "mean", ("max",))
    with pytest.raises(ExportError, match="gives other embeddings than model.encode.*it has been removed"):
        export_sentence_transformers(build(tiny_backbone_path, "mean"), tmp_path / "st")
    assert not (tmp_path / "st").exists()


def test_a_decoder_without_a_padding_token_exports_natively(tiny_backbone_path, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    config = tiny_backbone_config("gpt2")
    config.vocab_size = len(tokenizer)
    torch.manual_seed(0)
    GPT2Model(config).save_pretrained(tmp_path / "gpt2")
    tokenizer.pad_token = None  # as GPT-2's and Llama's tokenizers come
    tokenizer.save_pretrained(tmp_path / "gpt2")
    model = build(str(tmp_path / "gpt2"), "last_token")
    assert model._encoding_tokenizer().pad_token is None
    folder = export_sentence_transformers(model, tmp_path / "st")
    assert sentence_transformers_route(model) == "native"
    assert_same(SentenceTransformer(str(folder)), model)


@pytest.mark.parametrize("pooling", EVERY_POOLING)
def test_a_saved_checkpoint_loads_in_sentence_transformers_with_its_own_pooling(
    pooling, tiny_backbone_path, tmp_path
):
    model = build(tiny_backbone_path, pooling, PooledForSequenceClassification, num_labels=3)
    model.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(tmp_path)
    # label_tokens: sentence-transformers gives what encode gives, one vector per label
    assert_same(SentenceTransformer(str(tmp_path)), model)


def test_the_embed_room_names_its_missing_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # find_spec then reports it missing
    for name in [name for name in sys.modules if name.startswith("pooled_models.embed")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImportError, match=r"need matplotlib: pip install 'pooled_models\[embed\]'"):
        import pooled_models.embed  # noqa: F401


@pytest.mark.slow  # fresh interpreters without the package
def test_without_the_package_native_folders_load_and_pooled_ones_need_trust_remote_code(
    tiny_backbone_path, tmp_path
):
    native_model, pooled_model = build(tiny_backbone_path, "cls_mean_max"), build(tiny_backbone_path, "gem")
    export_sentence_transformers(native_model, tmp_path / "native")
    pooled_model.save_pretrained(tmp_path / "pooled")
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(tmp_path / "pooled")
    script = f"""
        import json
        from sentence_transformers import SentenceTransformer
        native = SentenceTransformer({str(tmp_path / "native")!r}).encode({TEXTS!r})
        pooled = SentenceTransformer({str(tmp_path / "pooled")!r}, trust_remote_code=True).encode({TEXTS!r})
        print(json.dumps({{"native": native.tolist(), "pooled": pooled.tolist()}}))
    """
    result = run_without_package(script, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for name, model in (("native", native_model), ("pooled", pooled_model)):
        torch.testing.assert_close(torch.tensor(report[name]), torch.from_numpy(model.encode(TEXTS)))

    refused = run_without_package(
        f"from sentence_transformers import SentenceTransformer\nSentenceTransformer({str(tmp_path / 'pooled')!r})",
        tmp_path,
    )
    assert refused.returncode != 0 and "trust_remote_code=True" in refused.stderr
