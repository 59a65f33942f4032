"""The fortunes benchmark: which topic file of Debian's ``fortunes`` package a quotation comes from.

Real English text of every length, available offline from a package registry (``apt-get install
fortunes``), with topics that overlap (``wisdom``, ``platitudes``, ``miscellaneous``...), so it separates
good classifiers from bad ones. Each topic file with at least ``min_quotations`` quotations is a class.
The split is stratified and fixed by a seed, so every benchmark on it sees the same rows.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

from .splits import SPLITS, split_by_fractions

__all__ = [
    "FORTUNES_DIR",
    "FortunesMissing",
    "ensure_fortunes",
    "read_fortune_file",
    "build_fortunes",
    "write_fortunes",
]

FORTUNES_DIR = Path("/usr/share/games/fortunes")


class FortunesMissing(RuntimeError):
    """The fortunes package is not installed and could not be installed."""


def ensure_fortunes(directory: Path = FORTUNES_DIR, install: bool = True) -> Path:
    """The folder of fortune files, installing Debian's ``fortunes`` package first when it is missing and we can."""
    if _has_fortunes(directory):
        return directory
    if install and directory == FORTUNES_DIR and shutil.which("apt-get"):
        print("The fortunes package is missing; installing it with apt-get (Debian's package registry).")
        subprocess.run(["apt-get", "install", "-y", "-q", "fortunes"], check=False)
        if not _has_fortunes(directory):  # a stale package index: update once and retry
            subprocess.run(["apt-get", "update", "-q"], check=False)
            subprocess.run(["apt-get", "install", "-y", "-q", "fortunes"], check=False)
    if not _has_fortunes(directory):
        raise FortunesMissing(
            f"No fortune files in {directory}. Install Debian's fortunes package (apt-get install fortunes, as "
            "root) and run this again."
        )
    return directory


def _has_fortunes(directory: Path) -> bool:
    return directory.is_dir() and any(_topic_files(directory))


def _topic_files(directory: Path):
    # Each topic is a plain file; .dat is fortune's index and .u8 a link to the same text.
    for path in sorted(directory.iterdir()):
        if path.is_file() and not path.is_symlink() and not path.suffix:
            yield path


def _undo_overstrike(text: str) -> str:
    # Some fortunes underline words the teletype way: "____\b\b\b\bword". A backspace erases the character before it.
    characters: list[str] = []
    for character in text:
        if character == "\b":
            if characters:
                characters.pop()
        else:
            characters.append(character)
    return "".join(characters)


def read_fortune_file(path: Path) -> list[str]:
    """The quotations of one fortune file, whitespace normalised (quotations are separated by ``%`` lines)."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    quotations = re.split(r"^%\s*$", raw, flags=re.MULTILINE)
    cleaned = (" ".join(_undo_overstrike(quotation).split()) for quotation in quotations)
    return [quotation for quotation in cleaned if quotation]


def build_fortunes(
    directory: Path | None = None,
    min_quotations: int = 150,
    max_per_class: int | None = None,
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
    seed: int = 0,
) -> dict[str, list[dict[str, str]]]:
    """``{"train": rows, "validation": rows, "test": rows}`` with rows ``{"text": ..., "label": topic}``.

    A quotation found in more than one topic file has no single right answer and is left out. Topics with
    fewer than ``min_quotations`` quotations left are left out. ``max_per_class`` subsamples each topic (with
    the same seed) to bound the benchmark's run time; each topic is split by ``split_fractions``.
    """
    directory = ensure_fortunes() if directory is None else directory
    by_topic = {path.name: read_fortune_file(path) for path in _topic_files(directory)}
    topics_of = Counter(quotation for quotations in by_topic.values() for quotation in set(quotations))
    rng = random.Random(seed)
    splits: dict[str, list[dict[str, str]]] = {name: [] for name in SPLITS}
    for topic, quotations in sorted(by_topic.items()):
        unique = sorted({quotation for quotation in quotations if topics_of[quotation] == 1})
        if len(unique) < min_quotations:
            continue
        rng.shuffle(unique)
        if max_per_class is not None:
            unique = unique[:max_per_class]
        for name, texts in split_by_fractions(unique, split_fractions).items():
            splits[name].extend({"text": text, "label": topic} for text in texts)
    if not splits["train"]:
        raise ValueError(f"No topic in {directory} has {min_quotations} quotations or more.")
    for rows in splits.values():
        rng.shuffle(rows)
    return splits


def write_fortunes(folder: Path, **build_kwargs) -> dict[str, Path]:
    """Write the benchmark as ``train.csv``, ``validation.csv`` and ``test.csv`` in ``folder``."""
    import csv

    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, rows in build_fortunes(**build_kwargs).items():
        paths[name] = folder / f"{name}.csv"
        with open(paths[name], "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=["text", "label"])
            writer.writeheader()
            writer.writerows(rows)
    return paths
