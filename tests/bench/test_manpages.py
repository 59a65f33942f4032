"""The manual-pages corpus builder (bench/corpora/manpages.py), on constructed roff pages in a temporary man folder
(no installed manual page is read): descriptions rendered to plain text, links, redirects and shared texts skipped,
sections capped and labelled by name."""

import csv
import gzip
import shutil

import pytest
from corpora.manpages import build_manpages, description_of, page_files, render_page, write_manpages

needs_groff = pytest.mark.skipif(shutil.which("groff") is None, reason="groff renders the pages (groff-base)")


def roff_page(name: str, section: str, description: str) -> str:
    return (
        f'.\\" a comment before the title\n.TH {name.upper()} {section} 2024 "test" "Manual"\n.SH NAME\n'
        f"{name} \\- the page of {name}\n.SH SYNOPSIS\n.B {name} something in the synopsis\n"
        f'.SH DESCRIPTION\n{description}\n.SH "SEE ALSO"\n.BR other ({section})\n'
    )


def write_page(folder, name, section, description, gzipped=False):
    path = folder / f"man{section}" / f"{name}.{section}{'.gz' if gzipped else ''}"
    path.parent.mkdir(parents=True, exist_ok=True)
    source = roff_page(name, section, description).encode()
    path.write_bytes(gzip.compress(source) if gzipped else source)
    return path


def test_a_rendered_pages_description_is_its_paragraphs_without_the_other_sections():
    rendered = (
        "NAME\n       x - y\n\nDESCRIPTION\n       First  line.\n\n       Second.\nSEE ALSO\n       z(1)\n"
    )
    assert description_of(rendered) == "First line.\nSecond."
    assert description_of("NAME\n       x - y\n") == ""  # no DESCRIPTION: nothing, so the page is skipped


@needs_groff
def test_roff_is_rendered_like_man_without_fonts_or_hyphens():
    text = description_of(
        render_page(
            roff_page(
                "frob",
                "2",
                ".BR frob ()\nfrobnicates the file\nreferred to by \\fIfd\\fP \\(em a\nvery-long-word.\n"
                ".PP\nA second paragraph.\n.TP\n.B FLAG\nAn option.",
            )
        )
    )
    assert (
        text
        == "frob() frobnicates the file referred to by fd \u2014 a very-long-word.\nA second paragraph.\nFLAG An option."
    )


@needs_groff
def test_sections_are_capped_labelled_by_name_and_split_without_links_redirects_or_shared_texts(tmp_path):
    words = " ".join(f"word{i}" for i in range(12))
    for i in range(6):
        write_page(tmp_path, f"call{i}", "2", f"System call number {i} does {words}.", gzipped=i % 2 == 0)
    for i in range(4):
        write_page(tmp_path, f"format{i}", "5", f"File format number {i} holds {words}.")
    write_page(tmp_path, "short", "5", "Too short.")  # under min_words
    write_page(
        tmp_path, "twin", "5", f"File format number 0 holds {words}."
    )  # the same text again: kept once
    write_page(tmp_path, "shared", "2", f"One text in two sections {words}.")
    write_page(tmp_path, "shared", "5", f"One text in two sections {words}.")  # in two sections: left out
    (tmp_path / "man5" / "alias.5").write_text('.\\" an alias\n.so man5/format1.5\n')
    (tmp_path / "man2" / "link.2.gz").symlink_to(tmp_path / "man2" / "call0.2.gz")
    write_page(tmp_path, "lonely", "7", f"A section with too few pages {words}.")
    assert len(page_files(tmp_path)["2"]) == 7  # the link is not a page of its own

    splits = build_manpages(tmp_path, min_pages=5, max_per_section=5, split_fractions=(0.6, 0.2, 0.2), seed=1)
    rows = [row for split in splits.values() for row in split]
    texts = [row["text"] for row in rows]
    assert len(texts) == len(set(texts)) and not any(
        "two sections" in text or "Too short" in text for text in texts
    )
    assert sorted({row["label"] for row in rows}) == [
        "file formats",
        "system calls",
    ]  # section 7 has 1 page < 5
    assert sum(row["label"] == "system calls" for row in rows) == 5  # capped at 5 of its 6 pages
    assert sum(row["label"] == "file formats" for row in rows) == 4  # its 4 distinct long pages
    assert all(row["text"].endswith(f"{words}.") and "synopsis" not in row["text"] for row in rows)
    assert [
        sum(row["label"] == "system calls" for row in splits[name])
        for name in ("train", "validation", "test")
    ] == [3, 1, 1]
    again = build_manpages(tmp_path, min_pages=5, max_per_section=5, split_fractions=(0.6, 0.2, 0.2), seed=1)
    assert again == splits  # the seed fixes the draw and the split
    assert (
        build_manpages(tmp_path, min_pages=5, max_per_section=5, seed=2) != splits
    )  # control: the seed matters

    paths = write_manpages(tmp_path / "out", directory=tmp_path, min_pages=5, max_per_section=5, seed=1)
    with paths["train"].open(newline="") as handle:
        written = list(csv.DictReader(handle))
    assert [set(row) for row in written] == [{"text", "label"}] * len(splits["train"])
    assert [row["text"] for row in written] == [row["text"] for row in splits["train"]]
