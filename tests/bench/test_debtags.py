"""The debtags builder, on a constructed apt-cache dumpavail text (no apt call)."""

import json

from corpora.debtags import build_debtags, read_packages, write_debtags

from pooled_models.train.arguments import parse_arguments
from pooled_models.train.data.sequence import prepare_splits

STANZAS = {
    "editor": """Package: editor
Version: 1.0
Description: text editor for programmers
 It edits text.
 .
 A second paragraph that is never used.
Tag: implemented-in::c, role::program, scope::application,
 use::editing, works-with::text
Section: editors
""",
    "notags": """Package: notags
Description: a package nobody has tagged yet
""",
    "viewer": """Package: viewer
Description: image viewer
Tag: interface::x11, scope::application, use::viewing, works-with::image
""",
    "editor-again": """Package: editor
Description: a second stanza of editor (another version) that is ignored
Tag: use::gameplaying, use::viewing
""",
    "todo": """Package: todo-only
Description: converter that nobody classified
Tag: use::converting, suite::TODO
""",
    "library": """Package: libtext
Description:   text   library
Tag: devel::library, role::shared-lib, works-with::text
""",
    "empty": """Package: empty
Description:
Tag: works-with::text, use::editing
""",
}


def dumpavail(count: int = 1) -> str:
    """The stanzas above, and ``count - 1`` numbered copies of each (for a split with enough rows)."""
    stanzas = []
    for copy in range(count):
        for stanza in STANZAS.values():
            stanzas.append(stanza if copy == 0 else stanza.replace("Package: ", f"Package: copy{copy}-"))
    return "\n".join(stanzas)


def test_stanzas_are_parsed_with_continued_tags_and_duplicates_counted_once():
    packages = {package.name: package for package in read_packages(dumpavail())}
    assert sorted(packages) == ["editor", "empty", "libtext", "notags", "todo-only", "viewer"]
    editor = packages["editor"]  # the first stanza of the name; its Tag field continues on an indented line
    assert editor.text == "text editor for programmers"
    assert editor.tags == (
        "implemented-in::c",
        "role::program",
        "scope::application",
        "use::editing",
        "works-with::text",
    )
    assert packages["notags"].tags == ()
    assert packages["libtext"].text == "text library"
    assert packages["empty"].text == ""
    long = {package.name: package.text for package in read_packages(dumpavail(), long_description=True)}
    assert long["editor"] == "text editor for programmers It edits text."


def test_labels_are_frequent_tags_of_kept_facets_and_packages_without_one_are_dropped():
    splits = build_debtags(dumpavail(), min_packages=2, split_fractions=(1.0, 0.0, 0.0))
    rows = {row["text"]: row["labels"] for row in splits["train"]}
    # Kept: scope::application and works-with::text (2 packages each; the package without a description does not
    # count). Too rare: use::editing (for the same reason), use::viewing (editor's second stanza does not count),
    # use::converting, works-with::image and devel::library. role::, implemented-in:: and interface:: are left out, ::TODO always.
    assert rows == {
        "text editor for programmers": ["scope::application", "works-with::text"],
        "image viewer": ["scope::application"],
        "text library": ["works-with::text"],
    }
    assert splits["validation"] == splits["test"] == []


def test_the_split_is_fixed_by_the_seed_and_follows_the_fractions(tmp_path):
    text = dumpavail(count=20)  # 20 copies of 4 labelled packages (every tag is frequent now)
    splits = build_debtags(text, min_packages=2, seed=3)
    assert {name: len(rows) for name, rows in splits.items()} == {"train": 48, "validation": 16, "test": 16}
    assert build_debtags(text, min_packages=2, seed=3) == splits
    assert build_debtags(text, min_packages=2, seed=4) != splits
    assert sum(len(rows) for rows in build_debtags(text, min_packages=2, max_rows=10, seed=3).values()) == 10

    paths = write_debtags(tmp_path / "debtags", text=text, min_packages=2, seed=3)
    assert [json.loads(line) for line in paths["train"].read_text().splitlines()] == splits["train"]
    # train.py reads the files as multi-label, with the tag names as labels.
    _, data_args, _ = parse_arguments(
        [
            "--output_dir",
            str(tmp_path / "out"),
            "--do_train",
            "--do_eval",
            "--train_file",
            str(paths["train"]),
            "--validation_file",
            str(paths["validation"]),
            "--label_column",
            "labels",
        ]
    )
    _, labels = prepare_splits(data_args, ["train", "validation"])
    assert labels.problem_type == "multi_label_classification"
    assert labels.names == [
        "devel::library",
        "scope::application",
        "use::converting",
        "use::editing",
        "use::viewing",
        "works-with::image",
        "works-with::text",
    ]
