"""train.py end to end on a tiny random backbone: the quickstart config, each problem type, the outputs."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers import (
    FAST,
    REPO,
    leftovers,
    multi_label_rows,
    pair_regression_rows,
    topic_rows,
    train,
    write_rows,
)
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, TrainerCallback

from pooled_models import PooledForSequenceClassification
from pooled_models.errors import DataError, UsageError
from pooled_models.thresholds import tune_thresholds
from pooled_models.train.cli import run
from pooled_models.train.demo import TEAMS
from pooled_models.train.evaluation import compute_metrics

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def quickstart(one_torch_thread, tiny_backbone_path, tmp_path_factory, monkeypatch_module):
    """configs/quickstart.yaml as make demo runs it, on the tiny backbone and for one epoch."""
    monkeypatch_module.chdir(REPO)  # the config's data paths are relative to the repository
    output_dir = tmp_path_factory.mktemp("quickstart") / "model"
    result = run(
        [
            "configs/quickstart.yaml",
            "--model_name_or_path",
            tiny_backbone_path,
            "--output_dir",
            str(output_dir),
            "--num_train_epochs",
            "1",
            "--learning_rate",
            "1e-3",
            "--disable_tqdm",
            "true",
        ]
    )
    return result


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_quickstart_writes_a_complete_model_folder(quickstart):
    folder = quickstart.output_dir
    names = {path.name for path in folder.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "README.md",
        "all_results.json",
        "predictions.jsonl",
        "modeling_pooled.py",
        "configuration_pooled.py",
        "pooling.py",
        "losses.py",
    } <= names
    assert not [
        name for name in names if name.startswith("checkpoint-") or name.endswith((".bin", ".pt", ".pkl"))
    ]
    assert leftovers(folder) == [folder]  # no .incomplete sibling


def test_quickstart_model_loads_with_its_labels_and_matches_the_reported_metrics(quickstart):
    folder = quickstart.output_dir
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    assert type(model) is PooledForSequenceClassification
    assert model.config.problem_type == "single_label_classification"
    assert set(model.config.id2label.values()) == set(TEAMS)
    assert model.config.label2id == {name: index for index, name in model.config.id2label.items()}

    # The saved weights reproduce the test metrics that were reported.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 100
    with torch.no_grad():
        logits = model(
            **tokenizer([row["text"] for row in rows], padding=True, return_tensors="pt")
        ).logits.numpy()
    labels = np.array([model.config.label2id[row["label"]] for row in rows])
    recomputed = compute_metrics(logits, labels, "single_label_classification")
    assert recomputed["accuracy"] == pytest.approx(quickstart.metrics["test_accuracy"], abs=1e-6)
    assert [row["prediction"] for row in rows] == [model.config.id2label[int(i)] for i in logits.argmax(-1)]
    for row, scores in zip(rows, torch.tensor(logits).softmax(-1), strict=True):
        assert sum(row["scores"].values()) == pytest.approx(1.0, abs=1e-4)
        assert row["scores"][row["prediction"]] == pytest.approx(scores.max().item(), abs=1e-5)


def test_quickstart_classifies_the_example_texts_with_pipeline(quickstart):
    from transformers import AutoTokenizer

    texts = yaml.safe_load((REPO / "configs/quickstart.yaml").read_text())["example_texts"]
    assert [text for text, _ in quickstart.examples] == texts
    # Each answer is the saved model's own prediction: its best label, with that label's probability.
    folder = quickstart.output_dir
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    for text, answers in quickstart.examples:
        with torch.no_grad():
            scores = model(**tokenizer(text, return_tensors="pt")).logits.softmax(-1)[0]
        best = int(scores.argmax())
        ((answer,),) = answers.values()  # the one task's one best label
        assert answer["label"] == model.config.id2label[best] and answer["label"] in TEAMS
        assert answer["score"] == pytest.approx(scores[best].item(), abs=1e-5)


def test_model_card_metadata_and_evaluation_table_hold_the_run(quickstart):
    folder = quickstart.output_dir
    card = ModelCard.load(folder / "README.md")
    data = card.data
    assert data.library_name == "transformers" and data.pipeline_tag == "text-classification"
    assert "pooled_models" in data.tags and "pooling-mean" in data.tags
    assert sorted(data.metrics) == ["accuracy", "f1"]
    results = {
        (result.dataset_split, result.metric_name): result.metric_value for result in data.eval_results
    }
    metrics = quickstart.metrics
    assert results[("validation", "Accuracy (validation)")] == round(metrics["eval_accuracy"], 4)
    assert results[("test", "F1 (macro) (test)")] == round(metrics["test_f1_macro"], 4)
    text = card.text
    table = "\n".join(
        [
            "| Split | accuracy | f1_macro |",
            "|---|---|---|",
            f"| validation | {round(metrics['eval_accuracy'], 4)} | {round(metrics['eval_f1_macro'], 4)} |",
            f"| test | {round(metrics['test_accuracy'], 4)} | {round(metrics['test_f1_macro'], 4)} |",
        ]
    )
    assert table in text  # one Markdown table: no blank line may split it
    assert {result.dataset_name for result in data.eval_results} == {"validation.csv", "test.csv"}
    assert "trust_remote_code=True" in text and "import pooled_models" in text
    assert "Average of the real tokens" in text  # what mean pooling is
    assert f"| learning rate (backbone) | {1e-3} |" in text


def test_problem_type_is_detected_and_each_gets_its_metrics(tiny_backbone_path, tmp_path):
    multi = write_rows(tmp_path / "multi.jsonl", multi_label_rows(60))
    result = train(
        tiny_backbone_path,
        tmp_path / "multi",
        "--train_file",
        str(multi),
        "--validation_file",
        str(multi),
        "--do_train",
        "--do_eval",
    )
    config = json.loads((result.output_dir / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"
    assert sorted(config["label2id"]) == ["food", "music", "sport"]
    assert {"eval_f1_micro", "eval_f1_macro", "eval_exact_match"} <= set(result.metrics)

    pairs = write_rows(tmp_path / "pairs.csv", pair_regression_rows(60))
    result = train(
        tiny_backbone_path,
        tmp_path / "regression",
        "--train_file",
        str(pairs),
        "--validation_file",
        str(pairs),
        "--test_file",
        str(pairs),
        "--text_column",
        "sentence1",
        "--text_pair_column",
        "sentence2",
        "--label_column",
        "score",
        "--do_train",
        "--do_eval",
        "--do_predict",
    )
    config = json.loads((result.output_dir / "config.json").read_text())
    assert config["problem_type"] == "regression" and len(config["id2label"]) == 1
    assert {"eval_mse", "eval_pearson", "eval_spearman", "test_mse"} <= set(result.metrics)
    prediction = json.loads((result.output_dir / "predictions.jsonl").read_text().splitlines()[0])
    assert set(prediction) == {"sentence1", "sentence2", "label", "prediction"}
    assert isinstance(prediction["prediction"], float)


def test_multi_label_strings_split_by_a_separator_and_the_decision_threshold(tiny_backbone_path, tmp_path):
    rows = [{"text": row["text"], "label": "|".join(row["label"])} for row in multi_label_rows(40)]
    data = write_rows(tmp_path / "multi.csv", rows)
    # One threshold per label (sorted names: food, music, sport), saved with the model and used everywhere.
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--train_file",
        str(data),
        "--test_file",
        str(data),
        "--label_separator",
        "|",
        "--do_train",
        "--do_predict",
        "--num_train_epochs",
        "1",
        "--decision_threshold",
        "[0.3, 0.5, 0.7]",
    )
    config = json.loads((result.output_dir / "config.json").read_text())
    assert config["decision_threshold"] == [0.3, 0.5, 0.7]
    thresholds = dict(zip(["food", "music", "sport"], config["decision_threshold"], strict=True))
    predictions = [
        json.loads(line) for line in (result.output_dir / "predictions.jsonl").read_text().splitlines()
    ]
    assert len(predictions) == 40
    for prediction in predictions:
        assert set(prediction["scores"]) == set(thresholds)
        expected = [name for name, score in prediction["scores"].items() if score >= thresholds[name]]
        assert prediction["prediction"] == expected


def test_integer_labels_keep_their_order_and_names(tiny_backbone_path, tmp_path):
    rows = [
        {"text": row["text"], "label": {"sport": 10, "food": 2, "music": 7}[row["label"]]}
        for row in topic_rows(30)
    ]
    data = write_rows(tmp_path / "train.parquet", rows)
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--train_file",
        str(data),
        "--do_train",
        "--num_train_epochs",
        "1",
    )
    config = json.loads((result.output_dir / "config.json").read_text())
    assert config["id2label"] == {"0": "2", "1": "7", "2": "10"}


def test_problem_type_can_be_overridden(tiny_backbone_path, tmp_path):
    rows = [{"text": row["text"], "label": float(index % 3)} for index, row in enumerate(topic_rows(30))]
    data = write_rows(tmp_path / "train.json", rows)
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--train_file",
        str(data),
        "--do_train",
        "--num_train_epochs",
        "1",
        "--problem_type",
        "single_label_classification",
    )
    config = json.loads((result.output_dir / "config.json").read_text())
    assert config["problem_type"] == "single_label_classification"
    assert config["id2label"] == {"0": "0", "1": "1", "2": "2"}


def test_the_model_learns_an_easy_task(tiny_backbone_path, tmp_path):
    train_file = write_rows(tmp_path / "train.csv", topic_rows(240, seed=1))
    validation_file = write_rows(tmp_path / "validation.csv", topic_rows(60, seed=2))
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--train_file",
        str(train_file),
        "--validation_file",
        str(validation_file),
        "--do_train",
        "--do_eval",
        "--num_train_epochs",
        "4",
    )
    assert result.metrics["eval_accuracy"] >= 0.9  # chance is 1/3


def test_head_learning_rate_and_frozen_backbone(tiny_backbone_path, tmp_path):
    data = write_rows(tmp_path / "train.csv", topic_rows(48))
    seen = {}

    class RecordOptimizer(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
            head = {id(p) for p in [*model.classifier.parameters()]}
            # initial_lr: the rate the scheduler scales (warmup starts the current one at 0)
            seen["groups"] = [
                ({id(p) in head for p in group["params"]}, group["initial_lr"])
                for group in optimizer.param_groups
            ]

    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--train_file",
        str(data),
        "--do_train",
        "--num_train_epochs",
        "1",
        "--head_learning_rate",
        "5e-3",
        "--freeze_backbone",
        callbacks=[RecordOptimizer()],
    )
    # Only head parameters are optimised (the backbone is frozen), all at the head learning rate.
    assert seen["groups"] and all(kinds == {True} and lr == 5e-3 for kinds, lr in seen["groups"])
    trained = load_file(result.output_dir / "model.safetensors")
    original = load_file(Path(tiny_backbone_path) / "model.safetensors")
    for name, tensor in original.items():
        if not name.startswith("pooler."):
            assert torch.equal(trained[f"backbone.{name}"], tensor), name

    seen.clear()
    train(
        tiny_backbone_path,
        tmp_path / "both",
        "--train_file",
        str(data),
        "--do_train",
        "--num_train_epochs",
        "1",
        "--head_learning_rate",
        "5e-3",
        callbacks=[RecordOptimizer()],
    )
    rates = {frozenset(kinds): lr for kinds, lr in seen["groups"]}
    assert rates == {frozenset({True}): 5e-3, frozenset({False}): 1e-3}


def test_early_stopping_stops_when_the_metric_stalls_and_keeps_the_best(tiny_backbone_path, tmp_path):
    data = write_rows(tmp_path / "train.csv", topic_rows(32))
    # With both learning rates at zero nothing improves, so patience 1 stops after the second evaluation.
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--train_file",
        str(data),
        "--validation_file",
        str(data),
        "--do_train",
        "--do_eval",
        "--num_train_epochs",
        "10",
        "--learning_rate",
        "0",
        "--head_learning_rate",
        "0",
        "--early_stopping_patience",
        "1",
    )
    assert result.metrics["epoch"] == 2
    state = json.loads((result.output_dir / "trainer_state.json").read_text())
    assert Path(state["best_model_checkpoint"]).name == "checkpoint-2"
    assert state["best_metric"] == result.metrics["eval_f1_macro"]


def test_evaluating_a_trained_model_reuses_its_labels(quickstart, tmp_path):
    result = run(
        [
            "--model_name_or_path",
            str(quickstart.output_dir),
            "--validation_file",
            str(REPO / "data/demo/validation.csv"),
            "--do_eval",
            "--output_dir",
            str(tmp_path / "eval"),
            "--disable_tqdm",
            "true",
        ]
    )
    assert result.metrics["eval_accuracy"] == pytest.approx(quickstart.metrics["eval_accuracy"])
    with pytest.raises(UsageError, match="settings cannot change"):
        run(
            [
                "--model_name_or_path",
                str(quickstart.output_dir),
                "--validation_file",
                str(REPO / "data/demo/validation.csv"),
                "--do_eval",
                "--output_dir",
                str(tmp_path / "eval2"),
                "--pooling",
                "max",
            ]
        )


def saved_without_a_problem_type(backbone: str, folder: Path, names: list[str]) -> Path:
    """A PooledForSequenceClassification saved with save_pretrained, as a user saves one: its config names no
    problem type (train.py records one; transformers' classifiers only at their first loss)."""
    from transformers import AutoConfig, AutoTokenizer

    from pooled_models import PooledConfig

    torch.manual_seed(0)
    config = PooledConfig(
        backbone_config=AutoConfig.from_pretrained(backbone), id2label=dict(enumerate(names))
    )
    assert config.problem_type is None
    PooledForSequenceClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(backbone).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("names", "flags", "problem_type"),
    [
        (["sport", "food"], (), "single_label_classification"),
        (["score"], (), "regression"),
        (["sport", "food"], ("--problem_type", "multi_label_classification"), "multi_label_classification"),
    ],
    ids=["two_outputs", "one_output", "problem_type_flag"],
)
def test_predicting_with_a_model_saved_without_a_problem_type(
    names, flags, problem_type, tiny_backbone_path, tmp_path
):
    """--do_predict on a test file without labels, from a model whose config names no problem type: read as
    transformers' loss reads it (one output: regression; more: single-label), or as --problem_type says. It used to
    fail writing the predictions with "'numpy.float64' object is not iterable"."""
    folder = saved_without_a_problem_type(tiny_backbone_path, tmp_path / "saved", names)
    test = write_rows(tmp_path / "test.csv", [{"text": row["text"]} for row in topic_rows(6)])
    result = train(str(folder), tmp_path / "out", "--test_file", str(test), "--do_predict", *flags)
    assert json.loads((result.output_dir / "config.json").read_text())["problem_type"] == problem_type
    predictions = [
        json.loads(line) for line in (result.output_dir / "predictions.jsonl").read_text().splitlines()
    ]
    assert len(predictions) == 6 and all("label" not in prediction for prediction in predictions)
    for prediction in predictions:
        if problem_type == "regression":
            assert isinstance(prediction["prediction"], float) and "scores" not in prediction
            continue
        assert set(prediction["scores"]) == set(names)
        if problem_type == "single_label_classification":
            assert prediction["prediction"] == max(names, key=prediction["scores"].get)
            assert sum(prediction["scores"].values()) == pytest.approx(1, abs=1e-5)
        else:
            assert set(prediction["prediction"]) <= set(names)


def test_a_problem_type_flag_that_the_saved_outputs_cannot_take_is_refused(tiny_backbone_path, tmp_path):
    folder = saved_without_a_problem_type(tiny_backbone_path, tmp_path / "saved", ["score"])
    test = write_rows(tmp_path / "test.csv", [{"text": row["text"]} for row in topic_rows(4)])
    with pytest.raises(DataError, match="names no problem type and has 1 output.*multi_label_classification"):
        train(
            str(folder),
            tmp_path / "out",
            "--test_file",
            str(test),
            "--do_predict",
            "--problem_type",
            "multi_label_classification",
        )
    assert leftovers(tmp_path / "out") == []


def test_long_texts_are_truncated_at_the_backbone_limit_and_counted(tiny_backbone_path, tmp_path, caplog):
    rows = topic_rows(20)
    rows[3]["text"] = " ".join(["football"] * 200)  # far beyond the tiny backbone's 64 positions
    data = write_rows(tmp_path / "train.csv", rows)
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--train_file",
        str(data),
        "--do_train",
        "--num_train_epochs",
        "1",
        "--max_seq_length",
        "512",
    )
    assert "max_seq_length=512 is more than the backbone takes; using its limit, 64" in caplog.text
    assert "1 of 20 rows are longer than 64 tokens and were truncated" in caplog.text
    assert "| train | 20 | 1 |" in (result.output_dir / "README.md").read_text()


def test_output_dir_is_never_clobbered(tiny_backbone_path, tmp_path):
    data = write_rows(tmp_path / "train.csv", topic_rows(24))
    output_dir = tmp_path / "out"
    first = train(
        tiny_backbone_path, output_dir, "--train_file", str(data), "--do_train", "--num_train_epochs", "1"
    )
    old_weights = (first.output_dir / "model.safetensors").read_bytes()
    # The message names the flag that replaces an earlier run's model; it does (below).
    with pytest.raises(
        UsageError, match="holds a model an earlier train.py run wrote. Pass --overwrite_output_dir"
    ):
        train(tiny_backbone_path, output_dir, "--train_file", str(data), "--do_train")
    # With --overwrite_output_dir a failed run still leaves the old folder alone...
    bad = write_rows(tmp_path / "bad.csv", [{"text": "x", "label": "a"}, {"text": "", "label": "b"}])
    with pytest.raises(UsageError):
        train(
            tiny_backbone_path, output_dir, "--train_file", str(bad), "--do_train", "--overwrite_output_dir"
        )
    assert (output_dir / "model.safetensors").read_bytes() == old_weights
    # ...and a successful one replaces it.
    train(
        tiny_backbone_path,
        output_dir,
        "--train_file",
        str(data),
        "--do_train",
        "--overwrite_output_dir",
        "--num_train_epochs",
        "1",
        "--seed",
        "1",
    )
    assert (output_dir / "model.safetensors").read_bytes() != old_weights
    assert leftovers(output_dir) == [output_dir]


def test_a_run_that_fails_before_its_first_checkpoint_leaves_nothing(tiny_backbone_path, tmp_path):
    data = write_rows(tmp_path / "train.csv", topic_rows(24))

    class Crash(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            raise RuntimeError("out of memory, say")

    with pytest.raises(RuntimeError, match="out of memory"):
        train(
            tiny_backbone_path, tmp_path / "out", "--train_file", str(data), "--do_train", callbacks=[Crash()]
        )
    assert leftovers(tmp_path / "out") == []


def test_push_to_hub_uploads_the_finished_folder(tiny_backbone_path, tmp_path, monkeypatch):
    import huggingface_hub

    uploads = []

    class FakeApi:
        def __init__(self, token=None):
            pass

        def create_repo(self, repo_id, private=None, exist_ok=False):
            return type("RepoUrl", (), {"repo_id": repo_id})()

        def upload_folder(self, repo_id, folder_path, **kwargs):
            uploads.append((repo_id, sorted(path.name for path in Path(folder_path).iterdir()), kwargs))

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    data = write_rows(tmp_path / "train.csv", topic_rows(24))
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--train_file",
        str(data),
        "--do_train",
        "--num_train_epochs",
        "1",
        "--push_to_hub",
        "--hub_model_id",
        "someone/topics",
    )
    ((repo_id, names, kwargs),) = uploads
    assert repo_id == "someone/topics"
    assert {"README.md", "model.safetensors", "config.json", "tokenizer.json", "modeling_pooled.py"} <= set(
        names
    )
    assert 'model="someone/topics"' in (result.output_dir / "README.md").read_text()


def test_fast_settings_are_valid_flags():
    # FAST is shared by these tests; a typo there would silently test something else.
    from pooled_models.train.arguments import parse_arguments

    _, _, training_args = parse_arguments(["--output_dir", "x", "--do_train", *FAST])
    assert training_args.learning_rate == 1e-3 and training_args.num_train_epochs == 3


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_run_from_a_config_file(tiny_backbone_path, tmp_path, suffix):
    data = write_rows(tmp_path / "train.jsonl", topic_rows(24))
    settings = {
        "model_name_or_path": tiny_backbone_path,
        "train_file": str(data),
        "validation_file": str(data),
        "output_dir": str(tmp_path / "out"),
        "do_train": True,
        "do_eval": True,
        "num_train_epochs": 1,
        "pooling": "max",
        "classifier_head": "dense",
        "disable_tqdm": True,
    }
    config = tmp_path / f"run{suffix}"
    config.write_text(json.dumps(settings) if suffix == ".json" else yaml.safe_dump(settings))
    result = run([str(config), "--learning_rate", "2e-3"])
    saved = json.loads((result.output_dir / "config.json").read_text())
    assert (saved["pooling"], saved["classifier_head"]) == ("max", "dense")
    assert json.loads((result.output_dir / "training_args.json").read_text())["learning_rate"] == 2e-3
    assert "eval_accuracy" in result.metrics


def test_label_token_pooling_starts_from_the_label_names_and_leaves_room_for_them(
    tiny_backbone_path, tmp_path, caplog
):
    rows = multi_label_rows(30)
    rows[0]["text"] = " ".join(["guitar"] * 100)  # longer than the 64 positions less the 3 label tokens
    data = write_rows(tmp_path / "multi.jsonl", rows)
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        "--train_file",
        str(data),
        "--validation_file",
        str(data),
        "--do_train",
        "--do_eval",
        "--num_train_epochs",
        "1",
        "--pooling",
        "label_tokens",
    )
    config = json.loads((result.output_dir / "config.json").read_text())
    assert config["pooling"] == "label_tokens" and config["label_token_init"] == "label_text"
    # train.py's defaults: the top 2 layers (here all of this 2-layer BERT's) and one-way attention, said in the log
    assert config["label_token_layers"] == 2 and config["label_token_attention"] == "one_way"
    assert "Label tokens join the backbone's top 2 layers (train.py's default" in caplog.text
    assert "Label tokens attend to the text, the text not to them (train.py's default" in caplog.text
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    names = [config["id2label"][str(index)] for index in range(3)]
    assert config["label_token_init_ids"] == [
        tokenizer(name, add_special_tokens=False)["input_ids"] for name in names
    ]
    assert "rows are longer than 61 tokens and were truncated" in caplog.text
    assert {"eval_f1_micro", "eval_f1_macro"} <= set(result.metrics)


def test_checkpoints_are_kept_only_when_asked(tiny_backbone_path, tmp_path):
    data = write_rows(tmp_path / "train.csv", topic_rows(24))
    kept = train(
        tiny_backbone_path,
        tmp_path / "kept",
        "--train_file",
        str(data),
        "--do_train",
        "--num_train_epochs",
        "3",
        "--keep_checkpoints",
    )
    # save_total_limit 2 (the default) keeps the last two epochs' checkpoints, weights as safetensors
    assert sorted(path.name for path in kept.output_dir.glob("checkpoint-*")) == [
        "checkpoint-4",
        "checkpoint-6",
    ]
    assert (kept.output_dir / "checkpoint-6" / "model.safetensors").is_file()
    assert not list(kept.output_dir.glob("checkpoint-*/pytorch_model.bin"))


# ----------------------------------------------------------------------------------------------------
# Multi-label decisions: thresholds tuned on validation, pos_weight from the training labels
# ----------------------------------------------------------------------------------------------------

MULTI_LABEL_NAMES = ["food", "music", "sport"]  # sorted, so in id order


def multi_label_files(folder: Path) -> dict[str, Path]:
    return {
        split: write_rows(folder / f"{split}.jsonl", multi_label_rows(count, seed=seed))
        for split, count, seed in (("train", 60, 0), ("validation", 30, 1), ("test", 30, 2))
    }


def multi_label_run(backbone: str, folder: Path, *flags: str):
    files = multi_label_files(folder)
    return train(
        backbone,
        folder / "out",
        "--train_file",
        str(files["train"]),
        "--validation_file",
        str(files["validation"]),
        "--test_file",
        str(files["test"]),
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--num_train_epochs",
        "1",
        *flags,
    )


def saved_scores_and_targets(folder: Path, rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """The saved model's sigmoid scores of ``rows``, and their 0/1 targets."""
    from transformers import AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        logits = model(**tokenizer([row["text"] for row in rows], padding=True, return_tensors="pt")).logits
    targets = np.array([[float(name in row["label"]) for name in MULTI_LABEL_NAMES] for row in rows])
    return torch.sigmoid(logits).numpy(), targets


def test_a_tuned_global_threshold_is_saved_evaluated_used_and_shown(tiny_backbone_path, tmp_path):
    result = multi_label_run(tiny_backbone_path, tmp_path)  # tune_thresholds auto: global, for micro-F1
    folder = result.output_dir
    threshold = json.loads((folder / "config.json").read_text())["decision_threshold"]
    assert isinstance(threshold, float) and 0 < threshold < 1

    # The threshold is what tune_thresholds gives on the saved model's validation scores...
    scores, targets = saved_scores_and_targets(folder, multi_label_rows(30, seed=1))
    assert threshold == pytest.approx(
        tune_thresholds(scores, targets, per_label=False, average="micro"), abs=1e-4
    )
    # ...the validation metrics are measured at it (and reported at 0.5 as well)...
    logits = np.log(scores / (1 - scores))
    tuned, at_one_half = (
        compute_metrics(logits, targets, "multi_label_classification", value) for value in (threshold, 0.5)
    )
    for metric in ("f1_micro", "f1_macro", "exact_match"):
        assert result.metrics[f"eval_{metric}"] == pytest.approx(tuned[metric], abs=1e-6)
        assert result.metrics[f"eval_{metric}_at_0.5"] == pytest.approx(at_one_half[metric], abs=1e-6)
    assert result.metrics["eval_f1_micro"] >= result.metrics["eval_f1_micro_at_0.5"]
    saved_results = json.loads((folder / "all_results.json").read_text())
    assert saved_results["eval_f1_micro_at_0.5"] == result.metrics["eval_f1_micro_at_0.5"]

    # ...and the test predictions are made at it.
    predictions = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    for prediction in predictions:
        assert prediction["prediction"] == [
            name for name, score in prediction["scores"].items() if score >= threshold
        ]

    card = (folder / "README.md").read_text()
    assert (
        f"decision threshold: **{round(threshold, 4)}** for every label, tuned on the validation split (30 rows) "
        "to maximise micro-F1."
    ) in card
    assert "optimistic" in card
    assert (
        "\n".join(
            ["| Validation | at 0.5 | tuned |", "|---|---|---|"]
            + [
                f"| {metric} | {round(at_one_half[metric], 4)} | {round(result.metrics[f'eval_{metric}'], 4)} |"
                for metric in ("f1_micro", "f1_macro", "exact_match")
            ]
        )
        in card
    )
    # train.py's multi-label default loss, with its settings
    assert (
        "Loss: `asymmetric` (`asymmetric_gamma_neg` 4.0, `asymmetric_gamma_pos` 0.0, `asymmetric_clip` 0.05)."
        in card
    )
    assert json.loads((folder / "config.json").read_text())["multi_label_loss"] == "asymmetric"


def test_per_label_thresholds_pos_weight_auto_and_the_loss_reach_config_and_card(
    tiny_backbone_path, tmp_path
):
    result = multi_label_run(
        tiny_backbone_path,
        tmp_path,
        "--tune_thresholds",
        "per_label",
        "--threshold_average",
        "macro",
        "--pos_weight",
        "auto",
        "--multi_label_loss",
        "focal",
    )
    folder = result.output_dir
    config = json.loads((folder / "config.json").read_text())
    train_targets = np.array(
        [[float(name in row["label"]) for name in MULTI_LABEL_NAMES] for row in multi_label_rows(60)]
    )
    positives = train_targets.sum(axis=0)
    assert config["pos_weight"] == pytest.approx(list((60 - positives) / positives))
    assert (config["multi_label_loss"], config["focal_gamma"]) == ("focal", 2.0)

    thresholds = config["decision_threshold"]
    scores, targets = saved_scores_and_targets(folder, multi_label_rows(30, seed=1))
    assert thresholds == pytest.approx(
        tune_thresholds(scores, targets, per_label=True, average="macro"), abs=1e-4
    )

    card = (folder / "README.md").read_text()
    assert (
        "Loss: `focal` (`focal_gamma` 2.0), with each label's positive term weighted (negatives / positives per "
        "label, counted in the training split)."
    ) in card
    assert (
        "one per label (in the table below), tuned on the validation split (30 rows) to maximise macro-F1."
        in card
    )
    table = "\n".join(
        ["| Label | Threshold | Positive weight |", "|---|---|---|"]
        + [
            f"| `{name}` | {round(value, 4)} | {round(weight, 4)} |"
            for name, value, weight in zip(MULTI_LABEL_NAMES, thresholds, config["pos_weight"], strict=True)
        ]
    )
    assert table in card

    # Evaluating the saved model keeps its thresholds, and says so.
    evaluation = run(
        [
            "--model_name_or_path",
            str(folder),
            "--validation_file",
            str(tmp_path / "validation.jsonl"),
            "--do_eval",
            "--output_dir",
            str(tmp_path / "evaluated"),
            "--disable_tqdm",
            "true",
        ]
    )
    assert evaluation.metrics["eval_f1_macro"] == pytest.approx(result.metrics["eval_f1_macro"], abs=1e-6)
    # Nothing changed the model: no copy is published (issue 48), and the one evaluated still has its thresholds.
    assert not (evaluation.output_dir / "config.json").exists()
    assert json.loads((folder / "config.json").read_text())["decision_threshold"] == thresholds
    # Or tunes them again, without training: here one threshold for every label.
    retuned = run(
        [
            "--model_name_or_path",
            str(folder),
            "--validation_file",
            str(tmp_path / "validation.jsonl"),
            "--do_eval",
            "--output_dir",
            str(tmp_path / "retuned"),
            "--disable_tqdm",
            "true",
            "--tune_thresholds",
            "global",
        ]
    )
    threshold = json.loads((retuned.output_dir / "config.json").read_text())["decision_threshold"]
    assert threshold == pytest.approx(
        tune_thresholds(scores, targets, per_label=False, average="micro"), abs=1e-4
    )


@pytest.mark.parametrize(
    "flags, threshold, shown",
    [
        (
            ["--tune_thresholds", "none"],
            None,
            "**0.5** for every label, the default (no threshold was set or tuned).",
        ),
        (["--decision_threshold", "0.3"], 0.3, "**0.3** for every label, set with `--decision_threshold`."),
    ],
)
def test_thresholds_are_left_alone_when_not_tuned_or_set_by_the_user(
    tiny_backbone_path, tmp_path, flags, threshold, shown
):
    result = multi_label_run(tiny_backbone_path, tmp_path, *flags)
    assert json.loads((result.output_dir / "config.json").read_text())["decision_threshold"] == threshold
    assert not [key for key in result.metrics if key.endswith("_at_0.5")]
    card = (result.output_dir / "README.md").read_text()
    assert shown in card and "optimistic" not in card


@pytest.mark.parametrize(
    "data, flags, message",
    [
        (
            "multi",
            ["--tune_thresholds", "per_label"],
            "tune_thresholds=per_label tunes on the validation split: give validation data and --do_eval.",
        ),
        (
            "single",
            ["--do_eval", "--tune_thresholds", "global"],
            "tune_thresholds=global chooses the decision thresholds "
            "of a multi-label classifier; this run's labels are single_label_classification.",
        ),
        (
            "multi",
            ["--do_eval", "--tune_thresholds", "global", "--decision_threshold", "0.3"],
            "decision_threshold is set and tune_thresholds=global would replace it",
        ),
        (
            "single",
            ["--pos_weight", "auto"],
            "pos_weight weights the positive labels of a multi-label loss; this run's "
            "labels are single_label_classification.",
        ),
    ],
)
def test_impossible_threshold_and_pos_weight_settings_are_usage_errors(
    tiny_backbone_path, tmp_path, data, flags, message
):
    rows = multi_label_rows(20) if data == "multi" else topic_rows(20)
    path = write_rows(tmp_path / "data.jsonl", rows)
    # A validation file turns --do_eval on: the cases without it have none.
    validation = ["--validation_file", str(path)] if "--do_eval" in flags else []
    with pytest.raises(UsageError) as error:
        train(
            tiny_backbone_path, tmp_path / "out", "--train_file", str(path), *validation, "--do_train", *flags
        )
    assert message in str(error.value)
    assert leftovers(tmp_path / "out") == []


@pytest.mark.slow  # a whole (tiny) run
def test_a_run_given_a_validation_file_without_do_eval_evaluates_on_it(tiny_backbone_path, tmp_path, caplog):
    """Issue 42: --validation_file without --do_eval was dropped: no evaluation, no warning."""
    train_file = write_rows(tmp_path / "train.jsonl", topic_rows(24))
    validation = write_rows(tmp_path / "validation.jsonl", topic_rows(12, seed=1))
    with caplog.at_level("INFO", logger="pooled_models"):
        result = train(
            tiny_backbone_path,
            tmp_path / "out",
            "--train_file",
            str(train_file),
            "--validation_file",
            str(validation),
            "--do_train",
            "--pooling",
            "mean",
        )
    assert {"eval_accuracy", "eval_f1_macro"} <= set(result.metrics)
    assert "validation_file is given, so the run evaluates on it (--do_eval is implied)." in caplog.text
    card = (result.output_dir / "README.md").read_text()
    assert "| validation |" in card
