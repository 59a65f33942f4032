"""bench/long_documents.py: the arms read what their names say. The controls of issue 46's benchmark (TF-IDF on the
text cut at the window, the model cut at twice the window) are what tell whether a corpus has words past the window
worth reading, so a control that read the wrong text would make the benchmark's conclusion wrong."""

import csv
import json

import long_documents
import pytest
from backbones import minilm_folder
from long_documents import CUT, CUT_TWICE, HEAD_TAIL, TFIDF, TFIDF_CUT, arm_flags, head_only, main
from long_documents_vectors import VECTOR_ARMS

FILLER = " ".join(
    ["the program reads its input and writes its output"] * 30
)  # ~270 tokens, the same for both


def write_split(folder, name, rows):
    with (folder / f"{name}.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows(rows)


def test_each_arm_reads_text_at_its_own_length():
    def length(flags):
        return int(flags[flags.index("--max_seq_length") + 1])

    assert length(arm_flags(CUT, 128)) == length(arm_flags(HEAD_TAIL, 128)) == 128
    assert length(arm_flags(CUT_TWICE, 128)) == 256
    document = arm_flags("document, mean", 128)
    assert length(document) == 128 and document[document.index("--document_window") + 1] == "128"


def test_head_only_keeps_the_first_window_of_tokens():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_folder())
    short = "The open() system call opens a file."
    assert head_only(short, tokenizer, 128) == short
    head = head_only(FILLER + " alpha", tokenizer, 128)
    assert len(tokenizer(head)["input_ids"]) == 128
    assert FILLER.startswith(head) and "alpha" not in head


def label_word_past_the_window(tmp_path):
    """Long texts of the same filler whose label's word is their last; short texts that name it."""
    data = tmp_path / "data"
    data.mkdir()
    for split, count in (("train", 20), ("validation", 10), ("test", 10)):
        rows = [
            {"text": f"{FILLER} {word}", "label": word} for word in ("alpha", "beta") for _ in range(count)
        ]
        rows += [{"text": f"a short text on {word}", "label": word} for word in ("alpha", "beta")] * 3
        write_split(data, split, rows)
    return data


def test_tfidf_on_the_cut_text_misses_the_words_past_the_window(tmp_path):
    """The label's word sits past the first window of 128 tokens: TF-IDF on the whole text finds it, on the cut text
    it cannot, and the stored report says so, arm by arm."""
    data = label_word_past_the_window(tmp_path)
    output = tmp_path / "results"
    main(["--data", str(data), "--output", str(output), "--arms", TFIDF, TFIDF_CUT])
    arms = json.loads((output / "report.json").read_text())["arms"]
    whole, cut = (arms[arm]["runs"][0]["scores"] for arm in (TFIDF, TFIDF_CUT))
    assert whole["long_accuracy"] == 1.0
    # cut, every long text is the same filler: one label for all of them, right on half
    assert cut["long_accuracy"] == 0.5
    assert f"| {TFIDF_CUT} | 1 |" in (output / "report.md").read_text()


def test_the_backbones_first_window_vector_misses_the_word_past_the_window_and_the_windows_mean_finds_it(
    tmp_path,
):
    first, mean, both = VECTOR_ARMS
    output = tmp_path / "results"
    main(
        [
            "--data",
            str(label_word_past_the_window(tmp_path)),
            "--output",
            str(output),
            "--arms",
            first,
            mean,
            both,
        ]
    )
    arms = json.loads((output / "report.json").read_text())["arms"]
    scores = {arm: arms[arm]["runs"][0]["scores"] for arm in VECTOR_ARMS}
    assert scores[first]["long_accuracy"] == 0.5  # every long text's first window is the same filler
    assert scores[mean]["long_accuracy"] == scores[both]["long_accuracy"] == 1.0
    assert scores[first]["short_accuracy"] == 1.0


def test_the_report_says_how_far_first_plus_rest_opened_its_gate(tmp_path):
    """The gate's opening is what tells a first_plus_rest run that read the rest of the document from one that stayed
    the cut model; it is read from the saved weights, and only a model with a gate has it."""
    import torch
    from safetensors.torch import save_file

    gated, plain = tmp_path / "gated", tmp_path / "plain"
    gated.mkdir(), plain.mkdir()
    save_file(
        {"classifier.document_pooler.across.gate": torch.tensor([0.1, -0.5, 0.0, 0.2])},
        gated / "model.safetensors",
    )
    save_file({"classifier.head.out_proj.bias": torch.zeros(2)}, plain / "model.safetensors")
    opening = long_documents.gate_opening(gated)
    assert opening == {"gate_mean": pytest.approx(0.2), "gate_max": pytest.approx(0.5)}
    assert long_documents.gate_opening(plain) == {}
    run = {"seed": 1, "seconds": 1.0, "scores": {"all_accuracy": 1.0}, **opening}
    report = {"arms": {"document, first_plus_rest": {"runs": [run]}, CUT: {"runs": [{"seed": 0}]}}}
    assert long_documents.gate_lines(report) == [
        "",
        "document, first_plus_rest: the gate after training, mean (largest) |value| over its dimensions: seed 1 0.200 "
        "(0.500).",
    ]


def test_a_gate_rate_reaches_first_plus_rest_only_and_keeps_its_runs_apart(tmp_path, monkeypatch):
    """--document-gate-learning-rate is a training setting: the first_plus_rest arms get it (no other pooling has a
    gate), and a stored report of another gate rate is started afresh rather than merged into one table."""
    flags = arm_flags("document, first_plus_rest", 128, 0.15)
    assert flags[flags.index("--document_gate_learning_rate") + 1] == "0.15"
    assert "--document_gate_learning_rate" not in arm_flags("document, first_plus_rest", 128)
    assert "--document_gate_learning_rate" not in arm_flags("document, attention", 128, 0.15)
    assert "--document_gate_learning_rate" not in arm_flags(CUT, 128, 0.15)

    monkeypatch.setattr(long_documents.tempfile, "gettempdir", lambda: str(tmp_path))
    path = tmp_path / "report.json"
    settings = {key: "1" for key in long_documents.SAME_CORPUS_AND_TRAINING}

    def one(rate, seed):
        run = {"seed": seed, "seconds": 1.0, "scores": {"all_accuracy": 0.5}}
        arms = {"document, first_plus_rest": {"runs": [run]}}
        return {
            "settings": {**settings, "document_gate_learning_rate": rate},
            "command": f"c{seed}",
            "arms": arms,
        }

    long_documents.merged_with_stored(one("None", 0), path)
    merged = long_documents.merged_with_stored(one("None", 1), path)
    assert [run["seed"] for run in merged["arms"]["document, first_plus_rest"]["runs"]] == [0, 1]
    fresh = long_documents.merged_with_stored(one("0.15", 2), path)
    assert [run["seed"] for run in fresh["arms"]["document, first_plus_rest"]["runs"]] == [2]
    assert fresh["commands"] == ["c2"]
    assert long_documents.gate_setting(fresh) == ", first_plus_rest's gate learning rate 0.15"
    stored_before_the_setting = {"settings": {"epochs": "2"}}
    assert long_documents.gate_setting(stored_before_the_setting) == ""


def test_keeping_only_measures_which_windows_reach_the_words_at_the_end(tmp_path):
    """--keeping-only (bench/results/long_documents/keeping.md, behind --window_keeping's default): the label's word is
    the last of every long text, so at a cap of 2 windows only the choices that keep the end read it."""
    output = tmp_path / "results"
    main(["--data", str(label_word_past_the_window(tmp_path)), "--output", str(output), "--keeping-only"])
    text = (output / "keeping.md").read_text()
    assert text.startswith("Command: python bench/long_documents.py --data ")
    header = next(line for line in text.splitlines() if line.startswith("| windows kept"))
    row = next(line for line in text.splitlines() if line.startswith("| 2 |"))
    scores = dict(zip(header.strip("| ").split(" | ")[1:], row.strip("| ").split(" | ")[1:], strict=True))
    assert scores["start"] == "0.500" and scores["start_end"] == "1.000" and scores["every window"] == "1.000"
