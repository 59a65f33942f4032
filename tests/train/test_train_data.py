"""Bad data is caught before training, with the file, column and row, and leaves nothing behind."""

import json
import math

import pytest
from datasets import ClassLabel, Features, List, Value
from helpers import bad_run, multi_label_rows, pair_regression_rows, topic_rows, train, write_rows

from pooled_models.errors import DataError
from pooled_models.modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from pooled_models.train.data.labels import Labels, detect_problem_type

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def with_row(rows, index, **changes):
    rows = [dict(row) for row in rows]
    rows[index].update(changes)
    return rows


def test_missing_column_lists_the_columns_there_are(tiny_backbone_path, tmp_path):
    data = write_rows(tmp_path / "train.csv", topic_rows(12))
    message = bad_run(
        tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train", "--text_column", "sentence"
    )
    assert message == f"train file {data} has no column 'sentence'. Its columns are: text, label."


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@pytest.mark.parametrize("text, problem", [("   ", "the text is empty"), (None, "the text is missing")])
def test_empty_or_null_text_names_the_row(tiny_backbone_path, tmp_path, suffix, text, problem):
    if suffix == ".csv" and text is None:
        text = ""  # csv has no null; an empty field is read as one
        problem = "the text is missing"
    data = write_rows(tmp_path / f"train{suffix}", with_row(topic_rows(12), 7, text=text))
    message = bad_run(tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train")
    assert message == f"train file {data}, column 'text', row 7: {problem}" + (
        " (null)." if "missing" in problem else "."
    )


def test_a_text_pair_column_is_checked_too(tiny_backbone_path, tmp_path):
    rows = with_row(pair_regression_rows(12), 4, sentence2="")
    data = write_rows(tmp_path / "pairs.jsonl", rows)
    message = bad_run(
        tiny_backbone_path,
        tmp_path,
        "--train_file",
        str(data),
        "--do_train",
        "--text_column",
        "sentence1",
        "--text_pair_column",
        "sentence2",
        "--label_column",
        "score",
    )
    assert message == f"train file {data}, column 'sentence2', row 4: the text is empty."


def test_validation_labels_unseen_in_training_are_an_error(tiny_backbone_path, tmp_path):
    train_file = write_rows(tmp_path / "train.csv", topic_rows(12, topics=("sport", "food")))
    validation = write_rows(tmp_path / "validation.csv", with_row(topic_rows(6), 2))  # row 2 is "music"
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
    assert message.startswith(
        f"validation file {validation}, column 'label', row 2: label 'music' does not occur"
    )
    assert "Training labels: 'food', 'sport'" in message and "--skip_unseen_labels" in message


def test_unseen_labels_can_be_skipped(tiny_backbone_path, tmp_path, caplog):
    train_file = write_rows(tmp_path / "train.csv", topic_rows(12, topics=("sport", "food")))
    test_file = write_rows(tmp_path / "test.csv", topic_rows(9))  # 3 of 9 rows are "music"
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--train_file",
        str(train_file),
        "--test_file",
        str(test_file),
        "--do_train",
        "--do_predict",
        "--skip_unseen_labels",
        "--num_train_epochs",
        "1",
    )
    assert "left out 3 of 9 rows whose label does not occur in training" in caplog.text
    predictions = (result.output_dir / "predictions.jsonl").read_text().splitlines()
    assert len(predictions) == 6 and all(json.loads(line)["label"] != "music" for line in predictions)


@pytest.mark.parametrize("target", [math.nan, math.inf, -math.inf])
def test_non_finite_regression_targets_name_the_row(tiny_backbone_path, tmp_path, target):
    rows = with_row(pair_regression_rows(10), 5, score=target)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))  # json writes NaN and Infinity
    message = bad_run(
        tiny_backbone_path,
        tmp_path,
        "--train_file",
        str(data),
        "--do_train",
        "--text_column",
        "sentence1",
        "--label_column",
        "score",
    )
    assert (
        message
        == f"train file {data}, column 'score', row 5: the regression target is {target}; targets must be finite numbers."
    )


def test_a_missing_label_names_the_row(tiny_backbone_path, tmp_path):
    rows = with_row(topic_rows(12), 9, label="")
    data = write_rows(tmp_path / "train.csv", rows)
    message = bad_run(tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train")
    assert message == f"train file {data}, column 'label', row 9: the label is missing (empty, null or NaN)."


def test_a_training_split_with_one_class_is_refused(tiny_backbone_path, tmp_path):
    data = write_rows(tmp_path / "train.csv", topic_rows(12, topics=("sport",)))
    message = bad_run(tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train")
    assert message.startswith(f"train file {data}, column 'label': the training split has only 'sport'")


@pytest.mark.parametrize(
    "name, content, problem",
    [
        ("train.parquet", b"this is not parquet", "Cannot read {path} as parquet"),
        (
            "train.json",
            b'{"text": "a", "label": ',
            "Cannot read {path}: line 1 is not valid JSON (Expecting value at column 24).",
        ),
        (
            "train.csv",
            b"text,label\na,b\nc,d,e\n",
            "Cannot read {path} as csv: ParserError: Error tokenizing data. C error: Expected 2 fields in line 3, saw 3",
        ),
        (
            "train.xlsx",
            b"",
            "Cannot read {path}: unknown file type '.xlsx'. Valid types: .csv, .tsv, .json, .jsonl, .parquet",
        ),
    ],
)
def test_unreadable_files_are_named(tiny_backbone_path, tmp_path, name, content, problem):
    path = tmp_path / name
    path.write_bytes(content)
    message = bad_run(tiny_backbone_path, tmp_path, "--train_file", str(path), "--do_train")
    assert message.startswith(problem.format(path=path))


def test_a_missing_file_is_named(tiny_backbone_path, tmp_path):
    message = bad_run(
        tiny_backbone_path, tmp_path, "--train_file", str(tmp_path / "nowhere.csv"), "--do_train"
    )
    assert message == f"Cannot read {tmp_path / 'nowhere.csv'}: no such file."


def test_a_required_split_that_is_not_given_is_named(tiny_backbone_path, tmp_path):
    data = write_rows(tmp_path / "train.csv", topic_rows(12))
    message = bad_run(tiny_backbone_path, tmp_path, "--train_file", str(data), "--do_train", "--do_eval")
    assert message == "No validation data: set validation_file (or dataset_name for a Hub dataset)."


def test_a_test_file_without_labels_is_only_predicted(tiny_backbone_path, tmp_path):
    train_file = write_rows(tmp_path / "train.csv", topic_rows(12))
    test_file = write_rows(tmp_path / "test.csv", [{"text": row["text"]} for row in topic_rows(5)])
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--train_file",
        str(train_file),
        "--test_file",
        str(test_file),
        "--do_train",
        "--do_predict",
        "--num_train_epochs",
        "1",
    )
    assert not [key for key in result.metrics if key.startswith("test_")]
    rows = [json.loads(line) for line in (result.output_dir / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and "label" not in rows[0] and rows[0]["prediction"] in ("food", "music", "sport")


def test_the_test_files_id_and_the_columns_named_are_carried_into_the_predictions(
    tiny_backbone_path, tmp_path
):
    """Issue 48: predictions.jsonl kept only text, label, prediction and scores, so results joined back by row order.
    An ``id`` column now comes along by itself, and --keep_columns names others."""
    from pooled_models.errors import UsageError

    train_file = write_rows(tmp_path / "train.csv", topic_rows(12))
    test_rows = [
        {"source": f"page {index}", "id": f"doc-{9 - index}", "text": row["text"]}
        for index, row in enumerate(topic_rows(5, seed=3))
    ]
    test_file = str(write_rows(tmp_path / "test.jsonl", test_rows))
    flags = [
        "--train_file",
        str(train_file),
        "--test_file",
        test_file,
        "--do_train",
        "--num_train_epochs",
        "1",
    ]
    trained = train(tiny_backbone_path, tmp_path / "trained", *flags).output_dir
    rows = [json.loads(line) for line in (trained / "predictions.jsonl").read_text().splitlines()]
    assert [(row["id"], row["text"]) for row in rows] == [(row["id"], row["text"]) for row in test_rows]
    assert list(rows[0])[:2] == ["id", "text"] and "source" not in rows[0]  # control: only the id by itself

    again = train(
        str(trained), tmp_path / "again", "--test_file", test_file, "--keep_columns", "source", "id"
    )
    named = [json.loads(line) for line in (again.output_dir / "predictions.jsonl").read_text().splitlines()]
    assert [(row["source"], row["id"]) for row in named] == [(row["source"], row["id"]) for row in test_rows]
    assert [row["prediction"] for row in named] == [row["prediction"] for row in rows]

    message = bad_run(str(trained), tmp_path, "--test_file", test_file, "--keep_columns", "doc_id")
    assert message.startswith(
        f"test file {test_file} has no column 'doc_id'. Its columns are: source, id, text"
    )
    with pytest.raises(
        UsageError, match="keep_columns names 'prediction', which predictions.jsonl writes itself"
    ):
        train(str(trained), tmp_path / "clash", "--test_file", test_file, "--keep_columns", "prediction")


# ----------------------------------------------------------------------------------------------------
# Label detection, without a model
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "feature, separator, expected",
    [
        (Value("string"), None, "single_label_classification"),
        (Value("int64"), None, "single_label_classification"),
        (Value("bool"), None, "single_label_classification"),
        (ClassLabel(names=["neg", "pos"]), None, "single_label_classification"),
        (Value("float64"), None, "regression"),
        (List(Value("string")), None, "multi_label_classification"),
        (List(ClassLabel(names=["a", "b"])), None, "multi_label_classification"),
        (Value("string"), "|", "multi_label_classification"),
    ],
)
def test_problem_type_detection(feature, separator, expected):
    assert detect_problem_type(feature, separator) == expected


def test_class_labels_keep_the_dataset_order_and_minus_one_means_unlabelled():
    feature = ClassLabel(names=["negative", "neutral", "positive"])
    labels = Labels.from_training([2, 0, 0, 2], feature, "train", "label")
    assert labels.names == ["negative", "neutral", "positive"]  # "neutral" is kept though unseen in training
    targets, kept = labels.encode([1, 2], feature, "test", "label")
    assert targets == [1, 2] and kept == [0, 1]
    assert labels.is_unlabelled([-1, -1], feature)
    with pytest.raises(DataError, match="row 1: the label is missing"):
        labels.encode([0, -1], feature, "validation", "label")


def test_multi_label_class_label_lists_become_multi_hot_targets():
    feature = List(ClassLabel(names=["anger", "joy", "fear"]))
    labels = Labels.from_training([[0], [1, 2], []], feature, "train", "labels")
    assert labels.problem_type == "multi_label_classification"
    targets, _ = labels.encode([[2, 0], []], feature, "validation", "labels")
    assert targets == [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]


def test_a_saved_config_without_a_problem_type_is_read_as_its_loss_reads_it():
    """transformers' loss: one output is regression, more are single-label; --problem_type may choose another that
    the outputs fit, and a run's training labels of any problem type match it if the names are the same."""
    from types import SimpleNamespace

    def config(names, problem_type=None):
        return SimpleNamespace(
            problem_type=problem_type, num_labels=len(names), id2label=dict(enumerate(names))
        )

    two, one = config(["sport", "food"]), config(["score"])
    assert (Labels.from_config(two).problem_type, Labels.from_config(two).names) == (
        SINGLE_LABEL,
        ["sport", "food"],
    )
    assert (Labels.from_config(one).problem_type, Labels.from_config(one).names) == (REGRESSION, [])
    assert Labels.from_config(two, MULTI_LABEL).problem_type == MULTI_LABEL
    with pytest.raises(DataError, match="names no problem type and has 1 output"):
        Labels.from_config(one, MULTI_LABEL)
    with pytest.raises(DataError, match="has 2 output.*regression needs one output"):
        Labels.from_config(two, REGRESSION)
    trained = Labels(problem_type=MULTI_LABEL, names=["sport", "food"])
    assert Labels.from_config(two).matches(trained)
    assert not Labels.from_config(config(["sport", "food"], SINGLE_LABEL)).matches(trained)  # stated: kept
    assert not Labels.from_config(two).matches(Labels(problem_type=MULTI_LABEL, names=["food", "sport"]))


def test_a_multi_label_override_on_plain_strings_asks_for_a_separator():
    with pytest.raises(DataError, match="label_separator"):
        Labels.from_training(
            ["a", "b"],
            Value("string"),
            "train file x.csv",
            "label",
            problem_type="multi_label_classification",
        )


def test_regression_labels_refuse_text_in_another_split():
    labels = Labels.from_training([0.5, 1.5], Value("float64"), "train", "score")
    with pytest.raises(DataError, match="holds string values, but the training labels are numbers"):
        labels.encode(["high"], Value("string"), "validation file v.csv", "score")


def test_features_of_a_hub_style_dataset_are_used(tmp_path):
    # A parquet file keeps the ClassLabel feature, as a Hub dataset would.
    from datasets import Dataset

    features = Features({"text": Value("string"), "label": ClassLabel(names=["neg", "pos"])})
    Dataset.from_dict({"text": ["bad", "good", "fine"], "label": [0, 1, 1]}, features=features).to_parquet(
        tmp_path / "train.parquet"
    )
    from pooled_models.train.arguments import DataArguments
    from pooled_models.train.data.files import load_splits

    arguments = DataArguments(train_file=str(tmp_path / "train.parquet"))
    split = load_splits(arguments, ["train"])["train"]
    assert isinstance(split.dataset.features["label"], ClassLabel)


def test_a_dataset_by_name_with_class_labels_and_withheld_test_labels(tiny_backbone_path, tmp_path):
    """--dataset_name takes what load_dataset takes; a local dataset folder stands in for a Hub repository."""
    from datasets import Dataset

    features = Features({"text": Value("string"), "label": ClassLabel(names=["sport", "food", "music"])})
    folder = tmp_path / "dataset"
    folder.mkdir()
    rows = topic_rows(30)
    as_ids = {
        "text": [row["text"] for row in rows],
        "label": [features["label"].str2int(row["label"]) for row in rows],
    }
    Dataset.from_dict(as_ids, features=features).to_parquet(folder / "train.parquet")
    withheld = {"text": as_ids["text"][:6], "label": [-1] * 6}  # as GLUE-style test splits publish them
    Dataset.from_dict(withheld, features=features).to_parquet(folder / "test.parquet")

    message = bad_run(tiny_backbone_path, tmp_path, "--dataset_name", str(folder), "--do_train", "--do_eval")
    assert message == (
        f"The dataset {str(folder)!r} has no split 'validation' (for validation); its splits are: "
        "train, test. Choose one with --validation_split_name."
    )

    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--dataset_name",
        str(folder),
        "--do_train",
        "--do_predict",
        "--num_train_epochs",
        "1",
    )
    config = json.loads((result.output_dir / "config.json").read_text())
    assert config["id2label"] == {
        "0": "sport",
        "1": "food",
        "2": "music",
    }  # the ClassLabel's order, not sorted
    assert not [key for key in result.metrics if key.startswith("test_")]
    predictions = (result.output_dir / "predictions.jsonl").read_text().splitlines()
    assert len(predictions) == 6 and "label" not in json.loads(predictions[0])
    card = (result.output_dir / "README.md").read_text()
    assert "datasets:" not in card  # a local folder is not a Hub dataset id
    assert f"From the dataset `{folder}`" in card


def test_a_label_column_called_labels_keeps_its_names(tiny_backbone_path, tmp_path):
    # "labels" is also the column of targets Trainer hands to the model (GoEmotions names its label column so).
    rows = [{"text": row["text"], "labels": row["label"]} for row in multi_label_rows(24)]
    data = write_rows(tmp_path / "multi.jsonl", rows)
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--train_file",
        str(data),
        "--test_file",
        str(data),
        "--label_column",
        "labels",
        "--do_train",
        "--do_predict",
        "--num_train_epochs",
        "1",
    )
    assert (
        json.loads((result.output_dir / "config.json").read_text())["problem_type"]
        == "multi_label_classification"
    )
    predictions = [
        json.loads(line) for line in (result.output_dir / "predictions.jsonl").read_text().splitlines()
    ]
    assert [prediction["label"] for prediction in predictions] == [row["labels"] for row in rows]
    assert "test_f1_micro" in result.metrics


def test_the_zero_shot_files_cut_rows_are_reported_as_the_training_files_are(minilm_tokenizer, caplog):
    """Issue 48: --zero_shot_file said nothing while most of its rows were cut; now it gets the training files' line,
    with the count the training files' tokenizing gives for the same texts."""
    from datasets import Dataset

    from pooled_models.train.data.files import Split
    from pooled_models.train.data.sequence import tokenize
    from pooled_models.train.zero_shot_eval import ZeroShotEvaluation, ZeroShotRows

    texts = ["a short text", " ".join(["football"] * 40), "another short one", " ".join(["music"] * 30)]
    rows = ZeroShotRows(
        source="zero_shot file unseen.csv",
        file_name="unseen.csv",
        texts=texts,
        labels=["music", "sport"],
        targets=[1, 1, 0, 0],
        unseen=["music"],
    )
    split = Split("train", "train file train.csv", Dataset.from_dict({"text": texts}))
    tokenize(split, minilm_tokenizer, "text", None, 16)
    assert split.truncated == 2
    caplog.clear()
    ZeroShotEvaluation(rows, minilm_tokenizer, max_length=16)
    cut = [message for message in caplog.messages if "truncated" in message]
    assert cut == ["zero_shot file unseen.csv: 2 of 4 rows are longer than 16 tokens and were truncated."]
    caplog.clear()
    ZeroShotEvaluation(rows, minilm_tokenizer, max_length=64)  # control: nothing cut, nothing said of it
    assert [message for message in caplog.messages if "truncated" in message] == []
