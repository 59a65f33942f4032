"""The language/toolkit mention task built from debtags, on a constructed apt-cache dumpavail text (no apt call)."""

import json

from corpora.debtags_mentions import build_mentions, mention_tags, write_mentions

from pooled_models.train.arguments import parse_arguments
from pooled_models.train.data.token import load_token_splits, token_columns

DUMPAVAIL = """
Package: pyfoo
Description: Python 3 bindings for the GTK+ toolkit, in C
Tag: devel::lang:python, implemented-in::python, uitoolkit::gtk, use::editing

Package: perlfoo
Description: Perl module to parse C code
Tag: devel::lang:perl, implemented-in::perl

Package: plain
Description: image viewer
Tag: uitoolkit::qt, use::viewing

Package: untagged
Description: Python tool nobody tagged with a language
Tag: use::converting
"""


def test_words_are_tagged_only_with_the_packages_own_languages_and_toolkits():
    words = "Python 3 bindings for the GTK+ toolkit, in C".split()
    assert mention_tags(words, ("implemented-in::python", "uitoolkit::gtk")) == [
        "B-LANG", "O", "O", "O", "O", "B-TOOLKIT", "O", "O", "O",
    ]  # fmt: skip
    # "C" is a language, but not one this package is tagged with: left O (the rule's known miss).
    assert mention_tags(["(Python,", "C"], ("devel::lang:python",)) == ["B-LANG", "O"]


def test_rows_are_the_packages_with_a_language_or_toolkit_tag_including_all_o_ones():
    rows = [
        row for split in build_mentions(DUMPAVAIL, split_fractions=(1.0, 0.0, 0.0)).values() for row in split
    ]
    by_text = {row["text"]: row["tags"] for row in rows}
    assert set(by_text) == {
        "Python 3 bindings for the GTK+ toolkit, in C",
        "Perl module to parse C code",
        "image viewer",
    }
    assert by_text["Perl module to parse C code"] == ["B-LANG", "O", "O", "O", "O", "O"]
    assert by_text["image viewer"] == ["O", "O"]


def test_written_files_are_what_train_py_reads_as_a_token_task(tmp_path):
    paths = write_mentions(tmp_path, text=DUMPAVAIL, split_fractions=(0.34, 0.33, 0.33))
    rows = [json.loads(line) for line in paths["train"].read_text().splitlines()]
    assert rows and all(len(row["words"]) == len(row["tags"]) for row in rows)
    _, data_args, _ = parse_arguments(
        [
            "--model_name_or_path",
            "unused",
            "--output_dir",
            str(tmp_path / "out"),
            "--train_file",
            str(paths["train"]),
            "--validation_file",
            str(paths["validation"]),
            "--words_column",
            "words",
            "--tags_column",
            "tags",
            "--do_train",
        ]  # fmt: skip
    )
    splits = load_token_splits(data_args, ["train", "validation"])
    words, tags = token_columns(data_args)
    first = splits["train"].dataset[0]
    assert (first[words], first[tags]) == (rows[0]["words"], rows[0]["tags"])
