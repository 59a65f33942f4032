"""Batches with little padding: length-grouped training, length-sorted evaluation and prediction, and predictions
back in the input's order, for one task or several (token tasks included)."""

import json
import random

import numpy as np
import pytest
import torch
from datasets import Dataset
from helpers import data_flags, entity_rows, leftovers, topic_rows, train, write_rows
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding
from transformers.trainer_utils import seed_worker

from pooled_models import PooledForMultiTask, PooledForSequenceClassification
from pooled_models.errors import UsageError
from pooled_models.train.arguments import DataArguments, PooledTrainingArguments
from pooled_models.train.data import read_task, tokenize_task
from pooled_models.train.data.batching import (
    LengthGroupedRowSampler,
    LengthSortedSampler,
    length_grouped_batches,
    length_sorted_batches,
    restore_input_order,
    token_lengths,
)
from pooled_models.train.data.multitask import MultiTaskRows, TaskCollator
from pooled_models.train.tasks import TaskSpec
from pooled_models.train.trainer import PooledTrainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_length_sorted_sampler_goes_longest_first_and_keeps_ties_in_order():
    lengths = [3, 9, 3, 1, 9, 5]
    assert list(LengthSortedSampler(lengths)) == [1, 4, 5, 0, 2, 3]
    assert len(LengthSortedSampler(lengths)) == 6


def test_length_sorted_batches_end_early_rather_than_pad_and_keep_the_order():
    rng = random.Random(1)
    lengths = [rng.choice([2, 3, 5, 8, 13, 40, 41, 120]) + rng.randrange(3) for _ in range(300)] + [0, 0]
    order = LengthSortedSampler(lengths).order
    batches = length_sorted_batches(order, lengths, max_batch_size=16)
    assert [row for batch in batches for row in batch] == order  # consecutive: read in turn, the sorted order
    assert max(len(batch) for batch in batches) == 16
    for batch in batches:
        real = sum(lengths[row] for row in batch)
        if len(batch) > 1:
            assert real >= 0.95 * lengths[batch[0]] * len(batch)
    # A looser bound makes fewer, fuller batches; the default is the 0.95 the README states.
    assert len(length_sorted_batches(order, lengths, 16, min_real_fraction=0.5)) < len(batches)
    assert len(length_sorted_batches(order, lengths, 1)) == len(order)
    with pytest.raises(ValueError, match="max_batch_size"):
        length_sorted_batches(order, lengths, 0)


def test_length_grouped_batches_are_full_but_the_last_longest_first_and_shuffled():
    rng = random.Random(0)
    lengths = [rng.choice([3, 9, 30, 120]) + rng.randrange(3) for _ in range(1003)]
    rows = list(range(len(lengths)))
    rng.shuffle(rows)
    batches = length_grouped_batches(rows, lengths, 16, random.Random(1))
    assert sorted(row for batch in batches for row in batch) == list(range(len(lengths)))
    assert [len(batch) for batch in batches[:-1]] == [16] * (len(batches) - 1) and len(
        batches[-1]
    ) == 1003 % 16
    assert max(lengths[row] for row in batches[0]) == max(lengths)  # a batch too big for memory fails at once
    longest = [max(lengths[row] for row in batch) for batch in batches[1:-1]]
    assert longest != sorted(longest, reverse=True)  # the batches' order is shuffled, not long to short
    real = sum(lengths)
    computed = sum(len(batch) * max(lengths[row] for row in batch) for batch in batches)
    assert real / computed > 0.9


def test_length_grouped_row_sampler_follows_torchs_seed_and_changes_every_epoch():
    lengths = [random.Random(index).randrange(1, 200) for index in range(300)]
    torch.manual_seed(5)
    sampler = LengthGroupedRowSampler(lengths, 8)
    first, second = list(sampler), list(sampler)
    torch.manual_seed(5)
    assert list(LengthGroupedRowSampler(lengths, 8)) == first  # every process of a run draws the same order
    assert first != second and sorted(first) == list(range(300))


def test_restore_input_order_undoes_the_sort_for_arrays_tensors_and_nested_outputs():
    lengths = [4, 7, 1, 7, 2]
    order = LengthSortedSampler(lengths).order
    rows = np.arange(10).reshape(5, 2)
    computed = rows[order]  # what a sorted evaluation returns
    assert np.array_equal(restore_input_order(computed, order), rows)
    assert torch.equal(restore_input_order(torch.from_numpy(computed), order), torch.from_numpy(rows))
    nested = restore_input_order((computed, {"extra": computed[:, 0]}), order)
    assert np.array_equal(nested[0], rows) and np.array_equal(nested[1]["extra"], rows[:, 0])
    assert restore_input_order(None, order) is None
    with pytest.raises(ValueError, match="4 output rows for 5 input rows"):
        restore_input_order(computed[:4], order)


def test_token_lengths_reads_the_column_and_names_a_missing_one():
    dataset = Dataset.from_dict({"input_ids": [[1, 2], [1], [1, 2, 3]], "labels": [0, 1, 0]})
    assert token_lengths(dataset) == [2, 1, 3]
    with pytest.raises(ValueError, match="no 'tokens' column"):
        token_lengths(dataset, "tokens")


def test_train_py_defaults_group_training_batches_and_sort_evaluation():
    args = PooledTrainingArguments(output_dir="unused", report_to="none")
    assert args.train_sampling_strategy == "group_by_length"
    assert args.length_sorted_eval is True


# ----------------------------------------------------------------------------------------------------
# The Trainer: the same predictions, in input order, with far less padding
# ----------------------------------------------------------------------------------------------------


def _mixed_length_dataset(tokenizer, count=48, seed=0):
    rng = random.Random(seed)
    texts = [
        " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(rng.randint(1, 40)))
        for _ in range(count)
    ]
    encoded = tokenizer(texts, truncation=True, max_length=60)
    return Dataset.from_dict({**encoded, "labels": [rng.randrange(3) for _ in texts]})


class _Counting:
    """A collator that counts real and computed (padded) token positions of every batch it makes."""

    def __init__(self, *args):
        super().__init__(*args)
        self.real = self.computed = 0

    def __call__(self, features):
        batch = super().__call__(features)
        self.real += int(batch["attention_mask"].sum())
        self.computed += batch["attention_mask"].numel()
        return batch


class _CountingCollator(_Counting, DataCollatorWithPadding):
    pass


class _CountingTaskCollator(_Counting, TaskCollator):
    pass


def _trainer(tiny_backbone_path, tmp_path, dataset, per_device_eval_batch_size=4, **settings):
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(tiny_backbone_path, num_labels=3, pooling="mean")
    args = PooledTrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=per_device_eval_batch_size,
        num_train_epochs=1,
        report_to="none",
        disable_tqdm=True,
        save_strategy="no",
        eval_strategy="no",
        **settings,
    )
    return PooledTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        eval_dataset=dataset,
        data_collator=_CountingCollator(tokenizer),
    )


def test_sorted_prediction_returns_the_rows_of_an_input_order_prediction(tiny_backbone_path, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    dataset = _mixed_length_dataset(tokenizer, count=200)
    sorted_run = _trainer(tiny_backbone_path, tmp_path, dataset)
    in_order = _trainer(tiny_backbone_path, tmp_path, dataset, length_sorted_eval=False)
    sorted_output, plain_output = sorted_run.predict(dataset), in_order.predict(dataset)

    assert np.array_equal(sorted_output.label_ids, np.array(dataset["labels"]))
    assert np.array_equal(plain_output.label_ids, np.array(dataset["labels"]))
    np.testing.assert_allclose(sorted_output.predictions, plain_output.predictions, atol=1e-5)
    assert sorted_output.metrics.keys() == plain_output.metrics.keys()
    # Sorted batches computed far fewer padded positions for the same rows.
    assert sorted_run.data_collator.real == in_order.data_collator.real
    assert sorted_run.data_collator.real / sorted_run.data_collator.computed > 0.95
    assert in_order.data_collator.real / in_order.data_collator.computed < 0.8


def test_sorted_evaluation_in_large_batches_still_computes_little_padding(tiny_backbone_path, tmp_path):
    # Few rows in large batches: fixed-size sorted batches would span wide length ranges.
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    dataset = _mixed_length_dataset(tokenizer, count=60, seed=4)
    large = _trainer(tiny_backbone_path, tmp_path, dataset, per_device_eval_batch_size=32)
    fixed_sorted_computed = sum(
        max(len(dataset[row]["input_ids"]) for row in chunk) * len(chunk)
        for order in [LengthSortedSampler(token_lengths(dataset)).order]
        for chunk in (order[start : start + 32] for start in range(0, len(order), 32))
    )
    sizes = [len(batch["input_ids"]) for batch in large.get_test_dataloader(dataset)]
    assert sum(sizes) == len(dataset) and max(sizes) <= 32
    real, computed = large.data_collator.real, large.data_collator.computed
    assert real / computed >= 0.95 > real / fixed_sorted_computed
    output = large.predict(dataset)
    plain = _trainer(tiny_backbone_path, tmp_path, dataset, length_sorted_eval=False).predict(dataset)
    np.testing.assert_allclose(output.predictions, plain.predictions, atol=1e-5)
    assert np.array_equal(output.label_ids, np.array(dataset["labels"]))


def test_group_by_length_without_sorted_evaluation_still_predicts_in_input_order(
    tiny_backbone_path, tmp_path
):
    # transformers' Trainer shuffles the evaluation order under group_by_length; ours keeps the input order.
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    dataset = _mixed_length_dataset(tokenizer)
    trainer = _trainer(tiny_backbone_path, tmp_path, dataset, length_sorted_eval=False)
    assert trainer.args.train_sampling_strategy == "group_by_length"
    assert list(trainer._get_eval_sampler(dataset)) == list(range(len(dataset)))


def test_grouped_training_batches_carry_little_padding_and_see_every_row(tiny_backbone_path, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    dataset = _mixed_length_dataset(tokenizer, count=400)
    grouped = _trainer(tiny_backbone_path, tmp_path, dataset)
    randomly = _trainer(tiny_backbone_path, tmp_path, dataset, train_sampling_strategy="random")
    grouped_order = list(grouped._get_train_sampler())
    assert sorted(grouped_order) == list(range(len(dataset)))
    assert grouped_order != list(range(len(dataset)))  # still random between groups
    for trainer in (grouped, randomly):
        for _ in trainer.get_train_dataloader():
            pass
    assert grouped.data_collator.real == randomly.data_collator.real
    assert grouped.data_collator.real / grouped.data_collator.computed > 0.95
    assert randomly.data_collator.real / randomly.data_collator.computed < 0.75


def test_train_py_predictions_match_each_text_on_its_own(tiny_backbone_path, tmp_path):
    # Test texts of very different lengths: a sorted prediction written in the wrong order would pair a text with
    # another text's scores.
    rows = topic_rows(60, seed=3)
    test_rows = [
        dict(row, text=" ".join([row["text"]] * (1 + index % 5)))
        for index, row in enumerate(topic_rows(25, seed=4))
    ]
    data = [
        "--train_file",
        str(write_rows(tmp_path / "train.csv", rows)),
        "--test_file",
        str(write_rows(tmp_path / "test.csv", test_rows)),
        "--do_train",
        "--do_predict",
        "--per_device_eval_batch_size",
        "4",
    ]
    result = train(tiny_backbone_path, tmp_path / "model", *data)
    written = [
        json.loads(line) for line in (result.output_dir / "predictions.jsonl").read_text().splitlines()
    ]
    assert [row["text"] for row in written] == [row["text"] for row in test_rows]

    model = AutoModelForSequenceClassification.from_pretrained(result.output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(result.output_dir)
    for row in written:
        with torch.no_grad():
            scores = model(**tokenizer(row["text"], return_tensors="pt")).logits.softmax(-1)[0]
        expected = {model.config.id2label[index]: value for index, value in enumerate(scores.tolist())}
        assert row["scores"] == pytest.approx(expected, abs=1e-5)


def test_transformers_trainer_shuffles_prediction_order_under_group_by_length(tiny_backbone_path, tmp_path):
    # The README's reason for PooledTrainer's own evaluation sampler: should transformers stop shuffling, this fails
    # and the README's sentence goes.
    from transformers import Trainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    dataset = _mixed_length_dataset(tokenizer)
    ours = _trainer(tiny_backbone_path, tmp_path, dataset)
    plain = Trainer(model=ours.model, args=ours.args, data_collator=ours.data_collator)
    assert sorted(plain._get_eval_sampler(dataset)) == list(range(len(dataset)))
    assert list(plain._get_eval_sampler(dataset)) != list(range(len(dataset)))


# ----------------------------------------------------------------------------------------------------
# Several tasks: each task's evaluation sorted too (token tasks included), and its predictions in input order
# ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_tasks(tiny_backbone_path, tmp_path_factory):
    """A sequence task and a token task on rows of very different lengths, read and tokenized as train.py does."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    rows = entity_rows(40, seed=5)
    for index, row in enumerate(rows):
        times = 1 + index % 5
        row.update(words=row["words"] * times, tags=row["tags"] * times)
        row["text"] = " ".join(row["words"])
    path = str(write_rows(tmp_path_factory.mktemp("two_tasks") / "rows.jsonl", rows))
    specs = [
        TaskSpec("topic", "sequence", DataArguments(train_file=path, validation_file=path)),
        TaskSpec("places", "token", DataArguments(train_file=path, validation_file=path, tags_column="tags")),
    ]
    tasks = {spec.name: read_task(spec, ["train", "validation"], None, None, alone=False) for spec in specs}
    for task in tasks.values():
        tokenize_task(task, tokenizer, 64, named=True)
    heads = {
        name: {"kind": task.kind, "id2label": task.labels.id2label}
        | ({"problem_type": task.labels.problem_type} if task.kind == "sequence" else {})
        for name, task in tasks.items()
    }
    torch.manual_seed(0)
    model = PooledForMultiTask.from_backbone(tiny_backbone_path, tasks=heads, tokenizer=tokenizer)
    return model, tokenizer, specs, tasks


def _two_task_trainer(two_tasks, tmp_path, sort: bool) -> PooledTrainer:
    model, tokenizer, specs, tasks = two_tasks
    args = PooledTrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_eval_batch_size=8,
        report_to="none",
        disable_tqdm=True,
        length_sorted_eval=sort,
    )
    return PooledTrainer(
        model=model,
        args=args,
        eval_dataset={name: task.encoded["validation"] for name, task in tasks.items()},
        data_collator=_CountingTaskCollator(tokenizer, {name: task.kind for name, task in tasks.items()}),
        tasks=specs,
    )


def test_every_tasks_evaluation_is_sorted_by_length_token_tasks_included(two_tasks, tmp_path):
    sorted_run, in_order = (_two_task_trainer(two_tasks, tmp_path, sort) for sort in (True, False))
    scores, plain = sorted_run.evaluate(), in_order.evaluate()
    # Timings aside, and the losses: Trainer's evaluation_loop weighs each batch's loss by the first batch's size, so
    # batches of several sizes (the sorted ones) give another mean loss than fixed-size batches of the same rows.
    quality = [key for key in plain if not key.endswith(("time", "per_second", "epoch", "loss"))]
    assert {"eval_places_f1", "eval_topic_f1_macro", "eval_mean_score"} <= set(
        quality
    ) and "eval_loss" in scores
    assert {key: scores[key] for key in quality} == pytest.approx(
        {key: plain[key] for key in quality}, abs=1e-5
    )
    # The same rows, far less padding: both tasks' batches were cut to sorted lengths.
    assert sorted_run.data_collator.real == in_order.data_collator.real
    assert sorted_run.data_collator.real / sorted_run.data_collator.computed > 0.9
    assert in_order.data_collator.real / in_order.data_collator.computed < 0.7


def test_a_token_tasks_sorted_prediction_comes_back_in_input_order(two_tasks, tmp_path):
    _, _, _, tasks = two_tasks
    rows = tasks["places"].encoded["validation"]
    sorted_run, in_order = (_two_task_trainer(two_tasks, tmp_path, sort) for sort in (True, False))
    ours, plain = (trainer.predict_task("places", rows, "test") for trainer in (sorted_run, in_order))
    assert np.array_equal(ours.label_ids, plain.label_ids)
    labelled = plain.label_ids != -100
    np.testing.assert_allclose(ours.predictions[labelled], plain.predictions[labelled], atol=1e-5)
    assert set(ours.metrics) == set(plain.metrics) and "test_places_f1" in ours.metrics


def test_several_tasks_training_batches_keep_the_trainers_dataloader_settings(two_tasks, tmp_path):
    model, tokenizer, specs, tasks = two_tasks
    args = PooledTrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        report_to="none",
        dataloader_num_workers=2,
        dataloader_persistent_workers=True,
        dataloader_prefetch_factor=3,
    )
    trainer = PooledTrainer(
        model=model,
        args=args,
        train_dataset=MultiTaskRows({name: task.encoded["train"] for name, task in tasks.items()}),
        data_collator=TaskCollator(tokenizer, {name: task.kind for name, task in tasks.items()}),
        tasks=specs,
    )
    loader = trainer.get_train_dataloader()
    assert (loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == (2, True, 3)
    assert loader.worker_init_fn.func is seed_worker  # each worker seeded as Trainer seeds them
    # The task sampler's batches: every row of both tasks, one task per batch.
    sizes = trainer.task_sampler.task_sizes
    batches = list(trainer.task_sampler)
    assert sorted(index for batch in batches for index in batch) == list(range(sum(sizes.values())))
    assert all(len({index < sizes["topic"] for index in batch}) == 1 for batch in batches)


# ----------------------------------------------------------------------------------------------------
# --packed_batches: padding-free batches, opt-in (README, "Packed batches")
# ----------------------------------------------------------------------------------------------------


def test_train_py_trains_on_packed_batches_and_publishes_the_setting(tiny_backbone_path, tmp_path):
    result = train(
        tiny_backbone_path,
        tmp_path / "model",
        *data_flags(tmp_path),
        "--do_train",
        "--packed_batches",
        "true",
        "--num_train_epochs",
        "1",
    )
    config = json.loads((result.output_dir / "config.json").read_text())
    assert config["packed_batches"] is True
    model = AutoModelForSequenceClassification.from_pretrained(result.output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(result.output_dir)
    batch = tokenizer(
        ["a short one", "a much longer text about football and the league today"],
        padding=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        packed = model(**batch).logits
        model.config.packed_batches = False
        padded = model(**batch).logits
    torch.testing.assert_close(packed, padded, atol=1e-5, rtol=0)


def test_train_py_refuses_packed_batches_with_positions_not_from_the_mask(tiny_backbone_path, tmp_path):
    with pytest.raises(UsageError, match="packed_batches=True needs position_ids_from_mask=True"):
        train(
            tiny_backbone_path,
            tmp_path / "model",
            *data_flags(tmp_path),
            "--do_train",
            "--packed_batches",
            "true",
            "--position_ids_from_mask",
            "false",
        )
    assert leftovers(tmp_path / "model") == []


def test_a_token_run_trains_on_packed_batches(tiny_backbone_path, tmp_path):
    # Token and multi-task runs set it on the shared backbone's model, not on a task.
    files = {
        split: write_rows(tmp_path / f"{split}.jsonl", entity_rows(count, seed))
        for split, (count, seed) in {"train": (32, 0), "validation": (8, 1)}.items()
    }
    result = train(
        tiny_backbone_path,
        tmp_path / "model",
        "--train_file",
        str(files["train"]),
        "--validation_file",
        str(files["validation"]),
        "--tags_column",
        "tags",
        "--do_eval",
        "--do_train",
        "--packed_batches",
        "true",
        "--num_train_epochs",
        "1",
    )
    assert json.loads((result.output_dir / "config.json").read_text())["packed_batches"] is True
