"""How train.py lays batches out (train/batch_layout.py, data/flat.py, data/token_budget.py): the padding-free
collator gives transformers' flat format with one label per text, token-budget batches keep their budget and their
count, --padding_free says why it is off and refuses where asked for and impossible, and a padding-free run (forced
on this CPU, where its attention runs the per-text reference) evaluates exactly as a padded one."""

import json
import math
import random
from types import SimpleNamespace

import pytest
import torch
from helpers import data_flags, train
from transformers import TrainerCallback

from pooled_models.errors import UsageError
from pooled_models.train import batch_layout
from pooled_models.train.data.flat import FlatCollator
from pooled_models.train.data.token_budget import TokenBudgetBatches, token_budget_batches

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ----------------------------------------------------------------------------------------------------
# The padding-free collator
# ----------------------------------------------------------------------------------------------------


def test_the_flat_collator_gives_one_row_the_boundaries_and_a_label_per_text():
    features = [
        {
            "input_ids": [101, 7, 8, 102],
            "attention_mask": [1, 1, 1, 1],
            "token_type_ids": [0, 0, 0, 0],
            "labels": 2,
        },
        {
            "input_ids": [101, 9, 102, 0, 0],
            "attention_mask": [1, 1, 1, 0, 0],
            "token_type_ids": [0] * 5,
            "labels": 0,
        },
        {
            "input_ids": [101, 5, 6, 4, 3, 102],
            "attention_mask": [1] * 6,
            "token_type_ids": [0] * 6,
            "labels": 1,
        },
    ]
    batch = FlatCollator()(features)
    assert batch["input_ids"].tolist() == [[101, 7, 8, 102, 101, 9, 102, 101, 5, 6, 4, 3, 102]]
    assert batch["token_type_ids"].shape == (1, 13)
    assert batch["cu_seq_lens_q"].tolist() == [0, 4, 7, 13] and batch["cu_seq_lens_q"].dtype == torch.int32
    assert batch["cu_seq_lens_k"] is batch["cu_seq_lens_q"]
    assert batch["max_length_q"] == batch["max_length_k"] == 6 and isinstance(batch["max_length_q"], int)
    assert batch["labels"].tolist() == [2, 0, 1] and batch["labels"].dtype == torch.long
    assert "attention_mask" not in batch and "position_ids" not in batch  # the model counts positions itself


@pytest.mark.parametrize(
    ("labels", "dtype"),
    [([[0, 1, 1], [1, 0, 0]], torch.long), ([0.5, 2.0], torch.float32)],  # multi-hot rows; regression targets
)
def test_the_flat_collator_keeps_multi_label_and_regression_targets(labels, dtype):
    features = [{"input_ids": [1, 2], "label": label} for label in labels]
    batch = FlatCollator()(features)
    assert batch["labels"].tolist() == labels and batch["labels"].dtype == dtype


def test_the_flat_collator_refuses_columns_it_cannot_lay_out():
    with pytest.raises(ValueError, match=r"also have task.*--padding_free false"):
        FlatCollator()([{"input_ids": [1, 2], "labels": 0, "task": "topic"}])


# ----------------------------------------------------------------------------------------------------
# Token-budget batches
# ----------------------------------------------------------------------------------------------------


LENGTHS = [random.Random(0).randint(3, 120) for _ in range(400)]


@pytest.mark.parametrize("padded", [False, True])
def test_token_budget_batches_hold_every_row_once_within_the_budget(padded):
    batches = token_budget_batches(LENGTHS, 600, padded, random.Random(1))
    assert sorted(row for batch in batches for row in batch) == list(range(len(LENGTHS)))
    for batch in batches:
        cost = (
            len(batch) * max(LENGTHS[row] for row in batch) if padded else sum(LENGTHS[row] for row in batch)
        )
        assert cost <= 600 or len(batch) == 1
    # Cut greedily: joining any batch with the next row's would have broken the budget, so the batches are few.
    assert len(batches) < 2 * sum(LENGTHS) / 600 + 2


def test_a_row_longer_than_the_budget_is_a_batch_of_its_own():
    assert token_budget_batches([5, 50, 5], 20, False, random.Random(0)).count([1]) == 1


def test_every_epoch_has_the_same_batches_in_a_new_order():
    sampler = TokenBudgetBatches(LENGTHS, 500, padded=False, seed=3)
    torch.manual_seed(0)
    first, second = list(sampler), list(sampler)
    assert len(first) == len(second) == len(sampler)
    assert sorted(map(tuple, first)) == sorted(map(tuple, second)) and first != second
    again = TokenBudgetBatches(LENGTHS, 500, padded=False, seed=3)
    assert again.batches == sampler.batches  # drawn from the seed: the same on every process


# ----------------------------------------------------------------------------------------------------
# --padding_free
# ----------------------------------------------------------------------------------------------------


def _args(**changes):
    settings = {
        "padding_free": "auto",
        "max_tokens_per_batch": None,
        "pad_to_multiple_of": None,
        "device": torch.device("cpu"),
        "bf16": True,
        "fp16": False,
        "torch_compile": False,
        "do_train": True,
    }
    return SimpleNamespace(**(settings | changes))


@pytest.fixture
def classifier():
    from helpers import tiny_model

    return tiny_model("mean")


def test_auto_is_off_on_this_machine_and_says_why(classifier):
    on, line = batch_layout.choose_padding_free(_args(), classifier, {"": "sequence"})
    assert not on and "padding-free is off" in line and "CUDA" in line
    assert classifier.get_backbone().config._attn_implementation == "sdpa"


def test_true_refuses_a_run_that_cannot(classifier):
    with pytest.raises(
        UsageError, match=r"--padding_free true: torch's varlen kernel runs on CUDA GPUs only"
    ):
        batch_layout.choose_padding_free(_args(padding_free="true"), classifier, {"": "sequence"})


@pytest.mark.parametrize(
    ("changes", "kinds", "reason"),
    [
        ({}, {"topic": "sequence", "tags": "token"}, "multi-task runs pad"),
        ({"bf16": False}, {"": "sequence"}, "--bf16 true"),
        ({"torch_compile": True}, {"": "sequence"}, "--torch_compile"),
        ({"pad_to_multiple_of": 64}, {"": "sequence"}, "--pad_to_multiple_of asks for padded batches"),
    ],
)
def test_each_reason_to_pad_is_named(monkeypatch, classifier, changes, kinds, reason):
    monkeypatch.setattr(batch_layout, "varlen_unavailable_reason", lambda device: None)  # as on a GPU
    on, line = batch_layout.choose_padding_free(_args(**changes), classifier, kinds)
    assert not on and reason in line


def test_on_a_gpu_auto_switches_the_backbone_and_names_the_missing_dropout(monkeypatch, classifier):
    monkeypatch.setattr(batch_layout, "varlen_unavailable_reason", lambda device: None)
    on, line = batch_layout.choose_padding_free(_args(), classifier, {"": "sequence"})
    assert on and classifier.get_backbone().config._attn_implementation == "torch_varlen"
    assert "no attention dropout" in line and "attention_probs_dropout_prob=0.1" in line


@pytest.mark.parametrize(("tokens", "on"), [(1500.0, False), (6100.0, True), (None, True)])
def test_auto_pads_steps_of_few_tokens(monkeypatch, classifier, tokens, on):
    # bench/gpu.py on an H200: below 4,096 real tokens a step, padded batches trained as fast (the host's time).
    monkeypatch.setattr(batch_layout, "varlen_unavailable_reason", lambda device: None)
    chosen, line = batch_layout.choose_padding_free(_args(), classifier, {"": "sequence"}, tokens)
    assert chosen is on
    assert on or ("about 1,500 real tokens, fewer than 4,096" in line and "--padding_free true" in line)
    forced, _ = batch_layout.choose_padding_free(
        _args(padding_free="true"), classifier, {"": "sequence"}, 10.0
    )
    assert forced


def test_tokens_per_step_is_the_budget_or_the_batch_times_the_mean_length():
    from datasets import Dataset

    rows = Dataset.from_dict({"input_ids": [[1] * 10, [1] * 30]})
    tasks = {"": SimpleNamespace(encoded={"train": rows})}
    assert batch_layout.tokens_per_step(_args(per_device_train_batch_size=16), tasks) == 16 * 20
    assert batch_layout.tokens_per_step(_args(max_tokens_per_batch=4096), tasks) == 4096
    assert batch_layout.tokens_per_step(_args(), {"": SimpleNamespace(encoded={})}) is None


def test_a_backbone_without_the_attention_interface_pads(monkeypatch):
    from helpers import tiny_model

    monkeypatch.setattr(batch_layout, "varlen_unavailable_reason", lambda device: None)
    on, line = batch_layout.choose_padding_free(
        _args(), tiny_model("mean", backbone="deberta-v2"), {"": "sequence"}
    )
    assert not on and "DebertaV2Model computes attention in its own modules" in line


def test_a_token_budget_is_refused_for_several_tasks(classifier):
    with pytest.raises(UsageError, match="--max_tokens_per_batch: a multi-task run"):
        batch_layout.choose_padding_free(
            _args(max_tokens_per_batch=512), classifier, {"a": "sequence", "b": "token"}
        )


# ----------------------------------------------------------------------------------------------------
# Whole runs
# ----------------------------------------------------------------------------------------------------


def _force_padding_free(monkeypatch):
    # On this CPU: padding-free as on a GPU, the attention running its per-text reference in float32.
    monkeypatch.setattr(batch_layout, "padding_free_refusal", lambda args, model, kinds: None)


@pytest.mark.slow  # three short runs of train.py
def test_a_padding_free_run_trains_and_evaluates_as_a_padded_one(
    monkeypatch, tmp_path, tiny_backbone_path, capsys
):
    flags = data_flags(tmp_path)
    padded = train(tiny_backbone_path, tmp_path / "padded", *flags, "--do_train", "--padding_free", "false")
    # The padded run's model, evaluated padding-free: the same predictions and metrics (no dropout in evaluation).
    _force_padding_free(monkeypatch)
    evaluating = flags[2:] + ["--padding_free", "true"]  # the flags without --train_file
    again = train(str(padded.output_dir), tmp_path / "again", *evaluating)
    assert again.metrics["eval_loss"] == pytest.approx(padded.metrics["eval_loss"], abs=1e-5)
    first = (padded.output_dir / "predictions.jsonl").read_text().splitlines()
    second = (again.output_dir / "predictions.jsonl").read_text().splitlines()
    assert [json.loads(line)["label"] for line in first] == [json.loads(line)["label"] for line in second]
    # Training padding-free with a token budget: it learns, and the card says how its batches were laid out.
    optimizers = []

    class Optimizer(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
            optimizers.append(optimizer)

    flat = ["--do_train", "--padding_free", "true", "--max_tokens_per_batch", "96"]
    trained = train(tiny_backbone_path, tmp_path / "flat", *flags, *flat, callbacks=[Optimizer()])
    # transformers' default on torch >= 2.8, kept by train.py's own parameter groups: one fused AdamW step
    assert optimizers[0].defaults.get("fused") is True
    assert trained.metrics["eval_loss"] < math.log(3)  # better than a uniform guess over the 3 labels
    card = (trained.output_dir / "README.md").read_text()
    assert "padding-free (torch varlen attention)" in card and "max tokens per batch" in card
    assert "Batches: padding-free" in capsys.readouterr().out
    saved = json.loads((trained.output_dir / "config.json").read_text())
    assert "torch_varlen" not in json.dumps(
        saved
    )  # the checkpoint loads anywhere, with the default attention


# ----------------------------------------------------------------------------------------------------
# The values the model no longer reads back at each step are checked once
# ----------------------------------------------------------------------------------------------------


def test_inside_a_checked_run_the_model_reads_no_label_value():
    from helpers import random_batch, tiny_model

    from pooled_models.modeling.inputs import values_checked_by_caller

    model, batch = tiny_model("mean"), random_batch([3, 4])
    with pytest.raises(ValueError, match=r"labels\[1\] = 7 is not a class id"):
        model(**batch, labels=torch.tensor([0, 7]))
    with values_checked_by_caller(), pytest.raises(IndexError):  # the loss meets it: the check did not run
        model(**batch, labels=torch.tensor([0, 7]))
    model(**batch, labels=torch.tensor([0, 7 - 5]))  # outside the block again: checked, and valid


def test_a_tokenizer_that_does_not_match_the_model_is_a_data_error(tmp_path, minilm_tokenizer):
    from helpers import bad_run, tiny_backbone_config
    from transformers import BertModel

    folder = tmp_path / "small_vocabulary"
    torch.manual_seed(0)
    BertModel(tiny_backbone_config("bert")).save_pretrained(folder)  # 120 ids, for a 30,522-id tokenizer
    minilm_tokenizer.save_pretrained(folder)
    message = bad_run(str(folder), tmp_path, *data_flags(tmp_path), "--do_train", "--pooling", "mean")
    assert "tokenizes to token id" in message and "vocabulary has 120 entries" in message
