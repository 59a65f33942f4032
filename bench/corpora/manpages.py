"""A corpus of long texts: which section of the manual a Debian manual page belongs to, read from its DESCRIPTION.

Offline, from the manual pages installed under ``/usr/share/man/man1`` ... ``man8`` (Debian's ``manpages`` and
``manpages-dev`` packages give sections 2, 3, 4, 5 and 7; every installed program adds its own pages to 1 and 8:
``apt-get install manpages manpages-dev`` on a new machine). Each page is rendered to plain text with groff (as
``man`` would, without bold, underline or colour) and its DESCRIPTION section kept, paragraphs one per line. The
label is the section's name, so label text can read it ("system calls", "file formats"...). Links, ``.so``
redirects and pages without a DESCRIPTION are skipped; a text found in two pages is kept once (in two sections:
not at all). Sections with at least ``min_pages`` pages are classes, each capped at ``max_per_section`` pages
drawn with ``seed``, then split train/validation/test. Many descriptions run past 512 tokens:

    python -m corpora.manpages OUT          # from bench/: OUT/train.csv, validation.csv, test.csv, pages.json
"""

from __future__ import annotations

import csv
import gzip
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .splits import SPLITS, split_by_fractions

__all__ = [
    "MAN_DIR",
    "SECTION_LABELS",
    "ManpagesMissing",
    "page_files",
    "render_page",
    "description_of",
    "build_manpages",
    "write_manpages",
]

MAN_DIR = Path("/usr/share/man")
# man(1)'s names for the sections, in words label text can read.
SECTION_LABELS = {
    "1": "user commands",
    "2": "system calls",
    "3": "library functions",
    "4": "special files",
    "5": "file formats",
    "6": "games",
    "7": "overviews and conventions",
    "8": "system administration",
}
# groff as man runs it for a terminal, minus the terminal: no overstrike bold or underline (-P-b -P-u), no colour
# escapes (-P-c), no hyphenation (-rHY=0) and lines as long as a paragraph (-rLL), so a paragraph is one line.
GROFF = ["groff", "-mandoc", "-t", "-k", "-Tutf8", "-P-c", "-P-b", "-P-u", "-rHY=0", "-rLL=20000n"]


class ManpagesMissing(RuntimeError):
    """No manual page or no groff on this machine."""


def page_files(directory: Path = MAN_DIR, sections=tuple(SECTION_LABELS)) -> dict[str, list[Path]]:
    """Section number -> its page files (plain or gzipped), sorted; links are left out (the page they point to
    is read once under its own name). The section is the folder's (``man3/ssl.3ssl.gz`` is section 3)."""
    pages: dict[str, list[Path]] = {}
    for section in sections:
        folder = directory / f"man{section}"
        if folder.is_dir():
            pages[section] = sorted(
                path for path in folder.iterdir() if path.is_file() and not path.is_symlink()
            )
    return pages


def _roff_source(path: Path) -> str:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return raw.decode("utf-8", errors="replace")


def _is_redirect(source: str) -> bool:
    # A page that only says ".so man3/other.3" is another page's alias (comments may come first).
    lines = [line for line in source.splitlines() if line.strip() and not line.startswith(('.\\"', "'\\\""))]
    return len(lines) == 1 and lines[0].startswith(".so ")


def render_page(source: str, timeout: float = 20.0) -> str:
    """A page's roff source as plain text, the way ``man`` lays it out (empty when groff fails)."""
    if shutil.which("groff") is None:
        raise ManpagesMissing("groff is not installed: apt-get install groff-base (it comes with man-db).")
    try:
        done = subprocess.run(
            GROFF, input=source.encode("utf-8"), capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return ""
    return done.stdout.decode("utf-8", errors="replace")


def description_of(rendered: str) -> str:
    """The DESCRIPTION section of a rendered page: its paragraphs, one per line, spaces normalised ('' if none).
    Section headings are the unindented lines; the section ends at the next one."""
    paragraphs: list[str] = []
    inside = False
    for line in rendered.splitlines():
        if line and not line[0].isspace():
            if inside:
                break
            inside = line.strip() == "DESCRIPTION"
            continue
        if inside:
            paragraphs.append(" ".join(line.split()))
    text = "\n".join(paragraphs)
    return re.sub(r"\n{2,}", "\n", text).strip()


def _descriptions(order: list[Path], min_words: int):
    """(page name, description) of each page in ``order`` with a description of ``min_words`` words or more."""
    for path in order:
        source = _roff_source(path)
        if _is_redirect(source):
            continue
        text = description_of(render_page(source))
        if len(text.split()) >= min_words:
            yield path.name, text


def _draw(streams: dict, wanted: int) -> dict[str, list[dict[str, str]]]:
    # Each section's pages are rendered in their seeded order only until ``wanted`` have a new description:
    # rendering all 17,000 section-1 pages of a full machine would take minutes for nothing. A text found in a
    # second section has no right answer: it leaves the first section too, which then draws on.
    drawn: dict[str, list[dict[str, str]]] = {section: [] for section in streams}
    section_of: dict[str, str] = {}
    conflicted: set[str] = set()
    while True:
        for section, stream in streams.items():
            rows = drawn[section]
            while len(rows) < wanted and (page := next(stream, None)) is not None:
                name, text = page
                if text in section_of:
                    if section_of[text] != section:
                        conflicted.add(text)
                    continue
                section_of[text] = section
                rows.append({"text": text, "label": SECTION_LABELS[section], "page": name})
        if not any(row["text"] in conflicted for rows in drawn.values() for row in rows):
            return drawn
        drawn = {
            section: [row for row in rows if row["text"] not in conflicted] for section, rows in drawn.items()
        }


def build_manpages(
    directory: Path = MAN_DIR,
    min_pages: int = 150,
    max_per_section: int = 400,
    min_words: int = 10,
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
    seed: int = 0,
) -> dict[str, list[dict[str, str]]]:
    """``{"train", "validation", "test"}`` rows ``{"text", "label", "page"}``: per section with at least
    ``min_pages`` page files, up to ``max_per_section`` pages whose description has ``min_words`` words or more,
    drawn with ``seed`` and split by ``split_fractions`` within the section (so every split is balanced alike)."""
    rng = random.Random(seed)
    streams = {}
    for section, files in page_files(directory).items():
        if len(files) >= min_pages:
            order = list(files)
            rng.shuffle(order)
            streams[section] = _descriptions(order, min_words)
    by_section = _draw(streams, max_per_section)
    if not any(by_section.values()):
        raise ManpagesMissing(
            f"No section under {directory} has {min_pages} manual pages with a DESCRIPTION: "
            "apt-get install manpages manpages-dev (as root) and run this again."
        )
    splits: dict[str, list[dict[str, str]]] = {name: [] for name in SPLITS}
    for rows in by_section.values():
        for name, part in split_by_fractions(rows, split_fractions).items():
            splits[name] += part
    for rows in splits.values():
        rng.shuffle(rows)
    return splits


def write_manpages(folder: Path, **build_kwargs) -> dict[str, Path]:
    """``train.csv``, ``validation.csv`` and ``test.csv`` (columns text and label, as train.py reads them) and
    ``pages.json`` (which page each row came from, per split)."""
    splits = build_manpages(**build_kwargs)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, rows in splits.items():
        paths[name] = folder / f"{name}.csv"
        with paths[name].open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=["text", "label"], extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
    paths["pages"] = folder / "pages.json"
    pages = {name: [[row["page"], row["label"]] for row in rows] for name, rows in splits.items()}
    paths["pages"].write_text(json.dumps(pages, indent=1) + "\n", encoding="utf-8")
    return paths


def _main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m corpora.manpages", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default="manpages", help="folder for the csv files")
    parser.add_argument("--man-dir", type=Path, default=MAN_DIR, help="the folder holding man1 ... man8")
    parser.add_argument("--max-per-section", type=int, default=400, help="pages per section at most")
    parser.add_argument(
        "--min-pages", type=int, default=150, help="a section with fewer page files is left out"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the draw and of the split")
    args = parser.parse_args(argv)
    paths = write_manpages(
        Path(args.out),
        directory=args.man_dir,
        max_per_section=args.max_per_section,
        min_pages=args.min_pages,
        seed=args.seed,
    )
    for name, path in paths.items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    _main(sys.argv[1:])
