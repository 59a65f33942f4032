"""bench/embeddings.py: the texts it chooses, and (slow) one short run in which both sides' embeddings agree."""

import pytest
from corpora.fortunes import FORTUNES_DIR
from embeddings import LENGTHS, TOLERANCE, choose_by_length, main, workloads
from helpers import named_backbone_folder


def test_texts_are_chosen_by_length_and_mixed_in_a_fixed_order():
    texts = [f"{'x' * length}{index}" for index, length in enumerate(range(5, 600, 5))]
    groups = choose_by_length(texts, per_length=4, seed=1)
    assert list(groups) == ["short", "medium", "long"]
    for name, chosen in groups.items():
        low, high = LENGTHS[name]
        assert len(chosen) == 4 and len(set(chosen)) == 4
        assert all(low <= len(text) < high for text in chosen)
    assert choose_by_length(texts, per_length=4, seed=1) == groups  # fixed by the seed
    everything = choose_by_length(texts, per_length=1000)  # fewer texts than asked for: all of them
    assert sorted(everything["short"]) == sorted(text for text in texts if len(text) < 80)
    runs = workloads(groups, seed=1)
    assert list(runs) == ["short", "medium", "long", "mixed"]
    assert sorted(runs["mixed"]) == sorted(text for chosen in groups.values() for text in chosen)
    assert runs["mixed"] != [text for chosen in groups.values() for text in chosen]  # shuffled


@pytest.mark.slow  # loads all-MiniLM-L6-v2 twice and embeds a few dozen quotations
@pytest.mark.skipif(not FORTUNES_DIR.is_dir(), reason="Debian's fortunes package is not installed")
def test_a_short_run_finds_both_sides_embeddings_equal_and_stores_its_report(capsys, tmp_path):
    argv = ["--per-length", "4", "--rounds", "1", "--warmup", "0"]
    argv += ["--output", str(tmp_path / "r" / "report.md")]
    main(argv)
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]  # no header
    assert [row.split(" | ")[0] for row in table] == ["| short", "| medium", "| long", "| mixed"]
    for row in table:
        cells = row.strip("| ").split(" | ")
        assert float(cells[-2]) <= TOLERANCE and cells[-1] == "yes", row
    stored = (tmp_path / "r" / "report.md").read_text()
    assert stored.startswith(f"Command: python bench/embeddings.py {' '.join(argv)}\n")
    assert all(row in stored for row in table) and "torch " in stored


def test_backbone_names_the_folder_both_sides_load(monkeypatch, tmp_path):
    """--backbone PATH: sentence-transformers and ours load that folder (stopped at the first load here)."""
    import sys
    import types

    import embeddings

    folder = named_backbone_folder(tmp_path)
    loaded = []

    class Loaded(Exception):
        pass

    def sentence_transformer(path, **settings):
        loaded.append(path)
        raise Loaded

    fake = types.ModuleType("sentence_transformers")
    fake.SentenceTransformer, fake.__version__ = sentence_transformer, "0"
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    monkeypatch.setattr(embeddings, "fortunes_by_length", lambda per_length, seed: {"short": ["a"]})
    with pytest.raises(Loaded):
        main(["--backbone", str(folder)])
    assert loaded == [str(folder)]
    assert embeddings.shown(str(folder)) == "my-backbone" and embeddings.shown("minilm") == "all-MiniLM-L6-v2"
