"""The fortunes corpus builder (bench/corpora/fortunes.py): topic files split and cleaned, shared quotations dropped."""

import random
from pathlib import Path

from corpora.fortunes import build_fortunes, read_fortune_file


def write_topic(folder: Path, name: str, quotations: list[str]) -> None:
    (folder / name).write_text("\n%\n".join(quotations) + "\n%\n")
    (folder / f"{name}.dat").write_bytes(b"\x00index")  # fortune's index files are skipped
    (folder / f"{name}.u8").symlink_to(name)


def test_fortune_files_are_split_and_cleaned(tmp_path):
    (tmp_path / "topic").write_text("First\n  line two\n%\nUnder_\bscored ____\b\b\b\bword\n%\n\n%\n")
    assert read_fortune_file(tmp_path / "topic") == ["First line two", "Underscored word"]


def test_fortunes_builder_keeps_large_topics_and_drops_shared_quotations(tmp_path):
    rng = random.Random(0)
    shared = "A quotation filed under two topics"
    write_topic(tmp_path, "big", [f"big {i} {rng.random()}" for i in range(40)] + [shared])
    write_topic(tmp_path, "also_big", [f"also {i}" for i in range(30)] + [shared])
    write_topic(tmp_path, "small", [f"small {i}" for i in range(5)])
    splits = build_fortunes(tmp_path, min_quotations=20, split_fractions=(0.6, 0.2, 0.2), seed=3)
    rows = [row for split in splits.values() for row in split]
    assert {row["label"] for row in rows} == {"big", "also_big"}
    assert shared not in {row["text"] for row in rows}
    assert sum(row["label"] == "big" for row in splits["train"]) == 24 and len(splits["test"]) == 8 + 6
    assert build_fortunes(tmp_path, min_quotations=20, seed=3) == splits  # fixed by the seed
    capped = build_fortunes(tmp_path, min_quotations=20, max_per_class=10, seed=3)
    assert sum(len(split) for split in capped.values()) == 20
