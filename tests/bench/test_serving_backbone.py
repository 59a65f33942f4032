"""bench/serving*.py's --backbone: the folder reaches what the run loads (stopped there: vLLM is not needed), and the
real-backbone row of serving_backbones.py. These scripts run in the vLLM venv; here a stand-in vllm module lets their
main start."""

import json
import sys
import types

import pytest


class Loaded(Exception):
    pass


@pytest.fixture
def folder(tmp_path):
    path = tmp_path / "my-backbone"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    return path


@pytest.fixture(autouse=True)
def stand_in_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0"))


def stop_at_tokenizer(monkeypatch, module, loaded: list) -> None:
    class Tokenizer:
        @staticmethod
        def from_pretrained(path):
            loaded.append(str(path))
            raise Loaded

    monkeypatch.setattr(module, "AutoTokenizer", Tokenizer)


@pytest.mark.parametrize("name", ["serving", "serving_documents"])
def test_backbone_path_is_the_folder_the_checkpoint_is_built_on(monkeypatch, folder, name, tmp_path):
    module = __import__(name)
    loaded = []
    stop_at_tokenizer(monkeypatch, module, loaded)
    with pytest.raises(Loaded):
        module.main(["--backbone", str(folder), "--output", str(tmp_path / "out")])
    assert loaded == [str(folder)]


def test_serving_names_the_backbone_it_built_on_and_minilm_as_stored():
    import serving

    assert serving.described("minilm") == "packaged all-MiniLM-L6-v2"
    assert serving.described("mpnet") == "sentence-transformers/all-mpnet-base-v2"


def test_serving_backbones_puts_the_backbone_in_the_bert_row(monkeypatch, folder, tmp_path):
    import serving_backbones
    from serving_backbones import BACKBONES, MINILM_ROW, run_backbones

    assert run_backbones("minilm", "unused") == BACKBONES  # MiniLM's run: the rows as stored
    table = run_backbones(str(folder), str(folder))
    assert list(table) == ["bert (my-backbone)", *(name for name in BACKBONES if name != MINILM_ROW)]
    assert table["bert (my-backbone)"] == BACKBONES[MINILM_ROW]  # a BERT: vLLM's own classifier beside it
    (folder / "config.json").write_text(json.dumps({"model_type": "mpnet"}))
    assert run_backbones(str(folder), str(folder))["mpnet (my-backbone)"] == (
        "mean",
        None,
    )  # transformers route

    seen = []

    def stop(backbone, real):
        seen.append((backbone, real))
        raise Loaded

    monkeypatch.setattr(
        serving_backbones, "AutoTokenizer", types.SimpleNamespace(from_pretrained=lambda path: None)
    )
    monkeypatch.setattr(serving_backbones, "run_backbones", stop)
    with pytest.raises(Loaded):
        serving_backbones.main(["--backbone", str(folder), "--output", str(tmp_path / "out")])
    assert seen == [(str(folder), str(folder))]
