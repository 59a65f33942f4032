"""The runs bench/gpu.py times, and the backbones it times them on.

Backbones: the packaged all-MiniLM-L6-v2 (its weights), and BERT-base, ModernBERT-base, DeBERTa-v3-base and
Qwen3-0.6B built from their published configurations with random weights (nothing comes from the Hub there; a
step's time does not depend on the weights' values). Every backbone reads the texts as MiniLM's WordPiece tokenizer
cuts them (its ids fit every vocabulary here), so all runs of a dataset see the same token counts.

Runs (each ``arm`` below), as a user calls them:

* ``trainer``: ``AutoModelForSequenceClassification`` and a plain ``Trainer`` with transformers' defaults (random
  batches padded to their longest text, sdpa attention), at the run's batch size and bf16;
* ``trainer, grouped``: the same with length grouping (``group_by_length=True``; transformers 5.24 calls it
  ``train_sampling_strategy="group_by_length"``);
* ``train.py, padded``: train.py with ``--padding_free false --pad_to_buckets false`` (its length-grouped batches,
  each padded to its longest text);
* ``train.py, buckets``: the same padded to length buckets (``--pad_to_buckets true``, train.py's GPU default);
* ``train.py, padding-free``: train.py with ``--padding_free true`` (each batch in one row, torch's varlen kernel;
  refused by name for a backbone that cannot). train.py's defaults are one of these two: ``--padding_free auto``
  pads below 4,096 real tokens a step (train/batch_layout.py);
* ``train.py, token budget``: padding-free with ``--max_tokens_per_batch`` = batch size x the data's mean length
  (as many texts per step on average as the other runs);
* ``train.py, compiled``: train.py with ``--torch_compile true --pad_to_buckets true`` (the compiled model meets
  the buckets' few shapes, each compiled before the first step); ``train.py, CUDA graphs``: the same with
  ``--torch_compile_mode reduce-overhead`` (one CUDA graph per bucket).

Each run trains ``warmup + steps`` optimisation steps; :class:`StepClock` times the last ``steps`` (a device
synchronisation at each end, none between) and counts their real tokens as the collator made them. A whole-epoch
run (``spec["epoch"]``) trains one epoch and :class:`EpochClock` times it from the run's start (loading, tokenizing
and compiling included). :func:`compile_counts` reads what dynamo compiled during a run.
"""

from __future__ import annotations

import contextlib
import csv
import statistics
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

ARMS = (
    "trainer",
    "trainer, grouped",
    "train.py, padded",
    "train.py, buckets",
    "train.py, padding-free",
    "train.py, token budget",
    "train.py, compiled",
    "train.py, CUDA graphs",
)
WORDPIECE = {"pad_token_id": 0, "cls_token_id": 101, "sep_token_id": 102}


def published_configs() -> dict[str, dict]:
    """model_type and settings of each backbone's published config.json (the fields that set its size and speed)."""
    return {
        "bert-base": {
            "model_type": "bert",
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
            "vocab_size": 30522,
            "max_position_embeddings": 512,
        },
        "modernbert-base": {
            "model_type": "modernbert",
            "hidden_size": 768,
            "num_hidden_layers": 22,
            "num_attention_heads": 12,
            "intermediate_size": 1152,
            "vocab_size": 50368,
            "max_position_embeddings": 8192,
            "global_attn_every_n_layers": 3,
            "local_attention": 128,
            "bos_token_id": 101,
            "eos_token_id": 102,
        },
        "deberta-v3-base": {
            "model_type": "deberta-v2",
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
            "vocab_size": 128100,
            "max_position_embeddings": 512,
            "relative_attention": True,
            "position_buckets": 256,
            "norm_rel_ebd": "layer_norm",
            "share_att_key": True,
            "pos_att_type": ["p2c", "c2p"],
            "position_biased_input": False,
            "type_vocab_size": 0,
            "layer_norm_eps": 1e-7,
            "max_relative_positions": -1,
        },
        "qwen3-0.6b": {
            "model_type": "qwen3",
            "hidden_size": 1024,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "intermediate_size": 3072,
            "vocab_size": 151936,
            "max_position_embeddings": 40960,
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
        },
    }


def build_backbones(minilm: Path, folder: Path, names: list[str], shrink: bool = False) -> dict[str, Path]:
    """Each backbone saved as a folder with MiniLM's tokenizer (float32 weights, as published checkpoints load).
    ``shrink``: two thin layers each, for checking the plumbing on a CPU."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm)
    paths = {}
    for name in names:
        target = folder / name
        if name == "minilm":
            target.mkdir(parents=True, exist_ok=True)
            weights = {key: value.float() for key, value in load_file(minilm / "model.safetensors").items()}
            save_file(weights, target / "model.safetensors", metadata={"format": "pt"})
            AutoConfig.from_pretrained(minilm).save_pretrained(target)
        else:
            settings = dict(published_configs()[name])
            model_type = settings.pop("model_type")
            if shrink:
                settings |= {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 96}
                settings |= {"num_attention_heads": 4, "head_dim": 16} if model_type == "qwen3" else {}
                settings |= {"num_attention_heads": 4} if model_type != "qwen3" else {}
                settings |= {"num_key_value_heads": 2} if model_type == "qwen3" else {}
            config = AutoConfig.for_model(model_type, **settings, **WORDPIECE)
            with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
                model = AutoModel.from_config(config)
            model.to(torch.float32).save_pretrained(target)
            del model
        tokenizer.save_pretrained(target)
        paths[name] = target
    return paths


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def token_lengths(rows, tokenizer, max_length: int) -> list[int]:
    encoded = tokenizer([row["text"] for row in rows], truncation=True, max_length=max_length)
    return [len(ids) for ids in encoded["input_ids"]]


def uniform_rows(rows, tokenizer, length: int) -> list[dict[str, str]]:
    """The rows at least ``length`` tokens long, cut to exactly ``length`` tokens (data of one length)."""
    kept = []
    for row in rows:
        ids = tokenizer(row["text"], add_special_tokens=False)["input_ids"]
        if len(ids) >= length - 2:
            kept.append({"text": tokenizer.decode(ids[: length - 2]), "label": row["label"]})
    return kept


class StepClock(TrainerCallback):
    """Times optimisation steps ``warmup + 1 .. warmup + steps``, counts their real tokens (``counts``: one entry per
    batch the collator made, in the order the steps read them), reads the peak memory, and stops the run there."""

    def __init__(self, warmup: int, steps: int, counts: list[int], started: float):
        self.warmup, self.steps, self.counts, self.started = warmup, steps, counts, started
        self.first_step = self.seconds = self.peak = None
        self.matmul_parameters = 0

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.matmul_parameters = matmul_parameters(model)

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.warmup:
            _synchronize()
            self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            _synchronize()
            self.first_step = time.perf_counter() - self.started
        if state.global_step == self.warmup + self.steps:
            _synchronize()
            self.seconds = time.perf_counter() - self.t0
            self.peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
            control.should_training_stop = True

    def figures(self) -> dict:
        tokens = sum(self.counts[self.warmup : self.warmup + self.steps])
        if self.seconds is None or len(self.counts) < self.warmup + self.steps:
            raise RuntimeError(
                f"the run stopped before step {self.warmup + self.steps} ({len(self.counts)} batches)"
            )
        texts = getattr(self, "texts", [])[self.warmup : self.warmup + self.steps]
        return {
            "tokens_per_second": tokens / self.seconds,
            "seconds": self.seconds,
            "tokens": tokens,
            "steps": self.steps,
            "texts_per_step": sum(texts) / len(texts) if texts else None,
            "peak_bytes": self.peak,
            "first_step_seconds": self.first_step,
            "matmul_parameters": self.matmul_parameters,
        }


class EpochClock(StepClock):
    """Times a whole epoch from the run's start (``started``) to the end of its last step, and counts its tokens."""

    def on_step_begin(self, args, state, control, **kwargs):
        pass

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            _synchronize()
            self.first_step = time.perf_counter() - self.started

    def on_train_end(self, args, state, control, **kwargs):
        _synchronize()
        self.seconds = time.perf_counter() - self.started
        self.steps = state.global_step
        self.peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0

    def figures(self) -> dict:
        if self.seconds is None:
            raise RuntimeError("the epoch did not end")
        tokens = sum(self.counts)
        return {
            "tokens_per_second": tokens / self.seconds,
            "seconds": self.seconds,
            "epoch_seconds": self.seconds,
            "tokens": tokens,
            "steps": self.steps,
            "texts_per_step": sum(self.texts) / len(self.texts) if getattr(self, "texts", None) else None,
            "peak_bytes": self.peak,
            "first_step_seconds": self.first_step,
            "matmul_parameters": self.matmul_parameters,
        }


def clock_for(spec: dict, clock_args: tuple, counts: list[int], started: float) -> StepClock:
    return (EpochClock if spec.get("epoch") else StepClock)(*clock_args, counts, started)


def compile_counts() -> dict:
    """What torch's dynamo compiled since its counters were cleared: graphs (one per shape compiled statically),
    frames compiled, and the CUDA-graph counters inductor keeps (recorded graphs and skips, where it has them)."""
    from torch._dynamo.utils import counters

    found = {"graphs": counters["stats"].get("unique_graphs", 0), "frames": counters["frames"].get("ok", 0)}
    found |= {f"inductor_{key}": value for key, value in counters["inductor"].items() if "cudagraph" in key}
    return found


def _synchronize() -> None:
    if torch.cuda.is_available():  # a dry run on the CPU has nothing to wait for
        torch.cuda.synchronize()


def matmul_parameters(model) -> int:
    """Parameters a token multiplies (every parameter but the embedding tables'): the N of 6 x N x tokens."""
    embedded = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in embedded)


def counting(collator, counts: list[int], texts: list[int]):
    """``collator``, recording the real tokens and texts of each batch it makes (read on the host: no device sync)."""

    def collate(features):
        batch = collator(features)
        if "cu_seq_lens_q" in batch:
            counts.append(int(batch["input_ids"].numel()))
            texts.append(len(batch["cu_seq_lens_q"]) - 1)
        else:
            counts.append(int(batch["attention_mask"].sum()))
            texts.append(int(batch["attention_mask"].shape[0]))
        return batch

    return collate


# train.py collates in loader worker processes on a GPU (its default), where a list appended to would stay in the
# worker: the counts travel in the batch instead, under these keys, and are taken out before the model sees it.
COUNT_KEYS = ("bench_real_tokens", "bench_texts")


def counted_in_batch(collator):
    """``collator``, putting each batch's real tokens and texts into the batch (read on the host: no device sync)."""

    def collate(features):
        counts, texts = [], []
        batch = counting(collator, counts, texts)(features)
        batch[COUNT_KEYS[0]], batch[COUNT_KEYS[1]] = counts[0], texts[0]
        return batch

    return collate


@contextlib.contextmanager
def counting_steps(counts: list[int], texts: list[int]):
    """While it lasts, train.py's training steps take the counts out of their batches (in the order the steps read
    them), and its compile warm-up drops them."""
    from pooled_models.train.trainer import PooledTrainer

    step, warm_up = PooledTrainer.training_step, PooledTrainer.warm_up

    def counted_step(self, model, inputs, *args, **kwargs):
        counts.append(inputs.pop(COUNT_KEYS[0]))
        texts.append(inputs.pop(COUNT_KEYS[1]))
        return step(self, model, inputs, *args, **kwargs)

    def uncounted_warm_up(self, model):
        collator = self.data_collator
        self.data_collator = lambda features: {
            key: value for key, value in collator(features).items() if key not in COUNT_KEYS
        }
        try:
            warm_up(self, model)
        finally:
            self.data_collator = collator

    PooledTrainer.training_step, PooledTrainer.warm_up = counted_step, uncounted_warm_up
    try:
        yield
    finally:
        PooledTrainer.training_step, PooledTrainer.warm_up = step, warm_up


def run_trainer(spec: dict, grouped: bool, clock_args: tuple, callbacks=()) -> tuple[StepClock, str]:
    """A plain Trainer on ``spec`` (backbone, rows, max_length, batch_size, seed, bf16); ``callbacks`` added."""
    from datasets import Dataset
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(spec["backbone"])
    names = sorted({row["label"] for row in spec["rows"]})
    index = {name: position for position, name in enumerate(names)}
    data = Dataset.from_dict(
        {
            "text": [row["text"] for row in spec["rows"]],
            "label": [index[row["label"]] for row in spec["rows"]],
        }
    )
    encoded = data.map(
        lambda batch: tokenizer(batch["text"], truncation=True, max_length=spec["max_length"]),
        batched=True,
        remove_columns=["text"],
    )
    model = AutoModelForSequenceClassification.from_pretrained(spec["backbone"], num_labels=len(names))
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    counts, texts = [], []
    clock = clock_for(spec, clock_args, counts, started)
    grouping = {}
    if grouped:
        fields = TrainingArguments.__dataclass_fields__
        grouping = (
            {"train_sampling_strategy": "group_by_length"}
            if "train_sampling_strategy" in fields
            else {"group_by_length": True}
        )
    args = TrainingArguments(
        output_dir=str(spec["output_dir"]),
        per_device_train_batch_size=spec["batch_size"],
        **({"num_train_epochs": 1} if spec.get("epoch") else {"max_steps": clock.warmup + clock.steps}),
        bf16=spec["bf16"],
        seed=spec["seed"],
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        logging_strategy="no",
        **grouping,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=encoded,
        data_collator=counting(DataCollatorWithPadding(tokenizer), counts, texts),
        processing_class=tokenizer,
        callbacks=[clock, *callbacks],
    )
    trainer.train()
    clock.texts = texts
    return clock, model.config._attn_implementation


def run_train_py(spec: dict, flags: list[str], clock_args: tuple, callbacks=()) -> tuple[StepClock, str]:
    """train.py (its ``run``, as ``pooled-train`` calls it) on ``spec``, with ``flags`` and ``callbacks`` added."""
    import pooled_models.train.batch_layout as layout
    from pooled_models.train.cli import run as train_py

    started = time.perf_counter()
    counts, texts = [], []
    clock = clock_for(spec, clock_args, counts, started)
    seen = []

    class Attention(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            seen.append(model.get_backbone().config._attn_implementation)

    argv = [
        "--model_name_or_path", str(spec["backbone"]),
        "--train_file", str(spec["train_file"]),
        "--output_dir", str(spec["output_dir"]),
        "--do_train",
        *(["--num_train_epochs", "1"] if spec.get("epoch") else ["--max_steps", str(clock.warmup + clock.steps)]),
        "--per_device_train_batch_size", str(spec["batch_size"]),
        "--max_seq_length", str(spec["max_length"]),
        "--bf16", "true" if spec["bf16"] else "false",
        "--save_strategy", "no",
        "--logging_strategy", "no",
        "--seed", str(spec["seed"]),
        "--disable_tqdm", "true",
        "--report_to", "none",
        *flags,
    ]  # fmt: skip
    originals = layout.TaskCollator, layout.FlatCollator
    layout.TaskCollator = lambda *a, **k: counted_in_batch(originals[0](*a, **k))
    layout.FlatCollator = lambda *a, **k: counted_in_batch(originals[1](*a, **k))
    try:
        with counting_steps(counts, texts):
            train_py(argv, callbacks=[clock, Attention(), *callbacks])
    finally:
        layout.TaskCollator, layout.FlatCollator = originals
    clock.texts = texts
    return clock, seen[0] if seen else "?"


def mean_length(rows, tokenizer, max_length: int) -> float:
    return statistics.mean(token_lengths(rows, tokenizer, max_length))
