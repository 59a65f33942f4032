"""Files that cannot be trained on as they are stop the run with one line naming the file, row (or line) and
column; labels are never turned into something else (a list or a dict into a class name)."""

import json
import logging

import pytest
from datasets import List, Value
from helpers import bad_run, multi_label_rows, topic_rows, train, write_rows

from pooled_models.errors import DataError
from pooled_models.train.data.sequence import Labels

ONE_KIND = (
    "A label column holds one kind of label: class names (text, integers or booleans), lists of class names "
    "(multi-label) or numbers (regression)."
)


def with_labels(labels: list) -> list[dict]:
    """Topic rows whose labels are ``labels``, one per row."""
    return [
        {"text": row["text"], "label": label}
        for row, label in zip(topic_rows(len(labels)), labels, strict=True)
    ]


def topics_with(row: int, label) -> list[dict]:
    """Twelve topic rows (sport, food, music, sport, ...) with ``label`` at ``row``."""
    rows = topic_rows(12)
    rows[row]["label"] = label
    return rows


def refused(backbone, tmp_path, name: str, rows: list[dict], *flags: str) -> tuple[str, object]:
    data = write_rows(tmp_path / name, rows)
    return bad_run(backbone, tmp_path, "--train_file", str(data), "--do_train", *flags), data


def write(path, content: str | bytes):
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


# ----------------------------------------------------------------------------------------------------
# Labels of more than one kind, lists and dicts
# ----------------------------------------------------------------------------------------------------


def test_a_list_among_class_names_is_refused_not_made_a_class(tiny_backbone_path, tmp_path):
    message, data = refused(tiny_backbone_path, tmp_path, "train.jsonl", topics_with(5, ["account"]))
    assert message == (
        f"train file {data}, column 'label', row 5 holds a list (['account']), but row 0 holds text ('sport'). "
        + ONE_KIND
    )


def test_a_class_name_among_lists_is_refused(tiny_backbone_path, tmp_path):
    rows = multi_label_rows(12)
    rows[3]["label"] = "account"
    message, data = refused(tiny_backbone_path, tmp_path, "train.jsonl", rows)
    assert message == (
        f"train file {data}, column 'label', row 3 holds text ('account'), but row 0 holds a list (['food']). "
        + ONE_KIND
    )


@pytest.mark.parametrize(
    "labels, row, found",
    [
        ([0, 1] * 3 + ["account"] + [0, 1] * 3, 6, "holds text ('account'), but row 0 holds an integer (0)"),
        (["sport", 1, "food", 2], 1, "holds an integer (1), but row 0 holds text ('sport')"),
        ([True, False, "maybe", True], 2, "holds text ('maybe'), but row 0 holds a boolean (True)"),
        ([True, 0, 1, False], 1, "holds an integer (0), but row 0 holds a boolean (True)"),
        ([1, 2, 2.5, "x"], 2, "holds a float (2.5), but row 0 holds an integer (1)"),
    ],
)
def test_labels_mixing_integers_text_or_booleans_name_the_first_row_of_another_kind(
    tiny_backbone_path, tmp_path, labels, row, found
):
    # 0 and "0" would become the same class "0"; True and 1 two classes of one meaning.
    message, data = refused(tiny_backbone_path, tmp_path, "train.jsonl", with_labels(labels))
    assert message == f"train file {data}, column 'label', row {row} {found}. " + ONE_KIND


DICT_ADVICE = (
    "labels are class names (text, integers or booleans), lists of class names (multi-label) or numbers "
    "(regression). Put the field that holds the label in a column of its own and name it with --label_column."
)


@pytest.mark.parametrize("name", ["train.jsonl", "train.parquet"])  # jsonl objects, parquet structs
def test_dict_labels_are_refused(tiny_backbone_path, tmp_path, name):
    rows = [{"text": row["text"], "label": {"name": row["label"]}} for row in topic_rows(12)]
    message, data = refused(tiny_backbone_path, tmp_path, name, rows)
    assert (
        message
        == f"train file {data}, column 'label', row 0 holds a dict ({{'name': 'sport'}}); " + DICT_ADVICE
    )


def test_a_dict_among_class_names_is_refused(tiny_backbone_path, tmp_path):
    message, data = refused(tiny_backbone_path, tmp_path, "train.jsonl", topics_with(4, {"name": "account"}))
    assert (
        message
        == f"train file {data}, column 'label', row 4 holds a dict ({{'name': 'account'}}); " + DICT_ADVICE
    )


@pytest.mark.parametrize(
    "labels, found",
    [
        (
            [["sport"], ["food"], [1]],
            "row 2 lists an integer (1), but row 0 lists text ('sport'). The labels of a "
            "column are class names of one kind: text, integers or booleans.",
        ),
        (
            [["sport"], [["food"]]],
            "row 1 lists a list (['food']) among its labels; multi-label rows list class "
            "names: text, integers or booleans.",
        ),
        (
            [["sport"], [{"name": "food"}]],
            "row 1 lists a dict ({'name': 'food'}) among its labels; multi-label "
            "rows list class names: text, integers or booleans.",
        ),
        (
            [[0.1, 0.9], [0.8, 0.2]],
            "row 0 lists a float (0.1) among its labels; multi-label rows list class "
            "names: text, integers or booleans.",
        ),
    ],
)
def test_multi_label_lists_hold_class_names_of_one_kind(tiny_backbone_path, tmp_path, labels, found):
    message, data = refused(tiny_backbone_path, tmp_path, "train.jsonl", with_labels(labels * 4))
    assert message == f"train file {data}, column 'label', {found}"


def test_validation_labels_are_checked_the_same_way(tiny_backbone_path, tmp_path):
    train_file = write_rows(tmp_path / "train.csv", topic_rows(12))
    validation = write_rows(tmp_path / "validation.jsonl", topics_with(2, {"name": "music"})[:6])
    message = bad_run(
        tiny_backbone_path,
        tmp_path,
        "--train_file",
        str(train_file),
        "--validation_file",
        str(validation),
        "--do_train",
        "--do_eval",
    )
    assert message == (
        f"validation file {validation}, column 'label', row 2 holds a dict ({{'name': 'music'}}); "
        + DICT_ADVICE
    )


def test_lists_are_never_made_single_label_class_names():
    # Lists of one kind pass the kind check; asked for single-label classes, they are refused, not named "['a']".
    with pytest.raises(
        DataError, match=r"^train, column 'label', row 0 holds a list, but the labels are single-label"
    ):
        Labels.from_training(
            [["a"], ["b"]], Value("string"), "train", "label", problem_type="single_label_classification"
        )


# ----------------------------------------------------------------------------------------------------
# Line breaks in labels
# ----------------------------------------------------------------------------------------------------

LINE_BREAK = "a label is a name on one line. In a csv file this usually means a quote left open, which swallows the rows after it."


def test_a_quote_left_open_in_a_csv_is_caught_by_the_line_break_in_its_label(tiny_backbone_path, tmp_path):
    data = write(tmp_path / "train.csv", 'text,label\na b,sport\nc d,"food\ne f,music\ng h,"sport"\n')
    message = bad_run(tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train")
    assert message == (
        f"train file {data}, column 'label', row 1: the label 'food\\ne f,music\\ng h,sport\"' holds a line break; "
        + LINE_BREAK
    )


@pytest.mark.parametrize("label", ["sport\nfood", ["sport\r\nfood"], "sport\u2028food"])
def test_labels_with_line_breaks_are_refused(tiny_backbone_path, tmp_path, label):
    rows = multi_label_rows(12) if isinstance(label, list) else topic_rows(12)
    rows[7]["label"] = label
    message, data = refused(tiny_backbone_path, tmp_path, "train.jsonl", rows)
    name = label[0] if isinstance(label, list) else label
    assert (
        message
        == f"train file {data}, column 'label', row 7: the label {name!r} holds a line break; " + LINE_BREAK
    )


# ----------------------------------------------------------------------------------------------------
# Warnings: whole-number floats, classes of one row
# ----------------------------------------------------------------------------------------------------


def test_whole_number_floats_stay_regression_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="pooled_models"):
        labels = Labels.from_training([1.0, 2.0, 3.0, 2.0], Value("float64"), "train file t.jsonl", "label")
    assert labels.problem_type == "regression"
    assert caplog.messages == [
        "train file t.jsonl, column 'label': every label is a whole number stored as a float (1.0, 2.0, 3.0), so "
        "the model is trained for regression. If the labels are classes, pass --problem_type "
        "single_label_classification."
    ]


def test_no_whole_number_warning_for_real_targets_or_a_chosen_problem_type(caplog):
    with caplog.at_level(logging.WARNING, logger="pooled_models"):
        Labels.from_training([1.0, 2.5], Value("float64"), "train", "label")
        Labels.from_training([1.0, 2.0], Value("float64"), "train", "label", problem_type="regression")
        classes = Labels.from_training(
            [1.0, 2.0, 2.0, 1.0],
            Value("float64"),
            "train",
            "label",
            problem_type="single_label_classification",
        )
    assert caplog.messages == []
    assert classes.names == ["1", "2"]


def test_classes_mostly_seen_once_give_a_warning(caplog):
    ids = [f"id-{index}" for index in range(5000)]
    with caplog.at_level(logging.WARNING, logger="pooled_models"):
        Labels.from_training(ids, Value("string"), "train file t.csv", "id")
    assert caplog.messages == [
        "train file t.csv, column 'id': 5000 of 5000 classes occur in a single training row; a class seen once can "
        "hardly be learned. Check that this is the label column (--label_column), or gather more rows per class."
    ]


@pytest.mark.parametrize(
    "values, warned",
    [
        (["a", "a", "b", "b", "c", "d"], False),  # 2 of 4 classes seen once: not more than half
        (["a", "a", "b", "c", "d"], True),  # 3 of 4
        ([["a", "b"], ["a"], ["c"], ["d"]], True),  # multi-label: b, c and d in one row each
        ([["a", "b"], ["a", "b"], ["c"]], False),  # c only
    ],
)
def test_the_single_row_rule_counts_rows_per_class(caplog, values, warned):
    feature = Value("string") if isinstance(values[0], str) else List(Value("string"))
    with caplog.at_level(logging.WARNING, logger="pooled_models"):
        Labels.from_training(values, feature, "train", "label")
    assert ("in a single training row" in caplog.text) == warned


# ----------------------------------------------------------------------------------------------------
# Files that cannot be read as they are
# ----------------------------------------------------------------------------------------------------

TOPICS_JSONL = "".join(f'{{"text": "{row["text"]}", "label": "{row["label"]}"}}\n' for row in topic_rows(12))


@pytest.mark.parametrize(
    "name, content",
    [
        ("train.csv", ""),
        ("train.jsonl", ""),
        ("train.tsv", ""),
        ("train.csv", "text,label\n"),
        ("train.csv", "text,label\n\n\n"),
        ("train.jsonl", "\n\n"),
        ("train.json", "[]"),
    ],
)
def test_a_file_without_rows_is_one_error(tiny_backbone_path, tmp_path, name, content):
    data = write(tmp_path / name, content)
    assert (
        bad_run(tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train")
        == f"{data} holds no rows."
    )


@pytest.mark.parametrize(
    "line, problem",
    [
        ('{"text": "a b", "label": "sport"} x', "line 4 is not valid JSON (Extra data at column 35)."),
        ('{"text": "a b", "label": ', "line 4 is not valid JSON (Expecting value at column 26)."),
        (
            '["a b", "sport"]',
            "line 4 is not a JSON object; each line of a JSON Lines file holds one row, "
            '{"column": value, ...}.',
        ),
    ],
)
def test_a_malformed_json_line_is_named(tiny_backbone_path, tmp_path, line, problem):
    lines = TOPICS_JSONL.splitlines()
    lines[3] = line
    data = write(tmp_path / "train.jsonl", "\n".join(lines) + "\n")
    message = bad_run(tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train")
    assert message == f"Cannot read {data}: {problem}"


def test_a_malformed_json_document_gives_its_line_and_column(tiny_backbone_path, tmp_path):
    data = write(tmp_path / "train.json", '[{"text": "a", "label": "x"},\n {"text": "b", "label": }]')
    message = bad_run(tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train")
    assert message == f"Cannot read {data}: it is not valid JSON (Expecting value at line 2, column 25)."


@pytest.mark.parametrize("name", ["train.csv", "train.jsonl"])
def test_a_latin1_file_is_named_with_its_line_and_a_fix(tiny_backbone_path, tmp_path, name):
    # Arrow's csv reader says only "Invalid UTF8 sequence"; its json reader reads the file and fails on the text later.
    rows = topic_rows(12)
    rows[4]["text"] = "un café au lait"
    data = tmp_path / name
    if name.endswith(".csv"):
        write_rows(data, rows)
    else:
        data.write_text(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        )  # no \u00e9 escapes
    data.write_bytes(data.read_text(encoding="utf-8").encode("latin-1"))
    line = 6 if name.endswith(".csv") else 5  # row 4; the csv has a header line
    message = bad_run(tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train")
    assert message == (
        f"Cannot read {data}: it is not UTF-8 text (line {line} holds the byte 0xe9). Re-encode it, e.g. "
        f"iconv -f latin1 -t utf-8 {data} > {data.with_name('train.utf8' + data.suffix)} for a Latin-1 file."
    )


def test_a_utf16_file_is_named_as_such(tiny_backbone_path, tmp_path):
    data = write(tmp_path / "train.csv", "text,label\na,b\n".encode("utf-16"))
    message = bad_run(tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train")
    assert message == (
        f"Cannot read {data}: it is UTF-16 text, not UTF-8. Re-encode it as UTF-8, e.g. "
        f"iconv -f utf-16 -t utf-8 {data} > {tmp_path / 'train.utf8.csv'}"
    )


@pytest.mark.parametrize(
    "name, header, twice, shown",
    [
        ("train.csv", "text,text,label", "text", "text, text, label"),
        ("train.tsv", "text\tlabel\ttext", "text", "text, label, text"),
        ("train.csv", '"label",text,label', "label", "label, text, label"),
    ],
)
def test_a_column_named_twice_is_refused(tiny_backbone_path, tmp_path, name, header, twice, shown):
    # pandas would read the second one as "text.1", and train.py the first: half the file silently ignored.
    separator = "\t" if name.endswith(".tsv") else ","
    data = write(
        tmp_path / name, header + "\n" + "".join(f"a b{separator}c d{separator}sport\n" for _ in range(4))
    )
    message = bad_run(tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train")
    assert message == (
        f"Cannot read {data}: its header names the column {twice!r} twice ({shown}); give each column its own name."
    )


@pytest.mark.parametrize(
    "name, separator, hint",
    [
        (
            "train.csv",
            "\t",
            "The column 'text\\tlabel' looks like a tab-separated header: name the file .tsv.",
        ),
        (
            "train.csv",
            ";",
            "The column 'text;label' looks like a semicolon-separated header: save it comma-separated as .csv "
            "or tab-separated as .tsv.",
        ),
        (
            "train.tsv",
            ",",
            "The column 'text,label' looks like a comma-separated header: name the file .csv.",
        ),
    ],
)
def test_a_file_split_by_another_separator_gets_a_hint(tiny_backbone_path, tmp_path, name, separator, hint):
    rows = "".join(f"{row['text']}{separator}{row['label']}\n" for row in topic_rows(12))
    data = write(tmp_path / name, f"text{separator}label\n" + rows)
    message = bad_run(tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train")
    assert message == f"train file {data} has no column 'text'. Its columns are: text{separator}label. {hint}"


def test_a_tab_separated_csv_whose_texts_hold_commas_gets_the_hint_too(tiny_backbone_path, tmp_path):
    # pandas fails on the rows whose comma count differs, before any column is looked for.
    data = write(tmp_path / "train.csv", "text\tlabel\nhello, world\tsport\nbye\tfood\na, b, c\tmusic\n")
    message = bad_run(tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train")
    assert message.startswith(f"Cannot read {data} as csv: ParserError: ")
    assert message.endswith(
        " The column 'text\\tlabel' looks like a tab-separated header: name the file .tsv."
    )


def test_a_number_among_texts_is_named_by_its_row(tiny_backbone_path, tmp_path):
    message, data = refused(
        tiny_backbone_path, tmp_path, "train.jsonl", [*topic_rows(5), {"text": 42, "label": "food"}]
    )
    assert message == f"train file {data}, column 'text', row 5 holds 42, not text."


# ----------------------------------------------------------------------------------------------------
# The model card shows user text as it is
# ----------------------------------------------------------------------------------------------------

AWKWARD_LABELS = [
    "a|b",
    "x`y",
    "two\nlines",
]  # train.py refuses the last one; a config made by other code may not


def card_text(tmp_path, repo_id="someone/awkward") -> str:
    from helpers import tiny_backbone_config

    from pooled_models import PooledConfig
    from pooled_models.modeling.heads import LinearHead
    from pooled_models.train.arguments import DataArguments
    from pooled_models.train.card import CardData, TaskCard, render_model_card

    config = PooledConfig(
        backbone_config=tiny_backbone_config("bert"),
        pooling="mean",
        num_labels=3,
        id2label=dict(enumerate(AWKWARD_LABELS)),
        problem_type="multi_label_classification",
        decision_threshold=[0.3, 0.5, 0.7],
    )
    task = TaskCard(
        name="sequence",
        kind="sequence",
        config=config,
        head_class=LinearHead,
        data=DataArguments(train_file="train.jsonl"),
        splits=[{"name": "train", "rows": 10, "truncated": 0, "source": "train.jsonl"}],
        max_seq_length=64,
    )
    facts = CardData(
        model_name="awkward",
        repo_id=repo_id,
        base_model="tiny",
        base_model_on_hub=False,
        publishes="sequence",
        tasks=[task],
        training_settings={"seed": 3},
    )
    path = tmp_path / "README.md"
    render_model_card(facts).save(path)
    return path.read_text()


def test_label_names_with_pipes_backticks_and_line_breaks_keep_the_card_whole(tmp_path):
    text = card_text(tmp_path)
    assert "3 labels (multi_label_classification): `a|b`, ``x`y``, `two\\nlines`." in text
    table = (
        "| Label | Threshold |\n|---|---|\n| `a\\|b` | 0.3 |\n| ``x`y`` | 0.5 |\n| `two\\nlines` | 0.7 |\n"
    )
    assert table in text


def test_the_card_renders_the_label_names_as_they_are(tmp_path):
    markdown_it = pytest.importorskip("markdown_it")  # installed with transformers (typer -> rich)

    html = markdown_it.MarkdownIt("commonmark").enable("table").render(card_text(tmp_path))
    labels = "<code>a|b</code>, <code>x`y</code>, <code>two\\nlines</code>."
    assert labels in html
    cells = "".join(
        f"<tr>\n<td><code>{name}</code></td>\n<td>{threshold}</td>\n</tr>\n"
        for name, threshold in [("a|b", 0.3), ("x`y", 0.5), ("two\\nlines", 0.7)]
    )
    assert f"<tbody>\n{cells}</tbody>" in html


@pytest.mark.parametrize(
    "text, table, span",
    [
        ("plain", False, "`plain`"),
        ("``double``", False, "``` ``double`` ```"),
        (" padded ", False, "`  padded  `"),
        ("a|b", False, "`a|b`"),
        ("a|b", True, "`a\\|b`"),
        ("cr\r\nlf", True, "`cr\\r\\nlf`"),
        (3.0, True, "`3.0`"),
    ],
)
def test_code_spans(text, table, span):
    from pooled_models.train.card import code_span

    assert code_span(text, table=table) == span


def test_the_card_code_is_valid_python_for_a_windows_path(tmp_path):
    import re

    text = card_text(tmp_path, repo_id="C:\\Users\\me\\awkward")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) == 2
    for block in blocks:
        compile(block, "card", "exec")  # "C:\Users" unescaped is a SyntaxError (\U starts an escape)
    assert 'model="C:\\\\Users\\\\me\\\\awkward"' in text


def test_file_and_column_names_in_the_card_are_code_spans_that_hold(tiny_backbone_path, tmp_path):
    from pooled_models.train.card import code_span

    rows = [{"the `text`": row["text"], "lab|el": row["label"]} for row in topic_rows(12)]
    data = write_rows(tmp_path / "odd`name|.csv", rows)
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--train_file",
        str(data),
        "--do_train",
        "--num_train_epochs",
        "1",
        "--text_column",
        "the `text`",
        "--label_column",
        "lab|el",
    )
    card = (result.output_dir / "README.md").read_text()
    expected = (
        f"From local files: {code_span('odd`name|.csv')} (train); text column {code_span('the `text`')}, "
        f"labels from {code_span('lab|el')}."
    )
    assert expected in card
    assert (
        "``odd`name|.csv``" in expected and "`` the `text` ``" in expected
    )  # fenced past the backticks inside
