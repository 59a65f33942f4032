"""bench/recipes.py: the plain-PyTorch reference recipe, and the report's arithmetic (means, sds, points and time
against the recipe), without running the benchmark."""

import json

import pytest
import recipes
import recipes_reference
import recipes_report
from helpers import multi_label_rows, topic_rows, write_rows


def run(arm, seed, accuracy, seconds, status="ok"):
    return {
        "arm": arm,
        "seed": seed,
        "status": status,
        "error": None if status == "ok" else "RuntimeError: out of memory",
        "metrics": {"test_accuracy": accuracy, "test_f1_macro": accuracy / 2} if status == "ok" else {},
        "train_seconds": seconds,
    }


def test_the_summary_gives_mean_sd_points_and_time_against_the_recipe():
    document = {
        "metrics": ["accuracy", "f1_macro"],
        "arms": ["recipe", "defaults", "never_ran"],
        "runs": [
            run("recipe", 1, 0.50, 10.0),
            run("recipe", 2, 0.60, 12.0),
            run("defaults", 1, 0.60, 12.0),
            run("defaults", 2, 0.64, 14.0),
            run("defaults", 3, None, None, status="failed"),
        ],
    }
    recipe, defaults, never_ran = recipes_report.summarise(document)
    assert recipe["accuracy"]["mean"] == pytest.approx(0.55)
    assert recipe["accuracy"]["sd"] == pytest.approx(0.0707107, rel=1e-5)
    assert defaults["accuracy"]["points_vs_recipe"] == pytest.approx(7.0)  # 0.62 - 0.55, in points
    assert defaults["f1_macro"]["points_vs_recipe"] == pytest.approx(3.5)
    assert defaults["time_vs_recipe"] == pytest.approx(13.0 / 11.0)
    assert (defaults["runs"], defaults["failed"]) == (2, 1)  # the failed seed counts in no mean
    assert never_ran["accuracy"]["mean"] is None and never_ran["time_vs_recipe"] is None
    text = recipes_report.markdown(
        {
            **document,
            "dataset": "fortunes",
            "problem_type": "single_label_classification",
            "seeds": [1, 2, 3],
            "sizes": {},
            "max_seq_length": 128,
            "epochs": 4.0,
            "command": "python bench/recipes.py",
        },
        [recipe, defaults, never_ran],
        recipes.CANDIDATES,
    )
    assert (
        "| defaults | (none) | 0.6200 ± 0.0283 | 0.3100 ± 0.0141 | 13 | 1.18x | +7.0 | +3.5 | 2/3 |" in text
    )
    assert "- defaults, seed 3:" in text


@pytest.mark.parametrize(
    "rows, problem_type, metrics",
    [
        (topic_rows, "single_label_classification", {"test_accuracy", "test_f1_macro"}),
        (
            multi_label_rows,
            "multi_label_classification",
            {"test_f1_micro", "test_f1_macro", "test_exact_match"},
        ),
    ],
    ids=["single_label", "multi_label"],
)
def test_the_recipe_trains_with_its_seed_and_scores_with_train_py_metrics(
    tiny_backbone_path, tmp_path, one_torch_thread, rows, problem_type, metrics
):
    files = {
        "train": write_rows(tmp_path / "train.jsonl", rows(24, seed=0)),
        "test": write_rows(tmp_path / "test.jsonl", rows(12, seed=1)),
    }
    splits = recipes_reference.recipe_splits(files, "label", problem_type)
    assert splits["train"].num_labels == 3

    def once(seed):
        return recipes_reference.train_recipe(splits, problem_type, 32, 1.0, seed, tiny_backbone_path)

    (first, seconds), (again, _) = once(0), once(0)
    assert set(first) == metrics and seconds > 0
    assert first == again  # seeded: the same seed trains the same model


def test_the_recipe_refuses_test_labels_the_training_split_lacks(tmp_path):
    files = {
        "train": write_rows(tmp_path / "train.jsonl", topic_rows(6, topics=("sport", "food"))),
        "test": write_rows(tmp_path / "test.jsonl", topic_rows(6, topics=("sport", "music"))),
    }
    with pytest.raises(ValueError, match=r"the test split has labels the training split lacks: \['music'\]"):
        recipes_reference.recipe_splits(files, "label", "single_label_classification")


def report(runs, command, **settings):
    return {
        "dataset": "fortunes",
        "problem_type": "single_label_classification",
        "metrics": ["accuracy", "f1_macro"],
        "arms": list(dict.fromkeys(run["arm"] for run in runs)),
        "seeds": list(dict.fromkeys(run["seed"] for run in runs)),
        "sizes": {"train": 10},
        "max_seq_length": 128,
        "epochs": 4.0,
        "data_seed": 0,
        "candidates": {},
        "command": command,
        "runs": runs,
        **settings,
    }


def write_report_json(folder, document):
    (folder / "fortunes").mkdir(parents=True)
    (folder / "fortunes" / "report.json").write_text(json.dumps(document))


def merge(into, source):
    return recipes.main(["--datasets", "fortunes", "--report-dir", str(into), "--merge-from", str(source)])


def test_reports_of_two_processes_merge_into_one_table(tmp_path):
    write_report_json(
        tmp_path / "a", report([run("recipe", 1, 0.5, 10.0), run("defaults", 1, 0.6, 5.0)], "cmd a")
    )
    second = [
        run("defaults", 1, 0.9, 1.0),
        run("head_lr_2e-3", 1, 0.7, 6.0),
        run("msd_4", 1, None, None, "failed"),
    ]
    write_report_json(tmp_path / "b", report(second, "cmd b"))
    assert merge(tmp_path / "a", tmp_path / "b") == 0
    merged = json.loads((tmp_path / "a" / "fortunes" / "report.json").read_text())
    # the target's own run of (defaults, 1) is kept; the failed run is not brought over
    assert sorted((run["arm"], run["metrics"].get("test_accuracy")) for run in merged["runs"]) == [
        ("defaults", 0.6),
        ("head_lr_2e-3", 0.7),
        ("recipe", 0.5),
    ]
    text = (tmp_path / "a" / "fortunes" / "report.md").read_text()
    assert "`cmd a`" in text and "with the runs of `cmd b`" in text
    assert "| head_lr_2e-3 |" in text and "+20.0" in text  # 0.7 against the recipe's 0.5


def test_reports_made_with_other_settings_do_not_merge(tmp_path):
    write_report_json(tmp_path / "a", report([run("recipe", 1, 0.5, 10.0)], "cmd a"))
    write_report_json(tmp_path / "b", report([run("defaults", 1, 0.6, 5.0)], "cmd b", epochs=1.0))
    with pytest.raises(SystemExit, match="epochs was 4.0, now 1.0"):
        merge(tmp_path / "a", tmp_path / "b")


@pytest.mark.parametrize("arm", sorted(recipes.CANDIDATES))
def test_every_candidate_arm_is_a_valid_train_py_command_line(arm):
    from pooled_models.train.arguments import parse_arguments

    # a renamed or removed flag fails here; --do_train as train_py_arguments gives it (a training setting needs it)
    parse_arguments([*recipes.CANDIDATES[arm], "--output_dir", "out", "--do_train"])
