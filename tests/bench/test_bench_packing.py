"""bench/packing.py: --backbone names the folder the run loads."""

import packing
import pytest
from helpers import named_backbone_folder


def test_backbone_path_is_the_folder_loaded_and_named(monkeypatch, tmp_path):
    folder = named_backbone_folder(tmp_path)
    loaded = []

    class Loaded(Exception):
        pass

    class Tokenizer:
        @staticmethod
        def from_pretrained(path):
            loaded.append(path)
            raise Loaded

    monkeypatch.setattr(packing, "AutoTokenizer", Tokenizer)
    with pytest.raises(Loaded):
        packing.main(["--backbone", str(folder)])
    assert loaded == [str(folder)]
    assert packing.shown(str(folder)) == "my-backbone"
    assert packing.shown("minilm") == "MiniLM-L6"  # as the stored report (bench/results/packing.md) has it
