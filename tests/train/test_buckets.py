"""train.py's GPU step that does not wait for the host, in its CPU parts: length buckets (data/buckets.py, the
collator, --pad_to_buckets), a compiled model meeting only the bucket shapes (its graphs counted, against a control
without buckets), the NaN guard at logging (loss_guard.py) with an injected non-finite loss, the refusals of what
breaks CUDA graphs, and the GPU defaults of the arguments and the plan."""

import random
from types import SimpleNamespace

import pytest
import torch
import yaml
from helpers import WORDS, leftovers, sentence, topic_rows, train, write_rows
from transformers import TrainerCallback

from pooled_models.errors import UsageError
from pooled_models.train import batch_layout
from pooled_models.train.arguments import parse_arguments
from pooled_models.train.arguments import training as training_arguments
from pooled_models.train.data.buckets import BUCKET_MULTIPLE, bucket_for, bucket_lengths, warm_up_rows
from pooled_models.train.data.multitask import TaskCollator
from pooled_models.train.loss_guard import NonFiniteLossError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Long-tailed lengths, as texts have them (most short, a few long).
LENGTHS = [max(1, int(random.Random(seed).lognormvariate(3.3, 0.7))) for seed in range(500)]


# ----------------------------------------------------------------------------------------------------
# The buckets
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 4, 6, 8])
def test_buckets_are_few_rounded_capped_and_hold_every_text(count):
    buckets = bucket_lengths(LENGTHS, count, max_length=128)
    assert 1 <= len(buckets) <= count and list(buckets) == sorted(set(buckets))
    assert all(b % BUCKET_MULTIPLE == 0 or b == 128 for b in buckets) and buckets[-1] <= 128
    for length in LENGTHS:
        bucket = bucket_for(min(length, 128), buckets, 128)
        assert bucket >= min(length, 128) and bucket in buckets  # every text at least as long as itself
        smaller = [b for b in buckets if b < bucket]
        assert not smaller or smaller[-1] < min(length, 128)  # and in the smallest that holds it
    # quantiles: each bucket but the last holds about its share of the texts
    if count == 4:
        share = sum(min(length, 128) <= buckets[0] for length in LENGTHS) / len(LENGTHS)
        assert 0.25 <= share < 0.4, share


def test_uniform_texts_make_one_bucket_and_a_longer_batch_pads_to_the_run_length():
    assert bucket_lengths([20] * 50, 6, 512) == (24,)
    assert bucket_lengths([1, 2, 3], 6, 512) == (8,)
    assert bucket_for(30, (24,), 512) == 512  # an evaluation text longer than every training text
    with pytest.raises(ValueError, match="at least one text"):
        bucket_lengths([], 4, 512)


def test_warm_up_batches_pad_to_each_bucket_once():
    buckets = bucket_lengths(LENGTHS, 5, 128)
    batches = warm_up_rows([min(n, 128) for n in LENGTHS], buckets, batch_size=16)
    assert len(batches) == len(buckets) and all(len(rows) == 16 for rows in batches)
    padded_to = [bucket_for(max(min(LENGTHS[r], 128) for r in rows), buckets, 128) for rows in batches]
    assert padded_to == list(buckets)
    # a bucket fewer texts fit than a batch holds draws them again
    assert warm_up_rows([3, 30], (8, 32), batch_size=4) == [[0, 0, 0, 0], [1, 0, 0, 0]]


def test_the_collator_pads_to_the_smallest_bucket_that_holds_the_batch(minilm_tokenizer):
    collator = TaskCollator(minilm_tokenizer, {"": "sequence"}, buckets=(8, 16, 32), max_length=64)
    rows = [{"input_ids": list(range(1, n + 1)), "attention_mask": [1] * n, "labels": 0} for n in (3, 9)]
    batch = collator(rows)
    assert batch["input_ids"].shape == (2, 16) and batch["attention_mask"].sum().item() == 12
    assert collator(rows[:1])["input_ids"].shape == (1, 8)
    assert (
        collator([{**rows[0], "input_ids": [1] * 40, "attention_mask": [1] * 40}])["input_ids"].shape[1] == 64
    )
    tokens = TaskCollator(minilm_tokenizer, {"": "token"}, buckets=(8, 16), max_length=64)
    tagged = tokens([{"input_ids": [5] * 9, "attention_mask": [1] * 9, "labels": [1] * 9}])
    assert tagged["labels"].shape == (1, 16) and tagged["labels"][0, 9:].eq(-100).all()
    plain = TaskCollator(minilm_tokenizer, {"": "sequence"})  # the control: to the longest text
    assert plain(rows)["input_ids"].shape == (2, 9)


# ----------------------------------------------------------------------------------------------------
# --pad_to_buckets
# ----------------------------------------------------------------------------------------------------


def _args(**changes):
    settings = {
        "pad_to_buckets": "auto",
        "padding_free": "auto",
        "length_buckets": 4,
        "max_tokens_per_batch": None,
        "pad_to_multiple_of": None,
        "device": torch.device("cpu"),
        "torch_compile": False,
    }
    return SimpleNamespace(**(settings | changes))


def test_auto_pads_to_the_longest_text_on_the_cpu_and_to_buckets_on_a_gpu():
    buckets, line = batch_layout.choose_buckets(_args(), {"": "sequence"}, False, LENGTHS, 128)
    assert buckets is None and "not on a CUDA GPU" in line and "bench/throughput.py" in line
    gpu = _args(device=torch.device("cuda"))
    buckets, line = batch_layout.choose_buckets(gpu, {"": "sequence"}, False, LENGTHS, 128)
    assert buckets == bucket_lengths(LENGTHS, 4, 128)
    assert f"{len(buckets)} length buckets ({', '.join(map(str, buckets))} tokens" in line
    assert batch_layout.choose_buckets(gpu, {"": "sequence"}, True, LENGTHS, 128)[0] is None  # padding-free


def test_padding_free_auto_pads_where_buckets_are_asked_for(monkeypatch):
    from helpers import tiny_model

    monkeypatch.setattr(batch_layout, "varlen_unavailable_reason", lambda device: None)  # as on a GPU
    model, kinds = tiny_model("mean"), {"": "sequence"}
    asked = _args(pad_to_buckets="true", bf16=True, fp16=False)
    assert (
        batch_layout.padding_free_refusal(asked, model, kinds)
        == "--pad_to_buckets true asks for padded batches"
    )
    assert (
        batch_layout.padding_free_refusal(_args(bf16=True, fp16=False), model, kinds) is None
    )  # the control


@pytest.mark.parametrize(
    ("changes", "kinds", "padding_free", "reason"),
    [
        ({}, {"a": "sequence", "b": "token"}, False, "a multi-task run pads"),
        ({"max_tokens_per_batch": 512}, {"": "sequence"}, False, "--max_tokens_per_batch varies"),
        ({"pad_to_multiple_of": 64}, {"": "sequence"}, False, "--pad_to_multiple_of pads to a multiple"),
        ({}, {"": "sequence"}, True, "padding-free batches have no padding"),
    ],
)
def test_true_refuses_by_name_and_auto_says_why_not(changes, kinds, padding_free, reason):
    gpu = {"device": torch.device("cuda")}
    _, line = batch_layout.choose_buckets(_args(**gpu, **changes), kinds, padding_free, LENGTHS, 128)
    assert reason in line
    with pytest.raises(UsageError, match=f"--pad_to_buckets true: {reason}"):
        batch_layout.choose_buckets(
            _args(**gpu, **changes, pad_to_buckets="true"), kinds, padding_free, LENGTHS, 128
        )


ARGS = ["--model_name_or_path", "m", "--train_file", "t.csv", "--output_dir", "out", "--do_train"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--gradient_accumulation_steps", "2"], "gradient accumulation breaks"),
        (["--gradient_checkpointing", "true"], "activation checkpointing breaks"),
    ],
)
def test_what_breaks_cuda_graphs_is_refused_by_name(flags, message):
    with pytest.raises(
        UsageError, match=f"--torch_compile_mode reduce-overhead records CUDA graphs.*{message}"
    ):
        parse_arguments([*ARGS, "--torch_compile_mode", "reduce-overhead", *flags])
    parse_arguments([*ARGS, "--torch_compile_mode", "default", *flags])  # the control: without CUDA graphs


def test_buckets_and_another_padding_are_refused_together(tmp_path):
    with pytest.raises(UsageError, match="--pad_to_buckets true: --pad_to_multiple_of pads to a multiple"):
        parse_arguments([*ARGS, "--pad_to_buckets", "true", "--pad_to_multiple_of", "64"])
    config = tmp_path / "run.yaml"  # a config file's value bypasses argparse's choices
    config.write_text(yaml.safe_dump({"pad_to_buckets": "maybe"}))
    with pytest.raises(UsageError, match="Unknown pad_to_buckets 'maybe'. Valid choices: auto, true, false"):
        parse_arguments([str(config), *ARGS])


def test_a_config_files_true_is_read_as_the_choice_not_written_back(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"padding_free": True, "pad_to_buckets": False}))
    *_, args = parse_arguments([str(config), *ARGS])
    assert args.padding_free is True and args.pad_to_buckets is False  # as the file gave them
    layout_args = _args(padding_free=True, pad_to_buckets=False, bf16=True, fp16=False)
    from helpers import tiny_model

    with pytest.raises(UsageError, match="--padding_free true: torch's varlen kernel runs on CUDA GPUs only"):
        batch_layout.choose_padding_free(layout_args, tiny_model("mean"), {"": "sequence"})
    assert (
        "--pad_to_buckets false"
        in batch_layout.choose_buckets(layout_args, {"": "sequence"}, False, [4], 8)[1]
    )


# ----------------------------------------------------------------------------------------------------
# The GPU defaults: loader workers, pinned non-blocking copies, no per-step NaN check, the plan's last batch
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("accelerator", [False, True])
def test_the_loader_settings_follow_the_device(monkeypatch, accelerator):
    monkeypatch.setattr(training_arguments, "uses_an_accelerator", lambda use_cpu: accelerator)
    *_, args = parse_arguments(ARGS)
    assert args.dataloader_num_workers == (
        training_arguments.ACCELERATOR_LOADER_WORKERS if accelerator else 0
    )
    assert args.dataloader_pin_memory is accelerator
    assert (args.accelerator_config.non_blocking if accelerator else True) is True
    assert args.logging_nan_inf_filter is False  # the loss is checked at logging instead (no sync a step)
    *_, chosen = parse_arguments([*ARGS, "--dataloader_num_workers", "0"])
    assert chosen.dataloader_num_workers == 0


def test_a_compiled_run_on_buckets_drops_its_last_smaller_batch(tmp_path):
    from pooled_models.train.plan import _trainer_args

    tasks = {"": SimpleNamespace(kind="sequence", labels=None, splits={})}
    *_, args = parse_arguments([*ARGS, "--torch_compile", "true", "--pad_to_buckets", "true"])
    assert not args.dataloader_drop_last
    assert _trainer_args(args, tasks, tmp_path, True).dataloader_drop_last is True
    *_, eager = parse_arguments(
        [*ARGS, "--pad_to_buckets", "true"]
    )  # the control: a shape more costs little eager
    assert _trainer_args(eager, tasks, tmp_path, True).dataloader_drop_last is False


# ----------------------------------------------------------------------------------------------------
# Whole runs: the compiled model meets only the bucket shapes; a non-finite loss stops the run by name
# ----------------------------------------------------------------------------------------------------


def _mixed_lengths(tmp_path):
    rng = random.Random(0)
    topics = list(WORDS)
    rows = [
        {"text": sentence(rng, topics[i % 3], rng.randint(1, 36)), "label": topics[i % 3]} for i in range(32)
    ]
    return str(write_rows(tmp_path / "train.jsonl", rows))


def _compiled_run(backbone, tmp_path, name, *flags):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    common = ["--train_file", _mixed_lengths(tmp_path), "--do_train", "--num_train_epochs", "1"]
    common += ["--per_device_train_batch_size", "8", "--save_strategy", "no", "--max_seq_length", "48"]
    common += [
        "--torch_compile",
        "true",
        "--torch_compile_backend",
        "eager",
        "--length_buckets",
        "3",
        "--pooling",
        "mean",
    ]
    result = train(backbone, tmp_path / name, *common, *flags)
    return result, counters["stats"]["unique_graphs"]


@pytest.mark.slow  # two short compiled runs (dynamo traces; the eager backend generates no code)
def test_a_compiled_model_meets_only_the_bucket_shapes(tmp_path, tiny_backbone_path, capsys):
    result, graphs = _compiled_run(tiny_backbone_path, tmp_path, "buckets", "--pad_to_buckets", "true")
    out = capsys.readouterr().out
    buckets = tuple(int(n) for n in out.split("length buckets (")[1].split(" tokens")[0].split(", "))
    # One static graph per bucket, compiled before step 1; a training batch of any other shape would add one.
    assert graphs == len(buckets) == 3, (
        graphs,
        buckets,
    )  # dynamo's default would make it 2 (static, dynamic)
    assert "length buckets" in (result.output_dir / "README.md").read_text()
    # The control: the same compiled run without buckets, each shape compiled statically as buckets are: more graphs.
    with torch._dynamo.config.patch(
        automatic_dynamic_shapes=False
    ):  # restored after: later tests compile too
        _, unbucketed = _compiled_run(tiny_backbone_path, tmp_path, "longest", "--pad_to_buckets", "false")
    assert unbucketed > len(buckets), unbucketed


def test_a_non_finite_loss_stops_the_run_naming_the_step_and_its_rows(
    tmp_path, tiny_backbone_path, minilm_tokenizer
):
    rows = topic_rows(48)
    data = write_rows(tmp_path / "train.jsonl", rows)
    seen = []

    class Poison(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            model.register_forward_pre_hook(lambda m, a, k: seen.append(k["input_ids"]), with_kwargs=True)

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step == 2:  # the third step's loss is nan
                with torch.no_grad():
                    next(model.classifier.parameters()).fill_(float("nan"))

    flags = [
        "--train_file",
        str(data),
        "--do_train",
        "--logging_steps",
        "2",
        "--per_device_train_batch_size",
        "8",
    ]
    with pytest.raises(NonFiniteLossError, match=r"nan at step 3, on the batch of training rows ") as error:
        train(tiny_backbone_path, tmp_path / "out", *flags, callbacks=[Poison()])
    named = [int(n) for n in str(error.value).split("training rows ")[1].split(" (")[0].split(", ")]
    # against the batch the model was given at step 3, read independently of the guard
    third = {tuple(ids[ids != minilm_tokenizer.pad_token_id].tolist()) for ids in seen[2]}
    encoded = [tuple(minilm_tokenizer(rows[n]["text"])["input_ids"]) for n in named]
    assert len(named) == 8 and set(encoded) == third
    assert leftovers(tmp_path / "out") == []  # nothing half-written


def test_the_warm_up_leaves_the_weights_the_gradients_and_the_random_state_as_they_were(
    tmp_path, minilm_tokenizer
):
    from datasets import Dataset
    from helpers import tiny_model
    from transformers import TrainingArguments

    from pooled_models.train.trainer import PooledTrainer

    lengths = [3, 5, 9, 14, 20, 30]
    rows = Dataset.from_dict({"input_ids": [[5] * n for n in lengths], "labels": [0, 1, 2, 0, 1, 2]})
    model = tiny_model("mean").train()
    args = TrainingArguments(
        output_dir=str(tmp_path), report_to="none", use_cpu=True, per_device_train_batch_size=2
    )
    collator = TaskCollator(minilm_tokenizer, {"": "sequence"}, buckets=(8, 16, 32), max_length=32)
    trainer = PooledTrainer(
        model=model, args=args, train_dataset=rows, data_collator=collator, length_buckets=(8, 16, 32)
    )
    assert not trainer.warm_up_pending  # not compiled: nothing to warm up
    shapes = []
    model.register_forward_pre_hook(
        lambda m, a, k: shapes.append(tuple(k["input_ids"].shape)), with_kwargs=True
    )
    weights = {name: value.clone() for name, value in model.state_dict().items()}
    state = torch.get_rng_state()
    trainer.current_gradient_accumulation_steps = 1  # what Trainer's training loop sets before the first step
    trainer.warm_up(model)
    assert shapes == [(2, 8), (2, 16), (2, 32)]  # one batch per bucket, padded to it
    assert torch.equal(torch.get_rng_state(), state)  # dropout drew nothing the run will see
    assert all(parameter.grad is None for parameter in model.parameters())
    assert all(torch.equal(value, weights[name]) for name, value in model.state_dict().items())
    assert not torch.equal(torch.rand(1), torch.rand(1))  # the control: drawing does move the state


def test_the_guard_reads_the_texts_of_padded_and_padding_free_batches_back():
    from pooled_models.train.loss_guard import LossGuard

    guard = LossGuard()
    guard.record(
        1,
        torch.tensor(0.5),
        {
            "input_ids": torch.tensor([[7, 8, 0], [9, 0, 0]]),
            "attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]]),
        },
    )
    flat = {
        "input_ids": torch.tensor([[4, 5, 6]]),
        "cu_seq_lens_q": torch.tensor([0, 1, 3], dtype=torch.int32),
    }
    guard.record(2, torch.tensor(float("inf")), flat)
    guard.record(3, torch.tensor(float("nan")), flat)
    assert guard.first_non_finite() == (2, float("inf"), [[4], [5, 6]])
    guard.clear()
    guard.record(4, torch.tensor(1.0), flat)
    assert guard.first_non_finite() is None  # the control: every loss kept is finite
