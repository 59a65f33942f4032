"""The kernel-documentation corpus builder (bench/corpora/kernel_docs.py), on a constructed Documentation folder (no
installed documentation is read): pages labelled by their top-level folder, markup thinned to words, short pages and
other files skipped, folders capped and split, a missing folder named."""

import csv
import gzip
import json

import pytest
from corpora.kernel_docs import FOLDERS, KernelDocsMissing, build_kernel_docs, page_text, write_kernel_docs

WORDS = " ".join(f"word{index}" for index in range(60))


def documentation(root, pages_per_folder: int = 10):
    """``root/<folder>/...``: gzipped and plain pages, one in a subfolder, a short page and a file of another kind."""
    for label in FOLDERS:
        folder = root / label / "sub"
        folder.mkdir(parents=True)
        for index in range(pages_per_folder):
            text = f"Title {label} {index}\n=======\n\n.. note::\n:Author: someone\n{label} page {index} {WORDS}\n"
            if index % 2:
                with gzip.open(root / label / f"page{index}.rst.gz", "wt", encoding="utf-8") as handle:
                    handle.write(text)
            else:
                (folder / f"page{index}.txt").write_text(text, encoding="utf-8")
        (root / label / "short.rst").write_text("Too short to keep.\n", encoding="utf-8")
        (root / label / "logo.svg").write_text(f"<svg>{WORDS}</svg>", encoding="utf-8")
    return root


def test_page_text_keeps_the_words_and_drops_rules_directives_and_fields():
    source = "Networking\n==========\n\n.. code-block:: c\n:Author: someone\n  First line.\nSecond -- line.\n"
    assert page_text(source) == "Networking First line. Second -- line."


def test_pages_are_labelled_by_their_top_level_folder_and_split_within_it(tmp_path):
    splits = build_kernel_docs(documentation(tmp_path), max_per_folder=5)
    rows = [row for part in splits.values() for row in part]
    assert len(rows) == 5 * len(FOLDERS)  # capped; the short page and the svg never counted
    assert {split: len(part) for split, part in splits.items()} == {
        "train": 3 * len(FOLDERS),
        "validation": 1 * len(FOLDERS),
        "test": 1 * len(FOLDERS),
    }
    for row in rows:
        assert row["page"].split("/")[0] == row["label"] and row["text"].startswith(f"Title {row['label']}")
        assert "=====" not in row["text"] and "note::" not in row["text"] and "Author" not in row["text"]
    # control: another seed draws other pages
    other = build_kernel_docs(tmp_path, max_per_folder=5, seed=1)
    assert {row["page"] for row in other["test"]} != {row["page"] for row in splits["test"]}


def test_written_files_are_what_train_py_reads(tmp_path):
    out = tmp_path / "out"
    write_kernel_docs(out, directory=documentation(tmp_path / "doc", 5), max_per_folder=5)
    with (out / "train.csv").open(encoding="utf-8") as handle:
        train = list(csv.DictReader(handle))
    assert set(train[0]) == {"text", "label"} and len(train) == 3 * len(FOLDERS)
    pages = json.loads((out / "pages.json").read_text())
    assert [label for _, label in pages["train"]] == [row["label"] for row in train]


def test_a_missing_folder_is_named_with_how_to_get_it(tmp_path):
    (tmp_path / FOLDERS[0]).mkdir()
    with pytest.raises(KernelDocsMissing, match=f"{FOLDERS[0]}: apt-get install linux-doc-6.1"):
        build_kernel_docs(tmp_path)
