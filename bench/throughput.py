"""How much of what the backbone computes is real text, and how fast train.py trains, evaluates and predicts,
against vanilla AutoModelForSequenceClassification trained by a plain Trainer, in one run.

    python bench/throughput.py                         # fortunes and debtags, 3 rounds
    python bench/throughput.py --datasets fortunes --rounds 2 --per-class 20

Four runs per round on the same data, the packaged all-MiniLM-L6-v2 backbone (``--backbone mpnet``: all-mpnet-base-v2,
bench/backbones.py), the same batch sizes and one epoch:

* ``vanilla``: ``AutoModelForSequenceClassification`` and ``Trainer`` with transformers' defaults (dynamic padding,
  random training batches, evaluation and prediction in input order);
* ``train.py, random order``: train.py with ``--train_sampling_strategy random --length_sorted_eval false`` (its
  batching before version 0.3);
* ``train.py``: train.py's defaults (length-grouped training batches, length-sorted evaluation and prediction; on
  fortunes' few rows per label its pooling is label text, which also encodes every label's text at each step);
* ``train.py, --pooling mean``: the defaults with mean pooling, a model of vanilla's cost, so its ratio is the batching's.

For each phase (train, evaluate on validation, predict on test) it reports the real-token fraction (attention-mask
ones over computed positions, counted in the data collator) and samples per second (the Trainer's own
``*_samples_per_second``). The runs of a round go in a shuffled order, and the speed ratio against vanilla is the
median over rounds of the per-round ratio, so a slow patch of the machine affects both sides of a ratio. Every
round uses another training seed, so the test metrics of the two train.py runs also show whether the batching
changed accuracy (one epoch on a subsample: a check, not a leaderboard; bench/accuracy.py measures accuracy).
"""

from __future__ import annotations

import argparse
import json
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

import numpy as np  # noqa: E402
from backbones import add_backbone_argument, backbone_name, resolve_backbone  # noqa: E402
from corpora.debtags import DebtagsMissing, write_debtags  # noqa: E402  (bench/ is this script's folder)
from corpora.fortunes import FortunesMissing, write_fortunes  # noqa: E402
from datasets import load_dataset  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForSequenceClassification,
    AutoTokenizer,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

import pooled_models.train.batch_layout as batch_layout  # noqa: E402
from pooled_models.modeling.configuration_multitask import SEQUENCE  # noqa: E402
from pooled_models.train.arguments import TRAIN_BATCH_SIZE  # noqa: E402
from pooled_models.train.cli import run as train_py  # noqa: E402
from pooled_models.train.data.multitask import TaskCollator  # noqa: E402
from pooled_models.train.evaluation import compute_metrics  # noqa: E402

MAX_SEQ_LENGTH = {
    "fortunes": 128,
    "debtags": 64,
}  # as bench/accuracy.py: 95% of quotations fit; every description
LABEL_COLUMN = {"fortunes": "label", "debtags": "labels"}
METRIC = {"fortunes": "f1_macro", "debtags": "f1_micro"}
EVAL_BATCH_SIZE = 32
PHASES = ("train", "eval", "test")
VANILLA, RANDOM_ORDER, DEFAULTS = "vanilla", "train.py, random order", "train.py"
MEAN = "train.py, --pooling mean"
# The flags each train.py run adds to the shared ones: its old batching; its defaults (on fortunes' few rows per
# label, label text, which also encodes every label's text at each step); mean pooling, vanilla's kind of model.
TRAIN_PY_FLAGS = {
    RANDOM_ORDER: ["--train_sampling_strategy", "random", "--length_sorted_eval", "false"],
    DEFAULTS: [],
    MEAN: ["--pooling", "mean"],
}


class CountingCollator(TaskCollator):
    """Pads like train.py's collator (DataCollatorWithPadding for a sequence task) and counts real and computed token
    positions by phase."""

    def __init__(
        self, tokenizer, kinds: dict[str, str], counts: dict[str, list[int]], pad_to_multiple_of=None
    ):
        super().__init__(tokenizer, kinds, pad_to_multiple_of=pad_to_multiple_of)
        self.counts = counts
        self.phase = "train"

    def __call__(self, features):
        batch = super().__call__(features)
        real, computed = self.counts.setdefault(self.phase, [0, 0])
        self.counts[self.phase] = [
            real + int(batch["attention_mask"].sum()),
            computed + batch["attention_mask"].numel(),
        ]
        return batch


class PhaseMarker(TrainerCallback):
    """train.py evaluates after training and predicts after evaluating: moves the collator's phase along."""

    def __init__(self, collators: list[CountingCollator]):
        self.collators = collators

    def _set(self, phase):
        for collator in self.collators:
            collator.phase = phase

    def on_train_end(self, args, state, control, **kwargs):
        self._set("eval")

    def on_evaluate(self, args, state, control, **kwargs):
        self._set("test")


def data_files(dataset: str, folder: Path, args) -> dict[str, Path]:
    try:
        if dataset == "fortunes":
            return write_fortunes(folder, max_per_class=args.per_class, seed=0)
        return write_debtags(folder, max_rows=args.max_rows, seed=0)
    except (FortunesMissing, DebtagsMissing) as error:
        sys.exit(f"bench/throughput.py: the {dataset} benchmark cannot run. {error}")


def run_train_py(
    dataset: str, files: dict[str, Path], output_dir: Path, seed: int, flags: list[str], backbone: str
) -> dict:
    counts: dict[str, list[int]] = {}
    collators: list[CountingCollator] = []

    def collator_factory(tokenizer, kinds, pad_to_multiple_of=None):
        collators.append(CountingCollator(tokenizer, kinds, counts, pad_to_multiple_of))
        return collators[-1]

    argv = [
        "--model_name_or_path",
        backbone,
        "--train_file",
        str(files["train"]),
        "--validation_file",
        str(files["validation"]),
        "--test_file",
        str(files["test"]),
        "--label_column",
        LABEL_COLUMN[dataset],
        "--output_dir",
        str(output_dir),
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--num_train_epochs",
        "1",
        "--per_device_eval_batch_size",
        str(EVAL_BATCH_SIZE),
        "--max_seq_length",
        str(MAX_SEQ_LENGTH[dataset]),
        "--eval_strategy",
        "no",
        "--save_strategy",
        "no",
        "--seed",
        str(seed),
        "--disable_tqdm",
        "true",
        "--report_to",
        "none",
    ]
    argv += flags
    # train.py pads every run's batches with the TaskCollator batch_layout.py imports: counted here.
    original = batch_layout.TaskCollator
    batch_layout.TaskCollator = collator_factory
    try:
        result = train_py(argv, callbacks=[PhaseMarker(collators)])
    finally:
        batch_layout.TaskCollator = original
    return summary(result.metrics, counts, result.metrics[f"test_{METRIC[dataset]}"])


def run_vanilla(dataset: str, files: dict[str, Path], output_dir: Path, seed: int, backbone: str) -> dict:
    """AutoModelForSequenceClassification and a plain Trainer; only the epoch count and batch sizes are set (the same
    as the train.py runs), the rest are transformers' defaults."""
    loaded = load_dataset(
        "csv" if files["train"].suffix == ".csv" else "json", data_files={k: str(v) for k, v in files.items()}
    )
    column = LABEL_COLUMN[dataset]
    multi_label = dataset == "debtags"
    names = sorted({name for row in loaded["train"][column] for name in (row if multi_label else [row])})
    index = {name: position for position, name in enumerate(names)}
    tokenizer = AutoTokenizer.from_pretrained(backbone)

    def encode(batch):
        encoded = tokenizer(batch["text"], truncation=True, max_length=MAX_SEQ_LENGTH[dataset])
        if multi_label:
            encoded["labels"] = [[float(name in set(row)) for name in names] for row in batch[column]]
        else:
            encoded["labels"] = [index.get(name, 0) for name in batch[column]]
        return encoded

    encoded = loaded.map(encode, batched=True, remove_columns=loaded["train"].column_names)
    model = AutoModelForSequenceClassification.from_pretrained(
        backbone,
        num_labels=len(names),
        problem_type="multi_label_classification" if multi_label else "single_label_classification",
    )
    counts: dict[str, list[int]] = {}
    collator = CountingCollator(tokenizer, {column: SEQUENCE}, counts)
    args = TrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=1,
        per_device_train_batch_size=TRAIN_BATCH_SIZE,
        per_device_eval_batch_size=EVAL_BATCH_SIZE,
        seed=seed,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=encoded["train"],
        eval_dataset=encoded["validation"],
        data_collator=collator,
        processing_class=tokenizer,
    )
    metrics = dict(trainer.train().metrics)
    collator.phase = "eval"
    metrics.update(trainer.evaluate())
    collator.phase = "test"
    prediction = trainer.predict(encoded["test"])
    metrics.update(prediction.metrics)
    problem_type = "multi_label_classification" if multi_label else "single_label_classification"
    score = compute_metrics(prediction.predictions, prediction.label_ids, problem_type)[METRIC[dataset]]
    return summary(metrics, counts, score)


def summary(metrics: dict, counts: dict[str, list[int]], score: float) -> dict:
    return {
        "speed": {phase: metrics[f"{phase}_samples_per_second"] for phase in PHASES},
        "real_fraction": {phase: counts[phase][0] / counts[phase][1] for phase in PHASES},
        "score": score,
    }


def measure(dataset: str, args) -> dict[str, list[dict]]:
    backbone = resolve_backbone("bench/throughput.py", args.backbone)
    results: dict[str, list[dict]] = {VANILLA: [], **{name: [] for name in TRAIN_PY_FLAGS}}
    with tempfile.TemporaryDirectory() as scratch:
        files = data_files(dataset, Path(scratch) / "data", args)
        sizes = {
            split: len(
                load_dataset("csv" if path.suffix == ".csv" else "json", data_files=str(path))["train"]
            )
            for split, path in files.items()
        }
        print(f"{dataset}: {sizes} rows", flush=True)
        shuffler = random.Random(0)
        for round_index in range(args.rounds):
            seed = 42 + round_index
            order = list(results)
            shuffler.shuffle(order)
            for name in order:
                output_dir = Path(scratch) / f"{name.replace(' ', '_').replace(',', '')}_{round_index}"
                if name == VANILLA:
                    outcome = run_vanilla(dataset, files, output_dir, seed, backbone)
                else:
                    flags = TRAIN_PY_FLAGS[name]
                    outcome = run_train_py(dataset, files, output_dir, seed, flags, backbone)
                results[name].append(outcome)
                print(f"  round {round_index + 1} {name}: {json.dumps(outcome)}", flush=True)
    return results


def table(dataset: str, results: dict[str, list[dict]]) -> str:
    metric = METRIC[dataset]
    lines = [
        f"**{dataset}** ({len(results[VANILLA])} rounds; speed ratio = median over rounds of samples/s against vanilla "
        f"in the same round; {metric} mean ± sd over rounds, one epoch)",
        "",
        "| run | real tokens train / eval / predict | samples/s train / eval / predict | ratio train / eval / predict | test "
        + metric
        + " |",
        "|---|---|---|---|---|",
    ]
    for name, outcomes in results.items():
        fraction = " / ".join(
            f"{statistics.mean(o['real_fraction'][p] for o in outcomes):.2f}" for p in PHASES
        )
        speed = " / ".join(f"{statistics.median(o['speed'][p] for o in outcomes):.1f}" for p in PHASES)
        ratios = " / ".join(
            f"{statistics.median(o['speed'][p] / v['speed'][p] for o, v in zip(outcomes, results[VANILLA], strict=True)):.2f}x"
            for p in PHASES
        )
        scores = [o["score"] for o in outcomes]
        spread = f" ± {statistics.stdev(scores):.3f}" if len(scores) > 1 else ""
        lines.append(f"| {name} | {fraction} | {speed} | {ratios} | {np.mean(scores):.3f}{spread} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", nargs="+", choices=list(MAX_SEQ_LENGTH), default=list(MAX_SEQ_LENGTH))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--per-class", type=int, default=40, help="fortunes: quotations per topic (default 40)"
    )
    parser.add_argument("--max-rows", type=int, default=1500, help="debtags: packages (default 1500)")
    parser.add_argument("--output", type=Path, help="also write the tables (markdown) here")
    add_backbone_argument(parser)
    args = parser.parse_args(argv)
    tables = [table(dataset, measure(dataset, args)) for dataset in args.datasets]
    command = " ".join(["python bench/throughput.py", *(sys.argv[1:] if argv is None else argv)])
    # a MiniLM report says nothing more (the reports stored before --backbone were MiniLM's, and read the same)
    named = "" if args.backbone == "minilm" else f"Backbone: {backbone_name(args.backbone)}\n\n"
    report = f"Command: {command}\n\n{named}" + "\n\n".join(tables)
    print("\n" + report)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
