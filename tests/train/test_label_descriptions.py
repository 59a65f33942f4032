"""Label descriptions for pooling="label_text" in train.py, from each of the three places they come from: the
label_descriptions setting as a JSON object, the same setting as a file (.json object; .csv, .tsv, .jsonl rows of
label and description), and a column of the training file; merged, refused by name when they disagree or describe a
label the task does not have, refused for other poolings, and saved in the model's config, which reloads and runs in
the text-classification and zero-shot pipelines."""

import json

import pytest
import torch
from helpers import leftovers, multi_label_rows, topic_rows, train, write_rows
from transformers import AutoTokenizer, pipeline

from pooled_models import PooledForSequenceClassification
from pooled_models.errors import DataError, UsageError
from pooled_models.modeling.label_text import label_text_token_ids, label_texts
from pooled_models.train.arguments import chosen_model_settings, parse_arguments
from pooled_models.train.data import read_task
from pooled_models.train.tasks import task_specs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DESCRIBED = {"sport": "games with a ball", "food": "things to eat", "music": "songs and instruments"}
LABELS = ["food", "music", "sport"]  # the order train.py gives the topic rows' labels
LABEL_TEXT = ["--pooling", "label_text"]


def described_rows(count: int = 12, every: int = 2) -> list[dict]:
    """Topic rows whose every ``every``-th row describes its label (the others give null)."""
    return [
        {**row, "description": DESCRIBED[row["label"]] if index % every == 0 else None}
        for index, row in enumerate(topic_rows(count))
    ]


def descriptions(tmp_path, rows, *flags, roles=("train",)):
    """The label descriptions train.py reads for its one task, as far as the data step (no model is built)."""
    data = write_rows(tmp_path / "train.jsonl", rows)
    argv = ["--output_dir", str(tmp_path / "out"), "--train_file", str(data), "--do_train", *flags]
    model_args, data_args, _ = parse_arguments(argv)
    (spec,) = task_specs(data_args, chosen_model_settings(model_args))
    return read_task(spec, list(roles), None, None, alone=True).descriptions


def refused(backbone, tmp_path, rows, *flags, error=UsageError) -> str:
    """Run train.py expecting ``error``; returns its message after checking nothing was written."""
    data = write_rows(tmp_path / "train.jsonl", rows)
    output_dir = tmp_path / "out"
    with pytest.raises(error) as raised:
        train(backbone, output_dir, "--train_file", str(data), "--do_train", *flags)
    assert leftovers(output_dir) == []
    return str(raised.value)


def refused_file(backbone, tmp_path, path) -> str:
    """The DataError of a run on the topic rows whose label_descriptions setting is ``path``."""
    return refused(
        backbone, tmp_path, topic_rows(12), *LABEL_TEXT, "--label_descriptions", str(path), error=DataError
    )


def refused_column(backbone, tmp_path, rows, *flags, column: str = "description") -> str:
    """The DataError of a label-text run on ``rows`` whose descriptions come from ``column``."""
    flags = (*LABEL_TEXT, *flags, "--label_description_column", column)
    return refused(backbone, tmp_path, rows, *flags, error=DataError)


def described_file(tmp_path, suffix: str, described: dict[str, str]):
    path = tmp_path / f"descriptions{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(described))
    elif suffix == ".tsv":
        path.write_text("label\tdescription\n" + "".join(f"{k}\t{v}\n" for k, v in described.items()))
    else:
        write_rows(path, [{"label": label, "description": text} for label, text in described.items()])
    return path


# ----------------------------------------------------------------------------------------------------
# The setting: a JSON object, or a file
# ----------------------------------------------------------------------------------------------------


def test_a_json_object_describes_the_labels_it_names_in_label_order(tmp_path):
    given = json.dumps({"sport": DESCRIBED["sport"], "food": DESCRIBED["food"]})
    found = descriptions(tmp_path, topic_rows(12), *LABEL_TEXT, "--label_descriptions", given)
    assert found == {"food": DESCRIBED["food"], "sport": DESCRIBED["sport"]}
    assert list(found) == ["food", "sport"]  # music has none: it is read as its name


@pytest.mark.parametrize("suffix", [".json", ".csv", ".tsv", ".jsonl"])
def test_a_descriptions_file_of_each_type_is_read(tmp_path, suffix):
    path = described_file(tmp_path, suffix, {"music": DESCRIBED["music"], "sport": DESCRIBED["sport"]})
    found = descriptions(tmp_path, topic_rows(12), *LABEL_TEXT, "--label_descriptions", str(path))
    assert found == {"music": DESCRIBED["music"], "sport": DESCRIBED["sport"]}


def test_a_config_file_gives_the_object_or_the_path(tmp_path):
    path = described_file(tmp_path, ".csv", {"food": "meals"})
    for value, expected in ((str(path), {"food": "meals"}), ({"music": "tunes"}, {"music": "tunes"})):
        data = write_rows(tmp_path / "train.jsonl", topic_rows(12))
        config = tmp_path / "run.json"
        settings = {"pooling": "label_text", "label_descriptions": value, "train_file": str(data)}
        config.write_text(json.dumps({**settings, "do_train": True, "output_dir": str(tmp_path / "o")}))
        model_args, data_args, _ = parse_arguments([str(config)])
        (spec,) = task_specs(data_args, chosen_model_settings(model_args))
        assert read_task(spec, ["train"], None, None, alone=True).descriptions == expected


def test_text_that_starts_with_a_brace_is_json_and_must_parse(tiny_backbone_path, tmp_path):
    message = refused(
        tiny_backbone_path, tmp_path, topic_rows(12), *LABEL_TEXT, "--label_descriptions", '{"sport"'
    )
    assert message.startswith(
        "label_descriptions starts with '{', so it is read as JSON, but it is not valid JSON"
    )
    assert "any other as a path" in message


def test_any_other_text_is_a_path_that_must_exist(tiny_backbone_path, tmp_path):
    missing = tmp_path / "nowhere.csv"
    message = refused(
        tiny_backbone_path, tmp_path, topic_rows(12), *LABEL_TEXT, "--label_descriptions", str(missing)
    )
    assert message.startswith(
        f"label_descriptions: no such file {missing}. label_descriptions takes a JSON object"
    )


def test_a_file_of_another_type_is_refused_with_the_valid_types(tiny_backbone_path, tmp_path):
    path = tmp_path / "descriptions.txt"
    path.write_text("sport: games\n")
    message = refused(
        tiny_backbone_path, tmp_path, topic_rows(12), *LABEL_TEXT, "--label_descriptions", str(path)
    )
    assert message == (
        f"label_descriptions file {path}: unknown file type '.txt'. Valid types: .json, .csv, .tsv, .jsonl."
    )


def test_a_json_file_holding_rows_is_refused(tiny_backbone_path, tmp_path):
    path = tmp_path / "descriptions.json"
    path.write_text(json.dumps([{"label": "sport", "description": "games"}]))
    message = refused_file(tiny_backbone_path, tmp_path, path)
    assert message.startswith(
        f"label_descriptions file {path} holds a JSON list; a .json descriptions file holds"
    )


def test_a_rows_file_needs_its_two_columns(tiny_backbone_path, tmp_path):
    path = write_rows(tmp_path / "descriptions.csv", [{"label": "sport", "text": "games"}])
    message = refused_file(tiny_backbone_path, tmp_path, path)
    assert (
        message
        == f"label_descriptions file {path} has no column 'description'. Its columns are: label, text."
    )


def test_a_row_without_a_description_is_refused_by_row_and_label(tiny_backbone_path, tmp_path):
    path = tmp_path / "descriptions.csv"
    path.write_text("label,description\nsport,games\nfood,\n")
    message = refused_file(tiny_backbone_path, tmp_path, path)
    assert message == (
        f"label_descriptions file {path}, column 'description', row 1: label 'food' has no description (None); "
        "each row of a descriptions file gives one."
    )


def test_a_label_given_two_texts_in_a_file_is_refused_naming_both_rows(tiny_backbone_path, tmp_path):
    path = write_rows(
        tmp_path / "descriptions.jsonl",
        [
            {"label": "sport", "description": "games"},
            {"label": "food", "description": "meals"},
            {"label": "sport", "description": "games"},  # the same text again: harmless
            {"label": "sport", "description": "matches"},
        ],
    )
    message = refused_file(tiny_backbone_path, tmp_path, path)
    assert message == (
        f"Label 'sport' is described as 'games' by label_descriptions file {path}, row 0 and as 'matches' by "
        f"label_descriptions file {path}, row 3; a label's description must be the same wherever it is given."
    )


@pytest.mark.parametrize("source", ["json", "file"])
def test_a_label_the_task_does_not_have_is_refused_with_the_known_labels(
    tiny_backbone_path, tmp_path, source
):
    described = {"sport": "games", "sports": "games again"}
    path = described_file(tmp_path, ".csv", described)
    value = json.dumps(described) if source == "json" else str(path)
    message = refused(
        tiny_backbone_path,
        tmp_path,
        topic_rows(12),
        *LABEL_TEXT,
        "--label_descriptions",
        value,
        error=DataError,
    )
    origin = "label_descriptions" if source == "json" else f"label_descriptions file {path}, row 1"
    assert (
        message
        == f"{origin} describes 'sports', which is not among the task's labels: 'food', 'music', 'sport'."
    )


# ----------------------------------------------------------------------------------------------------
# The training file's description column
# ----------------------------------------------------------------------------------------------------


def test_a_column_describes_each_rows_label_and_rows_may_give_none(tmp_path):
    rows = described_rows()
    for row in rows:
        if row["label"] == "music":
            row["description"] = "" if row["description"] else None  # no row describes music
    found = descriptions(tmp_path, rows, *LABEL_TEXT, "--label_description_column", "description")
    assert found == {"food": DESCRIBED["food"], "sport": DESCRIBED["sport"]}


def test_a_multi_label_column_lists_a_description_per_label(tmp_path):
    rows = multi_label_rows(12)
    for row in rows:
        row["description"] = [DESCRIBED[label] if label != "food" else None for label in row["label"]]
    found = descriptions(tmp_path, rows, *LABEL_TEXT, "--label_description_column", "description")
    assert found == {"music": DESCRIBED["music"], "sport": DESCRIBED["sport"]}


def test_a_multi_label_list_of_another_length_is_refused_by_row(tiny_backbone_path, tmp_path):
    rows = multi_label_rows(12)
    for row in rows:
        row["description"] = [DESCRIBED[label] for label in row["label"]]
    rows[3]["description"] = rows[3]["description"][:-1] + ["extra", "extra"]
    message = refused_column(tiny_backbone_path, tmp_path, rows)
    count = len(rows[3]["label"])
    assert message.startswith(f"train file {tmp_path / 'train.jsonl'}, column 'description', row 3 holds [")
    assert message.endswith(
        f"; a multi-label row's descriptions are a list as long as its labels ({count}), item by item (null for a "
        "label it does not describe)."
    )


def test_multi_label_strings_split_by_a_separator_are_refused(tiny_backbone_path, tmp_path):
    rows = [{**row, "label": "|".join(row["label"]), "description": "x"} for row in multi_label_rows(12)]
    message = refused_column(tiny_backbone_path, tmp_path, rows, "--label_separator", "|")
    assert (
        "the labels are strings split by label_separator, so a row's descriptions cannot be matched"
        in message
    )


def test_rows_that_disagree_on_a_labels_description_are_refused(tiny_backbone_path, tmp_path):
    rows = described_rows(every=1)
    rows[7]["description"] = "cooking"  # row 7 is food, as rows 1 and 4 are
    message = refused_column(tiny_backbone_path, tmp_path, rows)
    data = tmp_path / "train.jsonl"
    assert message == (
        f"Label 'food' is described as 'things to eat' by train file {data}, column 'description', row 1 and as "
        f"'cooking' by train file {data}, column 'description', row 7; a label's description must be the same "
        "wherever it is given."
    )


def test_a_column_that_describes_nothing_is_refused(tiny_backbone_path, tmp_path):
    rows = [{**row, "description": ""} for row in topic_rows(12)]
    message = refused_column(tiny_backbone_path, tmp_path, rows)
    assert message == (
        f"train file {tmp_path / 'train.jsonl'}, column 'description' gives no description on any row (every value "
        "is null or empty)."
    )


def test_a_description_that_is_not_text_is_refused_by_row(tiny_backbone_path, tmp_path):
    rows = described_rows()
    rows[5]["description"] = ["games"]
    message = refused_column(tiny_backbone_path, tmp_path, rows)
    assert message.startswith(f"train file {tmp_path / 'train.jsonl'}, column 'description', row 5 holds")


def test_a_missing_column_is_refused_with_the_columns(tiny_backbone_path, tmp_path):
    message = refused_column(tiny_backbone_path, tmp_path, topic_rows(12), column="about")
    assert (
        message
        == f"train file {tmp_path / 'train.jsonl'} has no column 'about'. Its columns are: text, label."
    )


# ----------------------------------------------------------------------------------------------------
# Both sources, and the poolings that read no label text
# ----------------------------------------------------------------------------------------------------


def test_the_setting_and_the_column_are_merged(tmp_path):
    rows = [
        {**row, "description": None if row["label"] == "music" else DESCRIBED[row["label"]]}
        for row in topic_rows(12)
    ]
    given = json.dumps({"music": "tunes", "sport": DESCRIBED["sport"]})  # sport: the column's own text again
    found = descriptions(
        tmp_path,
        rows,
        *LABEL_TEXT,
        "--label_descriptions",
        given,
        "--label_description_column",
        "description",
    )
    assert found == {"food": DESCRIBED["food"], "music": "tunes", "sport": DESCRIBED["sport"]}


def test_the_setting_and_the_column_may_not_disagree(tiny_backbone_path, tmp_path):
    path = described_file(tmp_path, ".json", {"sport": "football"})
    message = refused(
        tiny_backbone_path,
        tmp_path,
        described_rows(),
        *LABEL_TEXT,
        "--label_descriptions",
        str(path),
        "--label_description_column",
        "description",
        error=DataError,
    )
    assert message == (
        f"Label 'sport' is described as 'football' by label_descriptions file {path} and as 'games with a ball' by "
        f"train file {tmp_path / 'train.jsonl'}, column 'description', row 0; a label's description must be the same "
        "wherever it is given."
    )


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--label_descriptions", '{"sport": "games"}'), ("--label_description_column", "description")],
)
@pytest.mark.parametrize("pooling", [None, "label_tokens"])
def test_other_poolings_refuse_descriptions_by_name(tiny_backbone_path, tmp_path, flag, value, pooling):
    chosen = ["--pooling", pooling] if pooling else []
    message = refused(tiny_backbone_path, tmp_path, described_rows(), *chosen, flag, value)
    shown = json.loads(value) if flag == "--label_descriptions" else value
    assert message == (
        f"{flag[2:]}={shown!r} does not apply to pooling={pooling or 'mean'!r}; it is a setting of "
        "pooling='label_text', which reads each label's text (--pooling label_text)."
    )


def test_a_token_task_refuses_the_column(tiny_backbone_path, tmp_path):
    message = refused(
        tiny_backbone_path,
        tmp_path,
        described_rows(),
        "--tags_column",
        "tags",
        "--label_description_column",
        "x",
    )
    assert message == (
        "label_description_column gives the texts of a sequence task's labels (pooling 'label_text'); a token task "
        "reads no label text. Leave it out."
    )


def test_regression_targets_have_no_labels_to_describe(tmp_path):
    rows = [
        {**row, "label": float(index % 3), "description": "a score"}
        for index, row in enumerate(topic_rows(12))
    ]
    with pytest.raises(
        DataError, match=r"^label_description_column describes classes; this task's labels are"
    ):
        descriptions(tmp_path, rows, *LABEL_TEXT, "--label_description_column", "description")


def test_a_task_among_several_is_named_in_the_refusal(tmp_path):
    data = write_rows(tmp_path / "train.jsonl", described_rows())
    task = {"kind": "sequence", "train_file": str(data), "pooling": "label_text"}
    tasks = {"topic": {**task, "label_description_column": "description"}, "plain": task}
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"tasks": tasks, "do_train": True, "output_dir": str(tmp_path / "o")}))
    model_args, data_args, _ = parse_arguments([str(config)])
    topic, plain = task_specs(data_args, chosen_model_settings(model_args))
    assert read_task(topic, ["train"], None, None, alone=False).descriptions == DESCRIBED
    assert read_task(plain, ["train"], None, None, alone=False).descriptions is None
    broken = {**tasks, "topic": {**tasks["topic"], "label_description_column": "about"}}
    config.write_text(json.dumps({"tasks": broken, "do_train": True, "output_dir": str(tmp_path / "o")}))
    model_args, data_args, _ = parse_arguments([str(config)])
    topic, _ = task_specs(data_args, chosen_model_settings(model_args))
    with pytest.raises(DataError, match=r"^task 'topic': train file .* has no column 'about'"):
        read_task(topic, ["train"], None, None, alone=False)


# ----------------------------------------------------------------------------------------------------
# A run: the saved config, reloading, the pipelines, continuing
# ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def described_run(tiny_backbone_path, tmp_path_factory):
    """A label-text run whose descriptions come from a file (music) and the training file's column (food, sport)."""
    folder = tmp_path_factory.mktemp("described")
    rows = [
        {**row, "description": None if row["label"] == "music" else DESCRIBED[row["label"]]}
        for row in topic_rows(24)
    ]
    data = write_rows(folder / "train.jsonl", rows)
    path = described_file(folder, ".csv", {"music": DESCRIBED["music"]})
    flags = ["--train_file", str(data), "--do_train", *LABEL_TEXT, "--label_descriptions", str(path)]
    result = train(tiny_backbone_path, folder / "model", *flags, "--label_description_column", "description")
    return result.output_dir, data, path


def test_the_saved_config_holds_the_descriptions_and_reads_them(described_run):
    folder, _, _ = described_run
    config = json.loads((folder / "config.json").read_text())
    assert config["label_descriptions"] == {name: DESCRIBED[name] for name in LABELS}
    names = [config["id2label"][str(index)] for index in range(3)]
    assert names == LABELS
    tokenizer = AutoTokenizer.from_pretrained(folder)
    # the label texts the model reads are the descriptions, not the names
    assert config["label_text_ids"] == label_text_token_ids(label_texts(names, DESCRIBED), tokenizer)
    assert config["label_text_ids"] != label_text_token_ids(names, tokenizer)


def test_the_saved_model_reloads_and_runs_in_both_pipelines(described_run):
    folder, _, _ = described_run
    model = PooledForSequenceClassification.from_pretrained(folder)
    assert model.config.label_descriptions == {name: DESCRIBED[name] for name in LABELS}
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = "the match was a goal for the team"
    with torch.no_grad():
        probabilities = model(**tokenizer([text], return_tensors="pt")).logits.softmax(-1)[0]
    (answer,) = pipeline("text-classification", model=str(folder))([text])
    assert answer["label"] == LABELS[int(probabilities.argmax())]
    assert answer["score"] == pytest.approx(float(probabilities.max()), abs=1e-5)
    zero_shot = pipeline("zero-shot-classification", model=str(folder))
    scored = zero_shot(text, candidate_labels=["games with a ball", "things to eat"])
    assert sorted(scored["labels"]) == ["games with a ball", "things to eat"]
    assert sum(scored["scores"]) == pytest.approx(1.0, abs=1e-5)
    # the model's own labels, given by their descriptions, are scored as the model scores them
    own = zero_shot(text, candidate_labels=[DESCRIBED[name] for name in LABELS])
    by_label = dict(zip(own["labels"], own["scores"], strict=True))
    expected = [float(p) for p in probabilities]
    assert [by_label[DESCRIBED[name]] for name in LABELS] == pytest.approx(expected, abs=1e-4)


def test_continuing_the_saved_model_takes_its_descriptions_and_refuses_others(described_run, tmp_path):
    folder, data, _ = described_run
    evaluate = ["--validation_file", str(data), "--do_eval"]
    same = described_file(tmp_path, ".json", DESCRIBED)
    evaluated = train(str(folder), tmp_path / "again", *evaluate, "--label_descriptions", str(same))
    # The same descriptions change nothing: no copy is published (issue 48), the model keeps its own.
    assert not (evaluated.output_dir / "config.json").exists()
    saved = json.loads((folder / "config.json").read_text())["label_descriptions"]
    assert saved == {name: DESCRIBED[name] for name in LABELS}
    kept = train(str(folder), tmp_path / "kept", *evaluate)  # none given: the model's own, evaluated as it is
    assert "eval_accuracy" in kept.metrics and not (kept.output_dir / "config.json").exists()
    assert PooledForSequenceClassification.from_pretrained(folder).config.label_descriptions == saved
    other = described_file(tmp_path, ".csv", {**DESCRIBED, "music": "tunes"})
    with pytest.raises(
        UsageError, match=r"its settings cannot change \(label_descriptions=\{.*'music': 'tunes'"
    ):
        train(str(folder), tmp_path / "changed", *evaluate, "--label_descriptions", str(other))
    assert leftovers(tmp_path / "changed") == []


def test_the_column_needs_the_training_split(described_run, tmp_path):
    folder, data, _ = described_run
    with pytest.raises(
        UsageError, match="label_description_column is read from the training split: it needs --do_train"
    ):
        train(
            str(folder),
            tmp_path / "eval",
            "--validation_file",
            str(data),
            "--do_eval",
            "--label_description_column",
            "description",
        )


def words(count: int) -> str:
    """A description of ``count`` tokens: [CLS] (the marker's slot), one per word and [SEP] make ``count`` + 2."""
    return json.dumps({"sport": " ".join(["word"] * count)})


def test_a_description_that_fills_the_backbones_positions_trains(tiny_backbone_path, tmp_path):
    data = write_rows(tmp_path / "train.jsonl", topic_rows(12))
    flags = ["--train_file", str(data), "--do_train", *LABEL_TEXT, "--label_descriptions", words(62)]
    result = train(tiny_backbone_path, tmp_path / "out", *flags)
    config = json.loads((result.output_dir / "config.json").read_text())
    assert len(config["label_text_ids"][LABELS.index("sport")]) == 64  # the tiny backbone's 64 positions


def test_a_description_longer_than_the_backbone_reads_is_refused_by_label(tiny_backbone_path, tmp_path):
    message = refused(
        tiny_backbone_path, tmp_path, topic_rows(12), *LABEL_TEXT, "--label_descriptions", words(63)
    )
    assert message == (
        "Label 'sport' is read as 65 tokens (its description, with the marker and the tokenizer's special tokens), "
        "more than the 64 the backbone reads in one row; shorten its description."
    )
