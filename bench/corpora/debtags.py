"""The debtags benchmark: which debtags (Debian's faceted package tags) describe a package, from its description.

A multi-label task available offline from the package index a Debian machine already holds: ``apt-cache dumpavail``
prints the stanza of every known package (``Package:``, ``Description:``, ``Tag:``...). The texts are short
("Real-time strategy game of ancient warfare"), a package has one to a few tags, and some tags are ten times as
frequent as others: the imbalance that thresholds tuned on validation data and ``pos_weight`` are for.

Which tags are labels. Only facets that say what a package is or does (``use::``, ``works-with::``, ``scope::``,
``devel::``, ``network::``, ``game::``...). Left out (``EXCLUDED_FACETS``): ``role::`` (its packaging role: program,
shared library, development files, data), ``implemented-in::`` (the language of its source), and ``interface::``,
``uitoolkit::``, ``x11::`` (how it is displayed and driven), because they describe how a package is built or packaged
rather than what it is for, and the packaging roles, the most frequent tags of all, would swamp the rest. Tags
ending in ``::TODO`` (not classified yet) are left out too. Of the other tags, those of at least ``min_packages``
packages are the labels (Debian 12's index with the default 300: 28 tags, about 17,000 packages with one or more).

A package listed more than once counts once (its first stanza); packages with an empty description or without a
label are dropped. The split is random, fixed by a seed; train.py takes the label set from the training split, so
keep ``max_rows`` large enough for every label to occur there (a few thousand rows are plenty at 300).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .splits import split_by_fractions

__all__ = [
    "DebtagsMissing",
    "EXCLUDED_FACETS",
    "Package",
    "read_dumpavail",
    "parse_stanzas",
    "read_packages",
    "build_debtags",
    "write_debtags",
    "VOCABULARY",
    "tag_descriptions",
    "describe_tags",
]

EXCLUDED_FACETS = ("role", "implemented-in", "interface", "uitoolkit", "x11")


class DebtagsMissing(RuntimeError):
    """apt's package index holds no tagged package, and updating it did not help."""


@dataclass(frozen=True)
class Package:
    name: str
    text: str
    tags: tuple[str, ...]


def read_dumpavail(update: bool = True) -> str:
    """The output of ``apt-cache dumpavail``, updating apt's package lists first when they hold no tags (needs root)."""
    text = _dumpavail()
    if "\nTag:" not in text and update and shutil.which("apt-get"):
        print(
            "apt's package lists hold no debtags; updating them with apt-get update (Debian's package registry)."
        )
        subprocess.run(["apt-get", "update", "-q"], check=False)
        text = _dumpavail()
    if "\nTag:" not in text:
        raise DebtagsMissing(
            "apt-cache dumpavail lists no package with debtags. Update apt's package lists (apt-get update, as root) "
            "on a Debian or Ubuntu machine and run this again."
        )
    return text


def _dumpavail() -> str:
    if not shutil.which("apt-cache"):
        return ""
    result = subprocess.run(
        ["apt-cache", "dumpavail"], capture_output=True, text=True, errors="replace", check=False
    )
    return "\n" + result.stdout if result.returncode == 0 else ""


def parse_stanzas(text: str) -> Iterator[dict[str, str]]:
    """The stanzas of a Packages-style (RFC 822) text: ``{field: value}``, continuation lines kept after a newline."""
    for block in re.split(r"\n[ \t]*\n", text):
        fields: dict[str, str] = {}
        name = None
        for line in block.splitlines():
            if line[:1] in (" ", "\t"):
                if name is not None:
                    fields[name] += "\n" + line
            elif ":" in line:
                name, value = line.split(":", 1)
                fields[name] = value.strip()
        if fields:
            yield fields


def _description(value: str, long_description: bool) -> str:
    """The short description (the field's first line), with the long description's first paragraph if asked."""
    short, *rest = value.split("\n")
    words = [short]
    if long_description:
        for line in rest:
            if line.strip() == ".":  # a paragraph break
                break
            words.append(line)
    return " ".join(" ".join(words).split())


def _tags(value: str) -> tuple[str, ...]:
    return tuple(tag.strip() for tag in value.replace("\n", " ").split(",") if tag.strip())


def read_packages(text: str, long_description: bool = False) -> list[Package]:
    """Every package of a ``dumpavail`` text, once (the first stanza of a name), with its description and tags."""
    packages: dict[str, Package] = {}
    for stanza in parse_stanzas(text):
        name = stanza.get("Package")
        if name and name not in packages:
            packages[name] = Package(
                name,
                _description(stanza.get("Description", ""), long_description),
                _tags(stanza.get("Tag", "")),
            )
    return list(packages.values())


def _describes_the_package(tag: str, excluded_facets: tuple[str, ...]) -> bool:
    facet = tag.split("::", 1)[0]
    return facet not in excluded_facets and not tag.endswith("::TODO")


def build_debtags(
    text: str | None = None,
    min_packages: int = 300,
    excluded_facets: tuple[str, ...] = EXCLUDED_FACETS,
    long_description: bool = False,
    max_rows: int | None = None,
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
    seed: int = 0,
) -> dict[str, list[dict]]:
    """``{"train": rows, "validation": rows, "test": rows}`` with rows ``{"text": description, "labels": [tags]}``.

    ``text``: an ``apt-cache dumpavail`` output (read from apt when None). ``max_rows`` subsamples the packages (with
    the same seed) before they are split by ``split_fractions``.
    """
    text = read_dumpavail() if text is None else text
    packages = [package for package in read_packages(text, long_description) if package.text]
    counts = Counter(
        tag
        for package in packages
        for tag in set(package.tags)
        if _describes_the_package(tag, excluded_facets)
    )
    kept = {tag for tag, count in counts.items() if count >= min_packages}
    rows = []
    for package in sorted(packages, key=lambda package: package.name):
        tags = sorted(set(package.tags) & kept)
        if tags:
            rows.append({"text": package.text, "labels": tags})
    if not rows:
        raise ValueError(
            f"No tag outside {', '.join(excluded_facets)} describes {min_packages} packages or more."
        )
    rng = random.Random(seed)
    rng.shuffle(rows)
    if max_rows is not None:
        rows = rows[:max_rows]
    return split_by_fractions(rows, split_fractions)


def write_debtags(folder: Path, **build_kwargs) -> dict[str, Path]:
    """Write the benchmark as ``train.jsonl``, ``validation.jsonl`` and ``test.jsonl`` in ``folder``.

    train.py reads them as multi-label (the ``labels`` column holds lists): ``--label_column labels``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, rows in build_debtags(**build_kwargs).items():
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_text(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
        )
    return paths


# Debian's debtags vocabulary: every facet and tag with a short description (and often a longer one), shipped by the
# debtags package (apt-get install debtags).
VOCABULARY = Path("/usr/share/debtags/vocabulary")


def tag_descriptions(vocabulary: Path = VOCABULARY, install: bool = True) -> dict[str, str]:
    """``{tag: description}`` from the debtags vocabulary, installing the debtags package first when it is missing and
    we can; raises :class:`DebtagsMissing` when there is no vocabulary."""
    if not vocabulary.is_file() and install and vocabulary == VOCABULARY and shutil.which("apt-get"):
        print(
            "The debtags vocabulary is missing; installing the debtags package with apt-get (Debian's registry)."
        )
        subprocess.run(["apt-get", "install", "-y", "-q", "debtags"], check=False, capture_output=True)
    if not vocabulary.is_file():
        raise DebtagsMissing(
            f"No debtags vocabulary at {vocabulary}. Install Debian's debtags package (apt-get install debtags, as "
            "root) and run this again."
        )
    return describe_tags(vocabulary.read_text(encoding="utf-8", errors="replace"))


def describe_tags(text: str) -> dict[str, str]:
    """``{tag: "Facet: Tag. Long description"}`` from a vocabulary text (RFC 822 stanzas of ``Facet:`` and ``Tag:``),
    e.g. ``network::client`` -> ``"Networking: Client"``; a continuation line holding only "." is a paragraph break."""
    facets: dict[str, str] = {}
    tags: dict[str, str] = {}
    for stanza in parse_stanzas(text):
        description = stanza.get("Description")
        if not description:
            continue
        short, *rest = description.split("\n")
        long = " ".join(line.strip() for line in rest if line.strip() != ".")
        if "Facet" in stanza:
            facets[stanza["Facet"]] = short.strip()
        elif "Tag" in stanza:
            tags[stanza["Tag"]] = (short.strip() + (f". {long}" if long else "")).strip()
    return {
        tag: f"{facets[tag.split('::', 1)[0]]}: {text}" if tag.split("::", 1)[0] in facets else text
        for tag, text in tags.items()
    }


if __name__ == "__main__":
    import sys

    for split, path in write_debtags(Path(sys.argv[1] if len(sys.argv) > 1 else "data/debtags")).items():
        print(f"{split}: {path}")
