"""The pooling sweep on a tiny backbone and tiny data: report files, one row per pooling and baseline, numbers that
are the runs' own, a failed pooling reported while the others go on."""

import json

import pytest
from helpers import FAST, data_flags, multi_label_rows, png_size

from pooled_models.errors import UsageError
from pooled_models.modeling.pooling import POOLERS, MeanPooler
from pooled_models.sweep.report import summarise, write_report
from pooled_models.sweep.runner import RunRecord, Sweep, main, parse_sweep_arguments

pytestmark = pytest.mark.usefixtures("one_torch_thread")

POOLINGS = ["mean", "broken", "concat_layers"]


class BrokenPooler(MeanPooler):
    """A pooling whose training fails at its first step."""

    def forward(self, hidden_states, attention_mask=None, all_hidden_states=None):
        raise RuntimeError("broken on purpose")


@pytest.fixture(scope="module")
def sweep_report(tiny_backbone_path, tmp_path_factory):
    """Three poolings (one of them fails in training), both baselines, two seeds."""
    tmp_path = tmp_path_factory.mktemp("sweep")
    report_dir = tmp_path / "report"
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(POOLERS, "broken", BrokenPooler)
        status = main(
            [
                "--poolings",
                ",".join(POOLINGS),
                "--seeds",
                "0",
                "1",
                "--report_dir",
                str(report_dir),
                "--model_name_or_path",
                tiny_backbone_path,
                *data_flags(tmp_path),
                *FAST[:-2],
                "--num_train_epochs",
                "1",
            ]
        )
    return status, report_dir


@pytest.mark.slow  # the sweep_report fixture trains 3 poolings x 2 seeds and both baselines
def test_the_report_has_a_row_per_pooling_and_baseline(sweep_report):
    status, report_dir = sweep_report
    assert status == 0
    assert {path.name for path in report_dir.iterdir()} == {
        "report.md",
        "report.json",
        "report.png",
    }  # no runs kept
    document = json.loads((report_dir / "report.json").read_text())
    titles = [row["name"] for row in document["summary"]]
    assert sorted(titles) == sorted(POOLINGS + ["vanilla", "logistic_regression"])
    table = (report_dir / "report.md").read_text()
    table_rows = [
        line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| pooling")
    ]
    assert len(table_rows) == 5
    for name in POOLINGS:
        assert any(line.startswith(f"| {name} |") for line in table_rows)
    assert any("vanilla AutoModelForSequenceClassification (baseline)" in line for line in table_rows)
    assert any(
        "logistic regression on frozen sentence-transformers embeddings (baseline)" in line
        for line in table_rows
    )
    width, height = png_size(report_dir / "report.png")
    assert width > 100 and height > 100


@pytest.mark.slow  # the sweep_report fixture trains 3 poolings x 2 seeds and both baselines
def test_a_failing_pooling_is_reported_and_the_others_go_on(sweep_report):
    _, report_dir = sweep_report
    document = json.loads((report_dir / "report.json").read_text())
    by_name = {row["name"]: row for row in document["summary"]}
    assert by_name["broken"]["mean"] is None
    assert by_name["broken"]["failures"] == [
        "seed 0: RuntimeError: broken on purpose",
        "seed 1: RuntimeError: broken on purpose",
    ]
    assert "- broken, seed 1: RuntimeError: broken on purpose" in (report_dir / "report.md").read_text()
    for name in ("mean", "concat_layers", "vanilla", "logistic_regression"):
        assert by_name[name]["failures"] == [] and len(by_name[name]["values"]) == 2
    # failed rows come last
    assert [row["mean"] is None for row in document["summary"]] == sorted(
        row["mean"] is None for row in document["summary"]
    )


@pytest.mark.slow  # the sweep_report fixture trains 3 poolings x 2 seeds and both baselines
def test_report_numbers_are_the_runs_own(sweep_report):
    _, report_dir = sweep_report
    document = json.loads((report_dir / "report.json").read_text())
    assert document["metric"] == "test_f1_macro" and document["problem_type"] == "single_label_classification"
    for row in document["summary"]:
        records = [
            record
            for record in document["records"]
            if record["name"] == row["name"] and record["status"] == "ok"
        ]
        assert row["values"] == [record["metrics"]["test_f1_macro"] for record in records]
        if records:
            mean = sum(row["values"]) / len(row["values"])
            assert row["mean"] == pytest.approx(mean)
            line = next(
                line
                for line in (report_dir / "report.md").read_text().splitlines()
                if line.startswith(f"| {row['title']} |")
            )
            assert line.split(" | ")[1].startswith(f"{mean:.4f}")
    concat = next(record for record in document["records"] if record["name"] == "concat_layers")
    # a concat_layers model: the tiny backbone (2 layers, hidden 32) with a head over 2 x 32 features
    assert concat["parameters"] > 0 and {"train_runtime", "train_samples_per_second", "eval_f1_macro"} <= set(
        concat["metrics"]
    )


def test_multi_label_sweep_ranks_by_micro_f1(tiny_backbone_path, tmp_path):
    report_dir = tmp_path / "report"
    status = main(
        [
            "--poolings",
            "max",
            "--baselines",
            "logistic_regression",
            "--report_dir",
            str(report_dir),
            "--model_name_or_path",
            tiny_backbone_path,
            *data_flags(tmp_path, multi_label_rows),
            *FAST[:-2],
            "--num_train_epochs",
            "1",
        ]
    )
    assert status == 0
    document = json.loads((report_dir / "report.json").read_text())
    assert (document["problem_type"], document["metric"]) == ("multi_label_classification", "test_f1_micro")
    summary = document["summary"]
    assert sorted(row["name"] for row in summary) == ["logistic_regression", "max"]
    assert all(not row["failures"] for row in summary)
    # Each row's values are its runs' test micro-F1, and the rows are ranked by their mean, best first (a higher
    # micro-F1 is better), in report.json and in report.md's table alike.
    for row in summary:
        runs = [record for record in document["records"] if record["name"] == row["name"]]
        assert row["values"] == [record["metrics"]["test_f1_micro"] for record in runs]
    means = [row["mean"] for row in summary]
    assert means == sorted(means, reverse=True)
    lines = (report_dir / "report.md").read_text().splitlines()
    table = [line for line in lines if line.startswith("| ") and not line.startswith("| pooling")]
    assert [line.split(" | ")[0].removeprefix("| ") for line in table] == [row["title"] for row in summary]


def test_bad_sweep_arguments_are_refused_before_any_run(tmp_path):
    with pytest.raises(UsageError, match="Unknown pooling.*Valid choices: .*mean"):
        parse_sweep_arguments(["--poolings", "mean,avg", "--report_dir", str(tmp_path)])
    with pytest.raises(UsageError, match="Unknown baseline.*Valid choices: vanilla, logistic_regression"):
        parse_sweep_arguments(["--baselines", "svm", "--report_dir", str(tmp_path)])
    with pytest.raises(UsageError, match="the sweep sets the pooling"):
        parse_sweep_arguments(["--report_dir", str(tmp_path), "--pooling", "mean"])
    with pytest.raises(UsageError, match="the sweep sets the pooling"):
        parse_sweep_arguments(["--report_dir", str(tmp_path), "--seed=3"])
    assert (
        main(
            [
                "--report_dir",
                str(tmp_path / "r"),
                "--poolings",
                "mean",
                "--train_file",
                str(tmp_path / "no.csv"),
                "--model_name_or_path",
                "x",
                "--do_eval",
            ]
        )
        == 2
    )
    assert not (tmp_path / "r").exists()


def test_error_bars_only_with_several_seeds(tmp_path):
    def record(name, seed, value, kind="pooling"):
        return RunRecord(name=name, kind=kind, seed=seed, metrics={"eval_mse": value, "eval_pearson": 0.5})

    sweep = Sweep(
        problem_type="regression",
        metric="eval_mse",
        greater_is_better=False,
        names=["mean", "cls"],
        seeds=[0, 1],
        train_arguments=[],
        records=[
            record("mean", 0, 0.2),
            record("mean", 1, 0.4),
            record("cls", 0, 0.1),
            record("cls", 1, 0.1),
        ],
    )
    rows = summarise(sweep)
    assert [row.name for row in rows] == ["cls", "mean"]  # lower MSE first
    assert rows[1].std == pytest.approx(0.1414, abs=1e-4) and rows[1].mean == pytest.approx(0.3)
    paths = write_report(sweep, tmp_path)
    assert "| mean | 0.3000 ± 0.1414 |" in paths["markdown"].read_text()
    png_size(paths["chart"])


def test_the_vanilla_baseline_gives_its_new_classifier_the_head_learning_rate(
    tiny_backbone_path, minilm_tokenizer
):
    from pooled_models.sweep.baselines import vanilla_model
    from pooled_models.train.data.labels import Labels
    from pooled_models.train.options import head_parameters
    from pooled_models.train.source import ModelSource

    labels = Labels(problem_type="multi_label_classification", names=["a", "b", "c"])
    source = ModelSource(path=tiny_backbone_path, base_model=tiny_backbone_path, tokenizer=tiny_backbone_path)
    model = vanilla_model(source, labels, minilm_tokenizer)
    assert model.config.problem_type == "multi_label_classification" and model.config.id2label[2] == "c"
    # BERT's pooler comes from the checkpoint; only the classifier is new
    assert model.newly_initialized_parameters == ["classifier.bias", "classifier.weight"]
    assert head_parameters(model) == {id(model.classifier.weight), id(model.classifier.bias)}
