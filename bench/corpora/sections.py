"""A zero-shot task from Debian's archive: which section a package is filed under (``games``, ``mail``...), read
from its description, trained on some sections and asked about others by name (issue 42's first-day task).

Offline, from apt's package lists (``apt-cache dumpavail``): each package once, its short description (and, with
``long_description``, the first paragraph of the long one), its section without the archive area (``contrib/games``
is ``games``). The seen sections give the training and validation files, the unseen ones the zero-shot file, so
``train.py --zero_shot_file`` measures what label-text training adds on labels it never saw:

    python -m corpora.sections OUT          # from bench/: OUT/train.csv, validation.csv, zero_shot.csv
"""

from __future__ import annotations

import csv
import random
import sys
from collections import defaultdict
from pathlib import Path

from .debtags import _description, _dumpavail, parse_stanzas

__all__ = ["SEEN", "UNSEEN", "read_sections", "build_sections", "write_sections"]

# Sections with plain-word names and a few hundred packages or more each, apart in meaning.
SEEN = ("games", "science", "sound", "graphics", "fonts", "math", "web", "admin")
UNSEEN = ("net", "text", "x11", "editors", "mail", "video", "database")


def read_sections(text: str, long_description: bool = False) -> dict[str, list[str]]:
    """Section -> the descriptions of its packages (each package once: its first stanza), from a dumpavail text."""
    by_section: dict[str, list[str]] = defaultdict(list)
    seen: set[str] = set()
    for stanza in parse_stanzas(text):
        name, section = stanza.get("Package"), stanza.get("Section", "")
        description = _description(stanza.get("Description", ""), long_description)
        if not name or name in seen or not section or not description:
            continue
        seen.add(name)
        by_section[section.split("/")[-1]].append(description)
    return dict(by_section)


def build_sections(
    by_section: dict[str, list[str]],
    seen=SEEN,
    unseen=UNSEEN,
    train_rows: int = 100,
    validation_rows: int = 30,
    zero_shot_rows: int = 40,
    seed: int = 0,
) -> dict[str, list[dict[str, str]]]:
    """``{"train", "validation", "zero_shot"}`` rows ``{"text", "label"}``: per seen section ``train_rows`` and
    ``validation_rows`` packages, per unseen one ``zero_shot_rows``, drawn with ``seed`` (fewer where a section has
    fewer); a description shared by several packages is kept once, in the first section it was drawn for."""
    rng = random.Random(seed)
    used: set[str] = set()
    splits: dict[str, list[dict[str, str]]] = {"train": [], "validation": [], "zero_shot": []}
    wanted = [(section, {"train": train_rows, "validation": validation_rows}) for section in seen]
    wanted += [(section, {"zero_shot": zero_shot_rows}) for section in unseen]
    for section, counts in wanted:
        texts = [text for text in sorted(set(by_section.get(section, []))) if text not in used]
        rng.shuffle(texts)
        for split, count in counts.items():
            chosen, texts = texts[:count], texts[count:]
            used.update(chosen)
            splits[split] += [{"text": text, "label": section} for text in chosen]
    for rows in splits.values():
        rng.shuffle(rows)
    return splits


def write_sections(folder: Path, text: str | None = None, **build_kwargs) -> dict[str, Path]:
    """The three files, as train.py reads them (csv with the columns text and label)."""
    by_section = read_sections(_dumpavail() if text is None else text)
    if not by_section:
        raise RuntimeError("apt-cache dumpavail lists no package: this needs a Debian or Ubuntu machine.")
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, rows in build_sections(by_section, **build_kwargs).items():
        paths[split] = folder / f"{split}.csv"
        with paths[split].open("w", newline="", encoding="utf-8") as out:
            writer = csv.DictWriter(out, fieldnames=["text", "label"])
            writer.writeheader()
            writer.writerows(rows)
    return paths


if __name__ == "__main__":
    for split, path in write_sections(Path(sys.argv[1] if len(sys.argv) > 1 else "sections")).items():
        print(f"{split}: {path}")
