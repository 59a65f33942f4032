"""The archive-sections builder (bench/corpora/sections.py), on a constructed apt-cache dumpavail text (no apt call):
files train.py reads, the unseen sections only in the zero-shot file."""

import csv

from corpora.sections import build_sections, read_sections, write_sections

DUMPAVAIL = "\n\n".join(
    f"Package: {name}\nVersion: 1\nSection: {section}\nDescription: {text}\n second line of the long description\n"
    for name, section, text in [
        ("chess", "games", "board game for two"),
        ("chess", "net", "a second stanza of chess, ignored"),
        ("tetris", "contrib/games", "falling blocks"),
        ("gimp", "graphics", "image editor"),
        ("inkscape", "graphics", "vector drawing"),
        ("mutt", "mail", "text mail reader"),
        ("pine", "non-free/mail", "another mail reader"),
        ("vim", "editors", "vi improved"),
        ("twin", "editors", "vi improved"),  # the same description under another package: kept once
    ]
)


def test_sections_are_read_once_per_package_without_the_archive_area():
    sections = read_sections(DUMPAVAIL)
    assert sections == {
        "games": ["board game for two", "falling blocks"],
        "graphics": ["image editor", "vector drawing"],
        "mail": ["text mail reader", "another mail reader"],
        "editors": ["vi improved", "vi improved"],
    }
    long = read_sections(DUMPAVAIL, long_description=True)["games"][0]
    assert long == "board game for two second line of the long description"


def test_seen_sections_are_trained_on_and_unseen_ones_only_in_the_zero_shot_file(tmp_path):
    splits = build_sections(
        read_sections(DUMPAVAIL),
        seen=("games", "graphics"),
        unseen=("mail", "editors"),
        train_rows=1,
        validation_rows=1,
    )
    assert sorted(row["label"] for row in splits["train"]) == ["games", "graphics"]
    assert sorted(row["label"] for row in splits["validation"]) == ["games", "graphics"]
    assert sorted(row["text"] for row in splits["zero_shot"]) == [
        "another mail reader",
        "text mail reader",
        "vi improved",
    ]
    texts = [row["text"] for rows in splits.values() for row in rows]
    assert len(texts) == len(set(texts))  # no row in two splits
    paths = write_sections(tmp_path, DUMPAVAIL, seen=("games", "graphics"), unseen=("mail", "editors"))
    with paths["zero_shot"].open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["label"] for row in rows} == {"mail", "editors"} and set(rows[0]) == {"text", "label"}
