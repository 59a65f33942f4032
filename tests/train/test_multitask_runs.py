"""train.py runs of token classification (from flags, CoNLL files) and of several tasks on one backbone (a config
file's tasks): per-task metrics and predictions, best-model selection, thresholds, freezing, the curriculum, head
learning rates, loss weights, resuming, bad configs, the model card and the published models."""

import json
from contextlib import contextmanager

import pytest
import torch
import yaml
from helpers import (
    FAST,
    entity_rows,
    fast_flags,
    leftovers,
    multi_label_rows,
    random_batch,
    tiny_multitask_model,
    topic_rows,
    write_rows,
)
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer, TrainerCallback, pipeline

from pooled_models import PooledForMultiTask, PooledForTokenClassification
from pooled_models.errors import UsageError
from pooled_models.thresholds import tune_thresholds
from pooled_models.train.arguments import HEAD_LEARNING_RATE, DataArguments
from pooled_models.train.cli import run
from pooled_models.train.data.multitask import MultiTaskRows, TaskCollator
from pooled_models.train.tasks import TaskSpec
from pooled_models.train.trainer import PooledTrainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LEARN = ["--num_train_epochs", "8", "--learning_rate", "3e-3", "--head_learning_rate", "1e-2"]


def entity_files(tmp_path, count=96):
    return {
        split: write_rows(tmp_path / f"{split}.jsonl", entity_rows(size, seed))
        for split, (size, seed) in {"train": (count, 0), "validation": (24, 1), "test": (24, 2)}.items()
    }


@contextmanager
def recording_eval_samplers():
    """``(task or None, rows, sampler class name)`` of each evaluation and prediction the Trainer runs."""
    samplers = []
    original = PooledTrainer._get_eval_sampler

    def recording(self, dataset):
        sampler = original(self, dataset)
        samplers.append((dataset[0].get("task"), len(dataset), type(sampler).__name__))
        return sampler

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PooledTrainer, "_get_eval_sampler", recording)
        yield samplers


def split_flags(files):
    return [flag for split, path in files.items() for flag in (f"--{split}_file", str(path))]


def run_config(config: dict, tmp_path, backbone: str, *flags: str, callbacks=()):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    output_dir = tmp_path / "out"
    trains = bool(config.get("do_train")) or "--do_train" in flags
    argv = [str(path), "--model_name_or_path", backbone, "--output_dir", str(output_dir), *fast_flags(trains)]
    argv += flags
    return run(argv, callbacks=callbacks)


def multitask_config(tmp_path, **task_settings):
    entities = entity_files(tmp_path)
    tags = {
        split: write_rows(tmp_path / f"tags_{split}.jsonl", multi_label_rows(size, seed))
        for split, (size, seed) in {"train": (32, 0), "validation": (16, 1), "test": (16, 2)}.items()
    }
    scores = {
        split: write_rows(
            tmp_path / f"scores_{split}.jsonl",
            [{"text": row["text"], "score": float(len(row["words"]))} for row in entity_rows(size, seed)],
        )
        for split, (size, seed) in {"train": (24, 0), "validation": (12, 1), "test": (12, 2)}.items()
    }

    def files(paths):
        return {f"{split}_file": str(path) for split, path in paths.items()}

    tasks = {
        "topic": {"kind": "sequence", "pooling": "attention", **files(entities)},
        "tags": {"kind": "sequence", "pooling": "max", **files(tags)},
        "length": {"kind": "sequence", "label_column": "score", **files(scores)},
        "places": {"kind": "token", **files(entities)},
    }
    for name, settings in task_settings.items():
        tasks[name].update(settings)
    return {"do_train": True, "do_eval": True, "do_predict": True, "tasks": tasks}


def training_only(config: dict) -> dict:
    """``config`` for a run that only trains: without the phases and the files it would not read (train.py refuses a
    validation or test file that the run would not read)."""
    tasks = {
        name: {key: value for key, value in settings.items() if key not in ("validation_file", "test_file")}
        for name, settings in config["tasks"].items()
    }
    return {**config, "do_eval": False, "do_predict": False, "tasks": tasks}


# ----------------------------------------------------------------------------------------------------
# Token classification from flags
# ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def token_run(tiny_backbone_path, tmp_path_factory, one_torch_thread):
    tmp_path = tmp_path_factory.mktemp("token_run")
    files = entity_files(tmp_path)
    output_dir = tmp_path / "out"
    with recording_eval_samplers() as samplers:
        result = run(
            ["--model_name_or_path", tiny_backbone_path, "--output_dir", str(output_dir), *FAST, *LEARN]
            + split_flags(files)
            + ["--tags_column", "tags", "--do_train", "--do_eval", "--do_predict", "--load_best_model_at_end"]
            + ["--example_texts", "we went to Paris today"]
        )
    result.samplers = samplers
    return result, files


def test_a_token_runs_evaluation_and_prediction_are_sorted_by_length(token_run):
    # A token run from flags is a one-task run: train.py's default --length_sorted_eval reaches it too (it used to
    # be ignored, the token rows having no column names for Trainer's length lookup).
    result, _ = token_run
    assert {(rows, sampler) for _, rows, sampler in result.samplers} == {(24, "LengthSortedSampler")}
    assert len(result.samplers) >= 2  # validation at each epoch, and the test split


def test_a_token_run_publishes_a_token_classifier_that_learned(token_run):
    result, _ = token_run
    folder = result.output_dir
    assert json.loads((folder / "config.json").read_text())["architectures"] == [
        "PooledForTokenClassification"
    ]
    assert type(AutoModelForTokenClassification.from_pretrained(folder)) is PooledForTokenClassification
    metrics = json.loads((folder / "all_results.json").read_text())
    assert {"eval_f1", "eval_precision", "eval_recall", "eval_accuracy", "test_f1"} <= set(metrics)
    assert metrics["test_f1"] > 0.8, metrics  # city names among filler words: an easy task, learned
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["best_metric"] == max(
        entry["eval_f1"] for entry in state["log_history"] if "eval_f1" in entry
    )


def test_a_token_run_writes_word_predictions_a_card_and_works_in_pipeline(token_run):
    result, files = token_run
    folder = result.output_dir
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    expected = [json.loads(line) for line in files["test"].read_text().splitlines()]
    assert (
        len(rows) == 24
        and rows[0]["words"] == expected[0]["words"]
        and rows[0]["tags"] == expected[0]["tags"]
    )
    assert all(len(row["prediction"]) == len(row["words"]) for row in rows)
    card = ModelCard.load(folder / "README.md")
    assert card.data.pipeline_tag == "token-classification"
    assert 'aggregation_strategy="simple"' in card.text and "`B-LOC`" in card.text
    assert "| `tokens` | train | `train.jsonl` | 96 | 0 |" in card.text
    groups = pipeline("token-classification", model=str(folder), aggregation_strategy="simple")(
        "we went to Paris"
    )
    assert [(group["entity_group"], group["word"]) for group in groups] == [("LOC", "paris")]
    # the example answers are the saved model's, through pipeline(): the same entity
    ((text, answers),) = result.examples
    assert text == "we went to Paris today"
    assert [(answer["entity_group"], answer["word"]) for answer in answers["tokens"]] == [("LOC", "paris")]


def test_a_config_file_of_one_task_publishes_that_tasks_model(tiny_backbone_path, tmp_path):
    # What a run publishes follows from its tasks: one task, from flags or from a config file's tasks, is its own model.
    files = entity_files(tmp_path, count=32)
    task = {"kind": "token", **{f"{split}_file": str(path) for split, path in files.items()}}
    config = {"do_train": True, "do_eval": True, "tasks": {"places": task}}
    result = run_config(config, tmp_path, tiny_backbone_path, "--num_train_epochs", "1")
    assert json.loads((result.output_dir / "config.json").read_text())["architectures"] == [
        "PooledForTokenClassification"
    ]
    assert "eval_f1" in result.metrics and not any("places" in key for key in result.metrics)


def test_a_token_run_reads_conll_files(tiny_backbone_path, tmp_path):
    def conll(rows):
        return "\n\n".join(
            "\n".join(f"{w} X {t}" for w, t in zip(r["words"], r["tags"], strict=True)) for r in rows
        )

    (tmp_path / "train.conll").write_text("-DOCSTART- -X- O\n\n" + conll(entity_rows(32)) + "\n")
    (tmp_path / "dev.conll").write_text(conll(entity_rows(8, seed=1)) + "\n")
    result = run(
        ["--model_name_or_path", tiny_backbone_path, "--output_dir", str(tmp_path / "out"), *FAST]
        + ["--train_file", str(tmp_path / "train.conll"), "--validation_file", str(tmp_path / "dev.conll")]
        + ["--tags_column", "tags", "--do_train", "--do_eval"]
    )
    assert AutoConfig.from_pretrained(result.output_dir).id2label == {0: "O", 1: "B-LOC", 2: "I-LOC"}
    assert "eval_f1" in result.metrics


# ----------------------------------------------------------------------------------------------------
# Several tasks
# ----------------------------------------------------------------------------------------------------


class RecordSteps(TrainerCallback):
    """The optimizer's learning rate of each parameter, and the parameters at the start and the end of training."""

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.rates = {
            id(p): group.get("initial_lr", group["lr"])
            for group in optimizer.param_groups
            for p in group["params"]
        }
        self.names = {id(p): name for name, p in model.named_parameters()}
        self.start = {name: p.detach().clone() for name, p in model.named_parameters()}

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self.end = {name: p.detach().clone() for name, p in model.named_parameters()}

    def rate_of(self, prefix):
        return {rate for pid, rate in self.rates.items() if self.names[pid].startswith(prefix)}

    def changed(self, prefix):
        return any(not torch.equal(self.start[n], self.end[n]) for n in self.start if n.startswith(prefix))


@pytest.fixture(scope="module")
def multitask_run(tiny_backbone_path, tmp_path_factory, one_torch_thread):
    tmp_path = tmp_path_factory.mktemp("multitask_run")
    config = multitask_config(
        tmp_path,
        places={"head_learning_rate": 0.02, "loss_weight": 2.0},
        length={"freeze_head": True},
        tags={"pooling": "label_tokens"},  # a label-token head gets train.py's label-token defaults
    )
    config.update(
        load_best_model_at_end=True, metric_for_best_model="topic_f1_macro", example_texts=["we met in Rome"]
    )
    record = RecordSteps()
    with recording_eval_samplers() as record.samplers:
        result = run_config(
            config, tmp_path, tiny_backbone_path, "--num_train_epochs", "4", callbacks=[record]
        )
    return result, record


def test_every_task_is_evaluated_with_its_own_metrics(multitask_run):
    result, _ = multitask_run
    metrics = result.metrics
    for name in (
        "eval_topic_f1_macro",
        "eval_topic_accuracy",
        "eval_tags_f1_micro",
        "eval_tags_exact_match",
        "eval_length_mse",
        "eval_length_pearson",
        "eval_places_f1",
        "eval_places_precision",
        "eval_mean_score",
        "eval_loss",
        "test_places_f1",
        "test_mean_score",
    ):
        assert name in metrics, name
    main = [metrics["eval_topic_f1_macro"], metrics["eval_tags_f1_micro"], metrics["eval_places_f1"]]
    pearson = metrics["eval_length_pearson"]
    assert metrics["eval_mean_score"] == pytest.approx(
        (sum(main) + (0 if pearson != pearson else pearson)) / 4
    )


def test_every_tasks_evaluation_and_prediction_is_sorted_by_length(multitask_run):
    # train.py's default --length_sorted_eval applies to every task of a run of tasks, token tasks included.
    _, record = multitask_run
    assert {(task, sampler) for task, _, sampler in record.samplers} == {
        (task, "LengthSortedSampler") for task in ("topic", "tags", "length", "places")
    }
    assert {(task, rows) for task, rows, _ in record.samplers} >= {
        ("places", 24),
        ("topic", 24),
        ("tags", 16),
    }


def test_the_best_model_is_chosen_by_one_tasks_metric(multitask_run):
    result, _ = multitask_run
    state = json.loads((result.output_dir / "trainer_state.json").read_text())
    evaluations = [entry for entry in state["log_history"] if "eval_topic_f1_macro" in entry]
    assert len(evaluations) >= 4
    assert state["best_metric"] == max(entry["eval_topic_f1_macro"] for entry in evaluations[:4])


def test_the_published_multitask_model_holds_every_head_and_the_tuned_threshold(multitask_run, tmp_path):
    result, _ = multitask_run
    folder = result.output_dir
    model = PooledForMultiTask.from_pretrained(folder)
    assert set(model.config.tasks) == {"topic", "tags", "length", "places"}
    assert model.config.tasks["tags"]["problem_type"] == "multi_label_classification"
    assert model.config.tasks["tags"]["multi_label_loss"] == "asymmetric"  # train.py's multi-label default
    # train.py's label-token defaults, as a single-task run has them: the top 2 layers, one-way attention
    assert model.config.tasks["tags"]["label_token_layers"] == 2
    assert model.config.tasks["tags"]["label_token_attention"] == "one_way"
    # tuned on validation: what tune_thresholds gives on the saved model's validation scores of the task
    threshold = model.config.tasks["tags"]["decision_threshold"]
    validation = multi_label_rows(16, 1)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        inputs = tokenizer([row["text"] for row in validation], padding=True, return_tensors="pt")
        scores = torch.sigmoid(model.eval()(**inputs, task="tags").logits).numpy()
    names = ["food", "music", "sport"]
    targets = [[float(name in row["label"]) for name in names] for row in validation]
    assert threshold == pytest.approx(
        tune_thresholds(scores, targets, per_label=False, average="micro"), abs=1e-4
    )
    assert model.config.tasks["length"]["problem_type"] == "regression"
    for name in ("topic", "tags", "length", "places"):
        assert (folder / f"predictions_{name}.jsonl").is_file()
    tags = json.loads((folder / "predictions_tags.jsonl").read_text().splitlines()[0])
    assert isinstance(tags["prediction"], list) and set(tags["scores"]) == {"food", "music", "sport"}
    card = (folder / "README.md").read_text()
    for name in ("`topic`", "`tags`", "`length`", "`places`", "mean_score", "places_only"):
        assert name in card, name
    # the data table names each task's splits, their files and rows
    for task, source, rows in (("topic", "train.jsonl", 96), ("tags", "tags_validation.jsonl", 16)):
        split = "train" if task == "topic" else "validation"
        assert f"| `{task}` | {split} | `{source}` | {rows} | 0 |" in card
    assert (
        f"`tags` predicts a label when its sigmoid score reaches {json.dumps(threshold)} (tuned on the validation split "
        "(16 rows) to maximise micro-F1; loss `asymmetric`)." in card
    )
    model.export_head("places", tmp_path / "places_only")
    groups = pipeline(
        "token-classification", model=str(tmp_path / "places_only"), aggregation_strategy="simple"
    )
    found = groups("we met in Rome")
    assert found and all(group["entity_group"] == "LOC" for group in found)
    ((text, answers),) = result.examples
    assert text == "we met in Rome" and set(answers) == {"topic", "tags", "length", "places"}
    assert [(answer["entity_group"], answer["word"]) for answer in answers["places"]] == [("LOC", "Rome")]


def test_heads_train_at_their_own_rate_and_frozen_parts_do_not_change(multitask_run):
    _, record = multitask_run
    assert record.rate_of("classifier.heads.places.") == {0.02}
    # the run's head_learning_rate (train.py's default)
    assert record.rate_of("classifier.heads.topic.") == {HEAD_LEARNING_RATE}
    assert record.rate_of("backbone.") == {1e-3}  # FAST's learning rate
    assert not record.rate_of("classifier.heads.length.")  # frozen: not in the optimizer
    assert not record.changed("classifier.heads.length.")
    assert record.changed("classifier.heads.places.") and record.changed("backbone.")


def test_a_curriculum_trains_the_first_task_alone_first(tiny_backbone_path, tmp_path, monkeypatch):
    seen = []
    original = PooledTrainer.compute_loss

    lengths = []

    def recording(self, model, inputs, *args, **kwargs):
        if model.training:
            seen.append((int(self.state.epoch or 0), inputs["task"]))
            lengths.append(self.task_sampler.lengths)
        return original(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(PooledTrainer, "compute_loss", recording)
    config = multitask_config(
        tmp_path, topic={"start_epoch": 1}, tags={"start_epoch": 2}, length={"start_epoch": 2}
    )
    config = {**training_only(config), "task_sampling": "round_robin"}
    run_config(config, tmp_path, tiny_backbone_path, "--num_train_epochs", "3")
    by_epoch = {epoch: {task for e, task in seen if e == epoch} for epoch in range(3)}
    assert by_epoch == {0: {"places"}, 1: {"places", "topic"}, 2: {"places", "topic", "tags", "length"}}
    per_epoch = [sum(1 for e, _ in seen if e == epoch) for epoch in range(3)]
    assert len(set(per_epoch)) == 1  # every epoch has the same number of batches
    # train.py's default batching: every task's batches are length-grouped, from its rows' token counts.
    assert set(lengths[0]) == {"places", "topic", "tags", "length"}
    assert all(length > 2 for counts in lengths[0].values() for length in counts)


def test_a_tasks_loss_weight_scales_its_training_loss_only(tiny_backbone_path, tmp_path):
    from transformers import TrainingArguments

    model = tiny_multitask_model().train()
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    specs = [TaskSpec("team", "sequence", DataArguments(), loss_weight=3.0)]
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    trainer = PooledTrainer(
        model=model,
        args=args,
        data_collator=TaskCollator(tokenizer, {"team": "sequence"}),
        tasks=specs,
        train_dataset=MultiTaskRows({"team": [{"input_ids": [5, 6, 7], "labels": 1}]}),
    )
    batch = {**random_batch([4, 6]), "labels": torch.tensor([0, 2]), "task": "team"}
    torch.manual_seed(0)
    weighted = trainer.compute_loss(model.eval(), batch)
    plain = model(**batch).loss
    torch.testing.assert_close(weighted, plain)  # evaluation: not weighted
    model.train()
    torch.manual_seed(0)
    weighted = trainer.compute_loss(model, batch)
    torch.manual_seed(0)
    torch.testing.assert_close(weighted, 3.0 * model(**batch).loss)


def test_a_resumed_multitask_run_ends_with_the_weights_of_an_uninterrupted_one(tiny_backbone_path, tmp_path):
    config = multitask_config(tmp_path, topic={"start_epoch": 1})
    config = {**training_only(config), "task_sampling": "temperature", "save_strategy": "epoch"}
    reference = run_config(
        config, tmp_path / "a", tiny_backbone_path, "--num_train_epochs", "2", "--keep_checkpoints"
    )
    checkpoints = sorted(
        reference.output_dir.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1])
    )
    resumed = run_config(
        config,
        tmp_path / "b",
        tiny_backbone_path,
        "--num_train_epochs",
        "2",
        "--resume_from_checkpoint",
        str(checkpoints[0]),
    )
    expected, got = (load_file(result.output_dir / "model.safetensors") for result in (reference, resumed))
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=1e-6, msg=name)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c["tasks"]["topic"].pop("kind"), r"tasks\['topic'\] needs a kind"),
        (
            lambda c: c["tasks"]["topic"].update(poolng="max"),
            r"unknown setting 'poolng' \(did you mean pooling\?\)",
        ),
        (
            lambda c: c["tasks"]["places"].update(label_column="x"),
            r"tasks\['places'\]: 'label_column' does not apply",
        ),
        (
            lambda c: c["tasks"]["places"].update(pooling="max"),
            r"tasks\['places'\]: 'pooling' does not apply",
        ),
        (lambda c: c.update(train_file="x.csv"), "train_file is set for the whole run"),
        (lambda c: c["tasks"]["topic"].update(start_epoch=-1), "start_epoch must be an integer >= 0"),
        (
            lambda c: c["tasks"]["topic"].update(pooling="median"),
            r"tasks\['topic'\]: Unknown pooling 'median'",
        ),
        (
            lambda c: c["tasks"]["topic"].update(label_column="nope"),
            r"task 'topic': train file .* has no column 'nope'",
        ),
        (
            lambda c: c["tasks"]["places"].update(tags_column="text"),
            r"task 'places': .*column 'text', row 0 holds",
        ),
        (lambda c: c.update(tags_column="tags"), "in a multi-task run, set it per task"),
    ],
)
def test_a_bad_multitask_config_stops_the_run_before_anything_is_written(
    tiny_backbone_path, tmp_path, change, message
):
    config = multitask_config(tmp_path)
    change(config)
    with pytest.raises(UsageError, match=message):
        run_config(config, tmp_path, tiny_backbone_path)
    assert leftovers(tmp_path / "out") == []


def test_predicting_with_a_multitask_model_saved_without_problem_types(tiny_backbone_path, tmp_path):
    """A PooledForMultiTask saved with save_pretrained, its sequence tasks naming no problem type: --do_predict on
    test files without labels reads each as transformers' loss would (one output: regression; more: single-label)
    and publishes that problem type in each task's config."""
    from pooled_models import PooledMultiTaskConfig

    torch.manual_seed(0)
    config = PooledMultiTaskConfig(
        backbone_config=AutoConfig.from_pretrained(tiny_backbone_path),
        tasks={
            "topic": {"kind": "sequence", "id2label": {0: "sport", 1: "food"}},
            "length": {"kind": "sequence", "num_labels": 1},
        },
    )
    assert all(config.tasks[name].get("problem_type") is None for name in ("topic", "length"))
    saved = tmp_path / "saved"
    PooledForMultiTask(config).save_pretrained(saved)
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(saved)
    test = write_rows(tmp_path / "test.csv", [{"text": row["text"]} for row in topic_rows(5)])
    tasks = {name: {"kind": "sequence", "test_file": str(test)} for name in ("topic", "length")}
    result = run_config({"do_predict": True, "tasks": tasks}, tmp_path / "run", str(saved))
    published = json.loads((result.output_dir / "config.json").read_text())["tasks"]
    assert published["topic"]["problem_type"] == "single_label_classification"
    assert published["length"]["problem_type"] == "regression"
    topic, length = (
        [
            json.loads(line)
            for line in (result.output_dir / f"predictions_{name}.jsonl").read_text().splitlines()
        ]
        for name in ("topic", "length")
    )
    assert len(topic) == len(length) == 5
    assert all(row["prediction"] == max(row["scores"], key=row["scores"].get) for row in topic)
    assert all(isinstance(row["prediction"], float) for row in length)
