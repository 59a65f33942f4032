"""Files that cannot be trained on as they are stop the run with one line naming the file, row (or line) and
column; labels are never turned into something else (a list or a dict into a class name)."""

import logging

import pytest
from cli_helpers import bad_run, multi_label_rows, topic_rows, write_rows
from datasets import List, Value

from pooled_models.labels import DataError, Labels

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
