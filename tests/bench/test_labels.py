"""bench/labels.py without running the benchmark: the few-shot draws, the label halves of the zero-shot setting, the
scores, the stored runs and the report's arithmetic."""

import json

import labels
import labels_report
import labels_tasks
import pytest
from corpora.debtags import describe_tags

ROWS = [{"text": f"text {i}", "labels": [name]} for i, name in enumerate("aabbbcccc")]
MULTI = [
    {"text": "one", "labels": ["x", "y"]},
    {"text": "two", "labels": ["x"]},
    {"text": "three", "labels": ["y"]},
    {"text": "four", "labels": ["z"]},
    {"text": "five", "labels": ["x", "z"]},
]


def test_few_shot_rows_take_k_per_label_or_all_a_label_has():
    chosen = labels_tasks.few_shot_rows(ROWS, 2, seed=1)
    counts = {name: sum(row["labels"] == [name] for row in chosen) for name in "abc"}
    assert counts == {"a": 2, "b": 2, "c": 2}
    assert labels_tasks.few_shot_rows(ROWS, 2, seed=1) == chosen  # the seed fixes the draw
    assert labels_tasks.few_shot_rows(ROWS, 3, seed=2) != labels_tasks.few_shot_rows(ROWS, 3, seed=3)
    # Multi-label: a row is taken while one of its labels has fewer than k; every label reaches k where it can.
    taken = labels_tasks.few_shot_rows(MULTI, 1, seed=0)
    assert all(any(name in row["labels"] for row in taken) for name in "xyz")
    assert len(taken) <= 3


def test_label_halves_split_the_labels_and_restrict_keeps_the_rows_of_a_half():
    seen, unseen = labels_tasks.label_halves(list("abcdef"), seed=4)
    assert sorted(seen + unseen) == list("abcdef") and len(seen) == 3 and not set(seen) & set(unseen)
    assert labels_tasks.label_halves(list("abcdef"), seed=4) == (seen, unseen)
    assert [row["labels"] for row in labels_tasks.restrict(ROWS, ["a", "c"], False)] == [["a"]] * 2 + [
        ["c"]
    ] * 4
    # Multi-label rows keep their labels of the half; a row left with none stays, as a negative.
    assert [row["labels"] for row in labels_tasks.restrict(MULTI, ["y"], True)] == [["y"], [], ["y"], [], []]


def dataset(multi=False):
    rows = MULTI if multi else ROWS
    names = sorted({name for row in rows for name in row["labels"]})
    return labels_tasks.Dataset(
        "debtags" if multi else "fortunes", multi, {"train": rows, "test": rows}, names, None
    )


def test_scores_single_and_multi_label():
    task = labels_tasks.Task(dataset(), "full", 1, ROWS, None, ROWS, list("abc"), list("abc"))
    scores = labels_tasks.scores_of(task, ["a", "a", "b", "b", "b", "c", "c", "c", "a"])
    assert scores["accuracy"] == pytest.approx(8 / 9)
    multi = labels_tasks.Task(dataset(True), "full", 1, MULTI, None, MULTI, ["x", "y", "z"], ["x", "y", "z"])
    predictions = [["x", "y"], ["x"], [], ["z"], ["x"]]  # 5 of the 7 true labels found, no false one
    result = labels_tasks.scores_of(multi, predictions)
    assert result["f1_micro"] == pytest.approx(2 * 5 / (5 + 7))
    # A zero-shot task is scored over its candidates only: a predicted label outside them does not count.
    half = labels_tasks.Task(
        dataset(True), "zeroshot", 1, MULTI, None, labels_tasks.restrict(MULTI, ["z"], True), ["z"], ["x"]
    )
    assert labels_tasks.scores_of(half, [["x"], [], [], ["z"], ["z"]])["f1_micro"] == 1.0


def test_the_best_threshold_separates_what_it_can():
    import numpy as np

    truth = np.array([[1, 0], [0, 1], [0, 0]])
    scores = np.array([[0.8, 0.2], [0.3, 0.7], [0.1, 0.4]])
    threshold = labels_tasks.best_threshold(truth, scores)
    assert 0.4 < threshold <= 0.7 and ((scores >= threshold) == truth).all()


def test_stored_runs_make_the_report(tmp_path):
    def run(arm, seed, f1, status="ok"):
        record = {
            "dataset": "debtags",
            "setting": "shot8",
            "arm": arm,
            "seed": seed,
            "flags": ["--x"],
            "train_rows": 10,
            "status": status,
            "commit": "abc",
            "train_seconds": 10.0 * seed,
            "run_seconds": 20.0,
        }
        record["scores"] = {"f1_micro": f1, "f1_macro": f1 / 2} if status == "ok" else {}
        labels_report.store(labels_report.run_path(tmp_path, "debtags", "shot8", arm, seed), record)

    run("defaults", 1, 0.5)
    run("defaults", 2, 0.7)
    run("setfit", 1, 0.4)
    run("setfit", 2, None, status="failed")
    text = labels_report.write_report(tmp_path, "python bench/labels.py")
    assert "| defaults | `--x` | 0.6000 ± 0.1414 | 0.3000 ± 0.0707 | 15 | 20 | 10 | 1, 2 |" in text
    assert "| setfit | `--x` | 0.4000 | 0.2000 | 10 | 20 | 10 | 1 (failed: 2) |" in text
    rows = json.loads((tmp_path / "report.json").read_text())
    assert [row["arm"] for row in rows] == ["defaults", "setfit"]


def test_the_vocabulary_gives_each_tag_its_facet_and_description():
    vocabulary = (
        "Facet: use\nDescription: Purpose\n\nTag: use::editing\nDescription: Editing\n\n"
        "Tag: use::checking\nDescription: Checking\n All sorts of checking.\n .\n Verifying.\n\n"
        "Tag: orphan::tag\nDescription: Orphan\n"
    )
    assert describe_tags(vocabulary) == {
        "use::editing": "Purpose: Editing",
        "use::checking": "Purpose: Checking. All sorts of checking. Verifying.",
        "orphan::tag": "Orphan",
    }


def test_the_arms_and_settings_are_checked():
    with pytest.raises(SystemExit):
        labels.parse_arguments(["--arms", "nope"])
    with pytest.raises(SystemExit):
        labels.parse_arguments(["--extra", "--num_train_epochs 8"])  # --extra needs --tag
    args = labels.parse_arguments(["--arms", "setfit", "--settings", "shot8", "--seeds", "1"])
    assert args.arms == ["setfit"] and args.settings == ["shot8"]
    assert all(set(arm.settings) <= set(labels_tasks.SETTINGS) for arm in labels_tasks.ARMS.values())


def test_the_v03_arm_keeps_0_3s_untuned_threshold_where_nothing_tunes():
    arm = labels_tasks.ARMS["mean_v03"]
    few = labels_tasks.Task(dataset(True), "shot8", 1, MULTI, None, MULTI, ["x", "y", "z"], ["x", "y", "z"])
    full = labels_tasks.Task(dataset(True), "full", 1, MULTI, MULTI, MULTI, ["x", "y", "z"], ["x", "y", "z"])
    single = labels_tasks.Task(dataset(), "shot8", 1, ROWS, None, ROWS, list("abc"), list("abc"))
    # train.py now decides at 0.7 where tune_thresholds=auto cannot tune; "none" keeps 0.3's 0.5
    assert labels_tasks.arm_flags(arm, few)[-2:] == ["--tune_thresholds", "none"]
    assert labels_tasks.arm_flags(arm, full)[-2:] == ["--tune_thresholds", "auto"]
    assert labels_tasks.arm_flags(arm, single) == list(arm.flags)
    assert labels_tasks.arm_flags(labels_tasks.ARMS["defaults"], few) == []
