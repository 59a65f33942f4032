"""train.py decides one text length (--max_seq_length, else the backbone's own), prints it and saves it with the model
(config and tokenizer); the saved model's pipeline, encode and ONNX Runtime then cut a long text where train.py's
predictions did, with the same scores (docs/training.md, "The text length")."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import entity_rows, topic_rows, train, write_rows
from transformers import AutoTokenizer, pipeline

from pooled_models import PooledForSequenceClassification, export_onnx

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]  # whole train.py runs

# Far past --max_seq_length 12 and the tiny backbone's 64 positions (about 500 tokens).
LONG = "The football match went on and on, and the team kept scoring goals. " * 35
SHORT = "We watched the football match."


def files(tmp_path: Path) -> list[str]:
    train_file = write_rows(tmp_path / "train.jsonl", topic_rows(24))
    test_file = write_rows(tmp_path / "test.jsonl", [{"text": LONG}, {"text": SHORT}])
    return ["--train_file", str(train_file), "--test_file", str(test_file), "--do_train", "--do_predict"]


def predicted_scores(folder: Path, labels: list[str]) -> list[list[float]]:
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    return [[row["scores"][label] for label in labels] for row in rows]


def test_a_short_max_seq_length_is_saved_and_every_path_gives_the_predictions_scores(
    tiny_backbone_path, tmp_path, capsys
):
    # Mean pooling: encode gives one vector per text, which the head scores (label text gives one per label).
    flags = [*files(tmp_path), "--max_seq_length", "12", "--pooling", "mean"]
    result = train(tiny_backbone_path, tmp_path / "out", *flags)
    folder = result.output_dir
    assert "Text length: 12 tokens (from --max_seq_length)" in capsys.readouterr().out
    # Saved with the model: its config, the tokenizer's limit, and the sentence-transformers file vLLM reads.
    assert json.loads((folder / "config.json").read_text())["max_seq_length"] == 12
    assert json.loads((folder / "tokenizer_config.json").read_text())["model_max_length"] == 12
    assert json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"] == 12
    model = PooledForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    labels = [model.config.id2label[index] for index in range(model.config.num_labels)]
    predicted = torch.tensor(predicted_scores(folder, labels))
    # The pipeline, as users call it
    classify = pipeline("text-classification", model=str(folder))
    answers = classify([LONG, SHORT], top_k=None)
    piped = torch.tensor(
        [[{a["label"]: a["score"] for a in row}[label] for label in labels] for row in answers]
    )
    torch.testing.assert_close(piped, predicted, atol=1e-4, rtol=0)
    # encode's pooled vectors through the head
    pooled = torch.as_tensor(model.encode([LONG, SHORT], normalize_embeddings=False))
    with torch.no_grad():
        encoded = model.classifier.logits(pooled).softmax(-1)
    torch.testing.assert_close(encoded, predicted, atol=1e-4, rtol=0)
    # ONNX Runtime, fed by the saved tokenizer with truncation=True
    import onnxruntime

    path = export_onnx(model, tmp_path / "model.onnx")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = {item.name for item in session.get_inputs()}
    onnx_scores = []
    for text in (LONG, SHORT):
        batch = tokenizer(text, truncation=True, return_tensors="np")
        assert batch["input_ids"].shape[1] <= 12
        (logits,) = session.run(None, {name: batch[name].astype(np.int64) for name in names})
        onnx_scores.append(torch.from_numpy(logits[0]).softmax(-1))
    torch.testing.assert_close(torch.stack(onnx_scores), predicted, atol=1e-4, rtol=0)
    # Control: cut at another length, the long text's scores differ (the cut is what the paths agree on).
    with torch.no_grad():
        at_64 = model(**tokenizer(LONG, truncation=True, max_length=64, return_tensors="pt")).logits.softmax(
            -1
        )
    assert float((at_64[0] - predicted[0]).abs().max()) > 1e-4


def sentence_transformers_folder(backbone: str, folder: Path, max_seq_length: int) -> Path:
    """The tiny backbone as a sentence-transformers folder (Transformer, mean Pooling) stating its own length."""
    shutil.copytree(backbone, folder)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "mean"}))
    return folder


def test_without_the_flag_the_length_is_the_backbones_own(tiny_backbone_path, tmp_path, capsys):
    """A sentence-transformers folder's max_seq_length is its embeddings' serving length: a classifier trained from it
    reads what the backbone reads, and the line says why (issue 48, item 10; bench/results/text_length/report.md)."""
    backbone = sentence_transformers_folder(tiny_backbone_path, tmp_path / "st", 24)
    set_aside = (
        "Text length: 64 tokens (from the backbone's positions; not its sentence_bert_config.json's 24, the length "
        "its embeddings are served at: a classifier reads the rest of a long text, measured in "
        "bench/results/text_length/report.md)"
    )
    sequence = train(str(backbone), tmp_path / "sequence", *files(tmp_path)).output_dir
    assert set_aside in capsys.readouterr().out
    assert json.loads((sequence / "config.json").read_text())["max_seq_length"] == 64
    # A token task reads the backbone's length too.
    token_data = write_rows(tmp_path / "entities.jsonl", entity_rows(12))
    flags = [
        "--train_file",
        str(token_data),
        "--words_column",
        "words",
        "--tags_column",
        "tags",
        "--do_train",
    ]
    token = train(str(backbone), tmp_path / "token", *flags).output_dir
    assert set_aside in capsys.readouterr().out
    assert json.loads((token / "tokenizer_config.json").read_text())["model_max_length"] == 64
    # Continuing a saved model: its length, or another one asked for (its tokenizer's saved length is no limit).
    shorter = train(
        str(sequence), tmp_path / "shorter", *files(tmp_path), "--max_seq_length", "24"
    ).output_dir
    assert "Text length: 24 tokens (from --max_seq_length)" in capsys.readouterr().out
    train(str(shorter), tmp_path / "again", *files(tmp_path))
    assert "Text length: 24 tokens (from the saved model's max_seq_length)" in capsys.readouterr().out
    longer = train(str(shorter), tmp_path / "longer", *files(tmp_path), "--max_seq_length", "48").output_dir
    assert "Text length: 48 tokens (from --max_seq_length)" in capsys.readouterr().out
    assert json.loads((longer / "tokenizer_config.json").read_text())["model_max_length"] == 48
    # A plain backbone: its tokenizer's 512, capped at its 64 positions, with nothing set aside to say.
    plain = train(tiny_backbone_path, tmp_path / "plain", *files(tmp_path)).output_dir
    assert "Text length: 64 tokens (from the backbone's positions);" in capsys.readouterr().out
    assert json.loads((plain / "config.json").read_text())["max_seq_length"] == 64


def test_document_modes_default_window_is_the_length_the_same_run_cuts_at(
    tiny_backbone_path, tmp_path, capsys
):
    """One length decision (issue 54, item 2): a run in document mode without --document_window reads windows of the
    length the same run without document mode cuts at, a sentence-transformers folder's max_seq_length set aside in
    both (it once gave the window the folder's 24 while the cut run read 64)."""
    backbone = sentence_transformers_folder(tiny_backbone_path, tmp_path / "st", 24)
    cut = train(str(backbone), tmp_path / "cut", *files(tmp_path), "--pooling", "mean").output_dir
    cut_length = json.loads((cut / "config.json").read_text())["max_seq_length"]
    assert cut_length == 64
    flags = [*files(tmp_path), "--pooling", "mean", "--document_mode", "true"]
    windows = train(str(backbone), tmp_path / "windows", *flags).output_dir
    assert json.loads((windows / "config.json").read_text())["document_window"] == cut_length
    assert f"windows of {cut_length} tokens" in capsys.readouterr().out


@pytest.mark.parametrize(
    "tokenizer_limit, origin", [(32, "the tokenizer's model_max_length"), (512, "the backbone's positions")]
)
def test_the_length_line_names_the_limit_that_binds_a_label_token_model(tmp_path, tokenizer_limit, origin):
    from types import SimpleNamespace

    from helpers import tiny_model

    from pooled_models.train.model import backbone_max_length, choose_max_length

    model = tiny_model("label_tokens", label_token_init="random")  # its label tokens come off either limit
    tokenizer = SimpleNamespace(model_max_length=tokenizer_limit)
    source = SimpleNamespace(
        path=str(tmp_path), saved=False, hub_kwargs=dict
    )  # a folder with no stated length
    length, named = choose_max_length(None, tokenizer, model, source)
    assert length == backbone_max_length(tokenizer, model) and 0 < model.added_tokens
    assert named == origin


def test_a_saved_model_only_predicted_with_stays_where_it_is_and_another_length_is_warned_of(
    tiny_backbone_path, tmp_path, capsys, caplog
):
    """Issue 48: a run without --do_train on a saved model publishes predictions and metrics, no copy of the model,
    and names the model where it is; a --max_seq_length other than the trained one is warned of by name."""
    flags = [*files(tmp_path), "--max_seq_length", "12", "--pooling", "mean"]
    trained = train(tiny_backbone_path, tmp_path / "trained", *flags).output_dir
    test_file = str(tmp_path / "test.jsonl")
    capsys.readouterr()  # the training run's summary names the trained folder too
    as_saved = train(str(trained), tmp_path / "as_saved", "--test_file", test_file, "--do_predict").output_dir
    printed = capsys.readouterr().out
    assert sorted(path.name for path in as_saved.iterdir()) == [
        "all_results.json",
        "pooled_models_run.json",
        "predictions.jsonl",
        "training_args.json",
    ]
    assert f'pipeline("text-classification", model={json.dumps(str(trained))})' in printed
    assert str(as_saved) not in printed.split("Use it:")[1] and "no copy saved" in printed
    assert "trained at" not in caplog.text
    # Read at its own length: the scores the training run predicted (control below: another length moves them).
    labels = sorted(json.loads((trained / "config.json").read_text())["label2id"])
    np.testing.assert_allclose(
        predicted_scores(as_saved, labels), predicted_scores(trained, labels), atol=1e-5
    )

    longer = train(
        str(trained), tmp_path / "longer", "--test_file", test_file, "--do_predict", "--max_seq_length", "24"
    ).output_dir
    (warning,) = [record for record in caplog.records if "trained at" in record.getMessage()]
    assert warning.levelname == "WARNING"
    assert warning.getMessage().startswith(
        "The model was trained at 12 tokens (its max_seq_length); this run cuts texts at 24"
    )
    assert not (longer / "config.json").exists()  # no copy saved at 24
    assert json.loads((trained / "config.json").read_text())["max_seq_length"] == 12
    long_text = 0  # files() writes the long text first
    moved = np.subtract(
        predicted_scores(longer, labels)[long_text], predicted_scores(trained, labels)[long_text]
    )
    assert np.abs(moved).max() > 1e-4
