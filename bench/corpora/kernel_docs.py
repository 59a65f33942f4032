"""A second corpus of long texts: which part of the Linux kernel's documentation a page belongs to.

Offline, from Debian's ``linux-doc-6.1`` package (``apt-get install linux-doc-6.1``, or ``apt-get download
linux-doc-6.1 && dpkg -x linux-doc-6.1_*.deb ROOT`` without installing it): the reStructuredText and text sources under
``/usr/share/doc/linux-doc-6.1/Documentation``, each page labelled by its top-level folder (``admin-guide``,
``driver-api``, ``filesystems``, ``networking``, ``userspace-api``), the five with more than 100 pages of at least
``min_words`` words. Markup is thinned to the words: underline rows of headings, directives (``.. code-block::``) and
field lines (``:Author:``) are dropped, the rest joined by spaces. Nearly every page is longer than a window of 128
tokens, and the words past it are worth 10 points to TF-IDF (docs/long-documents.md):

    python -m corpora.kernel_docs OUT       # from bench/: OUT/train.csv, validation.csv, test.csv, pages.json
"""

from __future__ import annotations

import csv
import gzip
import json
import random
import re
import sys
from pathlib import Path

from .splits import SPLITS, split_by_fractions

__all__ = ["DOC_DIR", "FOLDERS", "KernelDocsMissing", "page_text", "build_kernel_docs", "write_kernel_docs"]

DOC_DIR = Path("/usr/share/doc/linux-doc-6.1/Documentation")
FOLDERS = ("admin-guide", "driver-api", "filesystems", "networking", "userspace-api")
# A heading's underline or overline, a table's border: a row of one punctuation mark.
_RULE = re.compile(r"([=\-~^*#+`:.'\"])\1{2,}")


class KernelDocsMissing(RuntimeError):
    """No kernel documentation under the folder given."""


def page_text(source: str) -> str:
    """A page's words: its non-empty lines less heading rules, directives and field lines, joined by spaces."""
    kept = []
    for line in source.splitlines():
        line = line.strip()
        if not line or _RULE.fullmatch(line) or line.startswith(("..", ":")):
            continue
        kept.append(line)
    return " ".join(kept)


def _pages(folder: Path, min_words: int) -> list[tuple[str, str]]:
    """(page path, text) of every page under ``folder`` with ``min_words`` words or more, in path order."""
    pages = []
    for path in sorted(folder.rglob("*")):
        if not path.name.endswith((".rst", ".txt", ".rst.gz", ".txt.gz")):
            continue
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
            text = page_text(handle.read())
        if len(text.split()) >= min_words:
            pages.append((str(path.relative_to(folder.parent)), text))
    return pages


def build_kernel_docs(
    directory: Path = DOC_DIR,
    max_per_folder: int = 200,
    min_words: int = 50,
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
    seed: int = 0,
) -> dict[str, list[dict[str, str]]]:
    """``{"train", "validation", "test"}`` rows ``{"text", "label", "page"}``: up to ``max_per_folder`` pages of each
    of ``FOLDERS``, drawn with ``seed`` and split by ``split_fractions`` within the folder."""
    rng = random.Random(seed)
    splits: dict[str, list[dict[str, str]]] = {name: [] for name in SPLITS}
    for label in FOLDERS:
        pages = _pages(directory / label, min_words)
        if not pages:
            raise KernelDocsMissing(
                f"No page under {directory / label}: apt-get install linux-doc-6.1 (as root), or give the "
                "Documentation folder of an unpacked linux-doc-6.1 package."
            )
        rng.shuffle(pages)
        rows = [{"text": text, "label": label, "page": page} for page, text in pages[:max_per_folder]]
        for name, part in split_by_fractions(rows, split_fractions).items():
            splits[name] += part
    for rows in splits.values():
        rng.shuffle(rows)
    return splits


def write_kernel_docs(folder: Path, **build_kwargs) -> None:
    """``train.csv``, ``validation.csv`` and ``test.csv`` (text, label) and ``pages.json`` (each row's page)."""
    splits = build_kernel_docs(**build_kwargs)
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in splits.items():
        with (folder / f"{name}.csv").open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=["text", "label"], extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
    pages = {name: [[row["page"], row["label"]] for row in rows] for name, rows in splits.items()}
    (folder / "pages.json").write_text(json.dumps(pages, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m corpora.kernel_docs", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("out", nargs="?", default="kernel_docs", help="folder for the csv files")
    parser.add_argument("--doc-dir", type=Path, default=DOC_DIR, help="the Documentation folder")
    parser.add_argument("--max-per-folder", type=int, default=200, help="pages per folder at most")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draw and of the split")
    args = parser.parse_args(sys.argv[1:])
    write_kernel_docs(
        Path(args.out), directory=args.doc_dir, max_per_folder=args.max_per_folder, seed=args.seed
    )
