"""A token-level task from Debian's package index: which words of a package's description name its language or its
user-interface toolkit (entity types LANG and TOOLKIT, BIO tags), built offline from ``apt-cache dumpavail``.

How the labels are made (silver labels, not hand annotation). Debian's maintainers and users tag packages by hand
with debtags; three facets say what a package is written in or for, and with what it draws its interface:
``implemented-in::X``, ``devel::lang:X`` and ``uitoolkit::X``. Those tags are projected onto the words of the
package's short description: a word is tagged ``B-LANG`` when it is one of the spellings (``SPELLINGS``) of a
language the package's own tags name, ``B-TOOLKIT`` when it spells one of its toolkits, and ``O`` otherwise.
So the tags are exact about *which* languages and toolkits a person said the package has, and a word is only tagged
where the description spells one of them; the rule misses what it cannot see: a language named in the description
that the tags leave out stays ``O`` (``"Perl module to parse C code"``: "C" is tagged only if the package is also
tagged with C), and a word such as "C" or "R" is taken at face value wherever it stands. Only packages with at least
one such tag are rows (someone classified them), including those whose description names none of them (every
word ``O``), so a model must also learn when not to tag. Entities are one word each (the spellings are single words).

The tags used here are exactly the facets the debtags benchmark leaves out of its labels (``implemented-in``,
``uitoolkit``; ``devel::lang`` is kept there), so a multi-task model of both does not read one task's answers from
the other's. A package's text here is the same short description the debtags task classifies.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from .debtags import read_dumpavail, read_packages
from .splits import split_by_fractions

__all__ = ["SPELLINGS", "ENTITY_OF_FACET", "mention_tags", "build_mentions", "write_mentions"]

# debtags value -> the words that spell it in descriptions (matched case-insensitively after stripping punctuation).
SPELLINGS: dict[str, tuple[str, ...]] = {
    # languages (implemented-in::X, devel::lang:X)
    "perl": ("perl",),
    "c": ("c",),
    "c++": ("c++",),
    "python": ("python", "python3", "python2"),
    "java": ("java",),
    "haskell": ("haskell", "ghc"),
    "lisp": ("lisp", "elisp", "emacs-lisp"),
    "shell": ("shell", "bash", "sh"),
    "ocaml": ("ocaml",),
    "sql": ("sql",),
    "r": ("r",),
    "ruby": ("ruby",),
    "objc": ("objective-c", "objc"),
    "php": ("php",),
    "tcl": ("tcl",),
    "ecmascript": ("javascript", "ecmascript", "node.js", "nodejs"),
    "c-sharp": ("c#", "mono", ".net"),
    "scheme": ("scheme", "guile"),
    "lua": ("lua",),
    "fortran": ("fortran",),
    "pascal": ("pascal", "freepascal"),
    "vala": ("vala",),
    "ada": ("ada",),
    "prolog": ("prolog",),
    # toolkits (uitoolkit::X)
    "gtk": ("gtk", "gtk+", "gtk2", "gtk3", "gtk4", "gtk+2", "gtk+3"),
    "qt": ("qt", "qt4", "qt5", "qt6"),
    "ncurses": ("ncurses", "curses"),
    "sdl": ("sdl", "sdl2", "sdl1.2"),
    "xlib": ("xlib", "x11"),
    "wxwidgets": ("wxwidgets", "wxwindows", "wxgtk"),
    "tk": ("tk",),
    "motif": ("motif", "lesstif"),
    "gnustep": ("gnustep",),
    "glut": ("glut", "freeglut"),
    "fltk": ("fltk",),
    "athena": ("athena", "xaw"),
}
ENTITY_OF_FACET = {"implemented-in": "LANG", "devel::lang": "LANG", "uitoolkit": "TOOLKIT"}
PUNCTUATION = ",.;:()[]\"'!?"


def _named(tags: tuple[str, ...]) -> dict[str, str]:
    """The package's languages and toolkits, by spelling: ``{"python": "LANG", "gtk+": "TOOLKIT", ...}``."""
    named: dict[str, str] = {}
    for tag in tags:
        if tag.startswith("devel::lang:"):
            facet, value = "devel::lang", tag.removeprefix("devel::lang:")
        else:
            facet, _, value = tag.partition("::")
        if facet in ENTITY_OF_FACET and value in SPELLINGS:
            for spelling in SPELLINGS[value]:
                named.setdefault(spelling, ENTITY_OF_FACET[facet])
    return named


def mention_tags(words: list[str], tags: tuple[str, ...]) -> list[str]:
    """BIO tags of ``words``: ``B-LANG`` / ``B-TOOLKIT`` where a word spells one of the package's tagged languages
    or toolkits, ``O`` elsewhere (trailing and leading punctuation is ignored: "Python," matches "python")."""
    named = _named(tags)
    return [
        f"B-{named[core]}" if (core := word.strip(PUNCTUATION).lower()) in named else "O" for word in words
    ]


def build_mentions(
    text: str | None = None,
    max_rows: int | None = None,
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
    seed: int = 0,
) -> dict[str, list[dict]]:
    """``{"train": rows, "validation": rows, "test": rows}``, rows ``{"words": [...], "tags": [...], "text": ...}``.

    ``text``: an ``apt-cache dumpavail`` output (read from apt when None). Rows: every package with a language or
    toolkit tag and a description, in a random order fixed by ``seed``; ``max_rows`` keeps the first ones.
    """
    text = read_dumpavail() if text is None else text
    rows = []
    for package in sorted(read_packages(text), key=lambda package: package.name):
        if not package.text or not _named(package.tags):
            continue
        words = package.text.split()
        rows.append({"text": package.text, "words": words, "tags": mention_tags(words, package.tags)})
    if not rows:
        raise ValueError("No package in apt's index has an implemented-in, devel::lang or uitoolkit debtag.")
    random.Random(seed).shuffle(rows)
    if max_rows is not None:
        rows = rows[:max_rows]
    return split_by_fractions(rows, split_fractions)


def write_mentions(folder: Path, **build_kwargs) -> dict[str, Path]:
    """Write ``train.jsonl``, ``validation.jsonl`` and ``test.jsonl`` in ``folder`` (train.py: ``--words_column
    words --tags_column tags``)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, rows in build_mentions(**build_kwargs).items():
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_text(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
        )
    return paths


if __name__ == "__main__":
    import sys

    for split, path in write_mentions(
        Path(sys.argv[1] if len(sys.argv) > 1 else "data/debtags_mentions")
    ).items():
        print(f"{split}: {path}")
