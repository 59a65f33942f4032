"""Defaults that win: train.py's classifier against a 30-line fine-tuning recipe, and against candidate settings,
on the same data, backbone, seeds and budget, in one run.

    python bench/recipes.py                       # fortunes and debtags, seeds 1 2 3, every arm: hours
    python bench/recipes.py --arms recipe,defaults,llrd_0.8,label_smoothing_0.1
    python bench/recipes.py --datasets fortunes --arms recipe,defaults --seeds 1 2 3 4 5
    python bench/recipes.py --resume              # continue an interrupted run (its finished runs are skipped)
    python bench/recipes.py --datasets fortunes --merge-from /tmp/core1   # add another process's runs to the table
    python bench/recipes.py --datasets fortunes --per-class 6 --seeds 1 --arms recipe,defaults --epochs 0.25 \\
        --report-dir /tmp/recipes                 # a smoke test: a minute

A train.py run takes a few minutes here (2 CPU cores, OMP_NUM_THREADS=1 when the machine is shared), so every arm
on both datasets with three seeds (18 arms x 3 seeds x 2 datasets) takes hours: ``--arms`` picks the ones to run,
and ``--resume`` adds arms or seeds to a finished report.

What it measures. For each dataset (bench/accuracy.py's splits of fortunes, single-label, and debtags, multi-label)
and each seed, every arm trains on the training split and is scored on the test split:

* ``recipe``: the reference, implemented here in plain PyTorch (``train_recipe``), not through train.py: the packaged
  all-MiniLM-L6-v2 with attention-mask mean pooling and one ``nn.Linear``, AdamW with the backbone at train.py's
  default learning rate and the head at 2e-3, train.py's epochs, batch size, warm-up share and linear schedule
  (read from ``PooledTrainingArguments``' defaults, so they stay in step), random batches, cross-entropy
  (single-label) or BCE with decisions at 0.5 (multi-label). Nothing else: no dropout before the head, no gradient
  clipping, no length-grouped batches, no threshold tuning.
* ``defaults``: train.py with its defaults (in this process, as sweep.py runs it), given the validation split as
  train.py users do (multi-label runs tune their decision threshold on it).
* every other arm: train.py's defaults plus the arm's flags, from ``CANDIDATES`` below.

Scores use train.py's own metric functions (``pooled_models.train.evaluation.compute_metrics``): accuracy and macro-F1
on fortunes, micro- and macro-F1 on debtags. "train seconds" is the optimisation loop alone: Trainer's
``train_runtime`` for train.py (run with ``--eval_strategy no``: train.py evaluates every epoch only to report
progress, unless it keeps the best checkpoint; leaving that out changes which random numbers later epochs draw, so a
``defaults`` run is not bit-identical to a default user run, but is the same method), the same loop timed here for
the recipe.
Loading, tokenising and scoring the test split are left out of both.

Every arm gets ``--max_seq_length`` as bench/accuracy.py passes it (128 fortunes, 64 debtags); ``--epochs`` changes
the budget of every arm alike (the recipe included). Runs go seed by seed, every arm within a seed, so a slow patch
of the machine does not fall on one arm only.

The report goes to ``<report-dir>/<dataset>/`` (default bench/results/recipes/): report.json (every run: arm, seed,
metrics, train seconds), report.md (one row per arm: mean ± sd of each metric over the seeds, train seconds, time
against the recipe, difference in points against the recipe) and report.png (the metrics, sd as error bars). It is
rewritten after every run, so an interrupted run keeps what finished; ``--resume`` skips the (arm, seed) pairs
report.json records as finished. Without ``--resume`` an earlier report in that folder is replaced.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from accuracy import (  # noqa: E402  (bench/ is on sys.path: this script's folder)
    BACKBONE,
    LABEL_COLUMN,
    MAX_SEQ_LENGTH,
    REPO,
    data_arguments,
    data_files,
)

from pooled_models.modeling.problem_types import MULTI_LABEL, SINGLE_LABEL  # noqa: E402
from pooled_models.sweep.records import write_atomically  # noqa: E402
from pooled_models.train.arguments import PooledTrainingArguments  # noqa: E402
from pooled_models.train.arguments.training import LEARNING_RATE, NUM_TRAIN_EPOCHS  # noqa: E402
from pooled_models.train.evaluation import compute_metrics  # noqa: E402
from pooled_models.train.predictions import json_safe  # noqa: E402
from pooled_models.train.source import resolve_backbone  # noqa: E402

RECIPE = "recipe"
DEFAULTS = "defaults"
RECIPE_HEAD_LEARNING_RATE = 2e-3

# The candidates: each is train.py's defaults plus these flags. One entry per idea the issue lists; add one here and
# it is an arm (--arms picks a subset).
#
# The first runs (bench/results/recipes/) found the head learning rate to be what train.py lacked against the recipe,
# and the default went from 1e-3 to 5e-3. The arms measured before that pin --head_learning_rate 1e-3, so that each
# arm keeps meaning what it ran; the others are relative to the current defaults.
BEFORE = ["--head_learning_rate", "1e-3"]  # train.py's head learning rate before bench/recipes.py measured it
LABEL_TOKENS = ["--pooling", "label_tokens"]
TWO_WAY = [
    "--label_token_attention",
    "two_way",
]  # train.py's label-token attention before bench/recipes.py measured it

CANDIDATES: dict[str, list[str]] = {
    # The head learning rate (the pooler and head start from random weights): train.py's earlier default, the
    # recipe's, and above the default
    "head_lr_1e-3": BEFORE,
    "head_lr_2e-3": ["--head_learning_rate", "2e-3"],
    "head_lr_1e-2": ["--head_learning_rate", "1e-2"],
    # What the recipe does otherwise: no dropout before the head, random batches (and no gradient clipping)
    "no_head_dropout": ["--classifier_dropout", "0"],
    "random_batches": ["--train_sampling_strategy", "random"],
    "no_grad_clipping": ["--max_grad_norm", "0"],
    # Candidates measured at the earlier head learning rate (1e-3), against head_lr_1e-3
    "pooling_mean_max@1e-3": [*BEFORE, "--pooling", "mean_max"],
    "llrd_0.9@1e-3": [*BEFORE, "--layerwise_lr_decay", "0.9"],
    "warmup_0@1e-3": [*BEFORE, "--warmup_steps", "0"],
    "pooling_mean_max@2e-3": ["--head_learning_rate", "2e-3", "--pooling", "mean_max"],
    # Candidates on the current defaults. The arms of the options removed in 0.3 (LP-FT, EMA, multi-sample dropout,
    # --pooling auto, label tokens after the text, the shared label-token scorer) are gone: their runs stay in
    # bench/results/recipes as the record of what they measured.
    "pooling_mean_max": ["--pooling", "mean_max"],
    "pooling_attention": ["--pooling", "attention"],
    "llrd_0.8": ["--layerwise_lr_decay", "0.8"],
    "llrd_0.9": ["--layerwise_lr_decay", "0.9"],
    "label_smoothing_0.1": ["--label_smoothing_factor", "0.1"],
    "warmup_0.06": ["--warmup_steps", "0.06"],
    "warmup_0": ["--warmup_steps", "0"],
    # Label tokens (issue 16, part 3: why they trail mean pooling on fortunes): train.py's defaults (the top 2
    # layers, one-way attention), two-way attention (its default before these runs: the arms measured then pin it,
    # "@two_way"), full insertion, and one change each to the initialisation and the label
    # embeddings' own learning rate (a tenth of the head's) and weight decay (none).
    "label_tokens": [*LABEL_TOKENS],
    "label_tokens_two_way": [*LABEL_TOKENS, *TWO_WAY],
    "label_tokens_all": [*LABEL_TOKENS, "--label_token_layers", "all"],
    "label_tokens_random_init": [*LABEL_TOKENS, "--label_token_init", "random"],
    "label_tokens_random_init@two_way": [*LABEL_TOKENS, *TWO_WAY, "--label_token_init", "random"],
    "label_tokens_embedding_lr_5e-4@two_way": [
        *LABEL_TOKENS,
        *TWO_WAY,
        "--label_embedding_learning_rate",
        "5e-4",
    ],
    "label_tokens_embedding_decay_0@two_way": [
        *LABEL_TOKENS,
        *TWO_WAY,
        "--label_embedding_weight_decay",
        "0",
    ],
}

# The metrics each dataset reports (on the test split), the first being the one the chart sorts by.
METRICS = {"fortunes": ("accuracy", "f1_macro"), "debtags": ("f1_micro", "f1_macro")}
PROBLEM_TYPE = {"fortunes": SINGLE_LABEL, "debtags": MULTI_LABEL}


def all_arms() -> list[str]:
    return [RECIPE, DEFAULTS, *CANDIDATES]


def train_py_defaults() -> dict[str, Any]:
    """train.py's optimisation defaults, read from its arguments so that the recipe follows them when they change."""
    defaults = {field.name: field.default for field in dataclasses.fields(PooledTrainingArguments)}
    # Left unset, these two depend on the training set (train/few_examples.py); the benchmark's full training splits
    # have more than a few examples per label, so they get the plain defaults.
    defaults["learning_rate"] = defaults["learning_rate"] or LEARNING_RATE
    defaults["num_train_epochs"] = defaults["num_train_epochs"] or NUM_TRAIN_EPOCHS
    return {
        name: defaults[name]
        for name in (
            "learning_rate",
            "num_train_epochs",
            "per_device_train_batch_size",
            "warmup_steps",
            "weight_decay",
            "adam_beta1",
            "adam_beta2",
            "adam_epsilon",
        )
    }


# ----------------------------------------------------------------------------------------------------
# The reference recipe, in plain PyTorch
# ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Split:
    texts: list[str]
    targets: Any  # class ids (single-label) or multi-hot rows (multi-label), as a tensor
    num_labels: int


def read_split(path: Path, label_column: str) -> list[dict]:
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as handle:
            return [{"text": row["text"], "label": row[label_column]} for row in csv.DictReader(handle)]
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{"text": row["text"], "label": row[label_column]} for row in rows]


def recipe_splits(files: dict[str, Path], label_column: str, problem_type: str) -> dict[str, Split]:
    """The training and test splits as tensors; the label set is the training split's, as train.py takes it."""
    import torch

    rows = {split: read_split(files[split], label_column) for split in ("train", "test")}
    multi_label = problem_type == MULTI_LABEL
    names = sorted(
        {label for row in rows["train"] for label in (row["label"] if multi_label else [row["label"]])}
    )
    index = {name: number for number, name in enumerate(names)}
    splits = {}
    for split, split_rows in rows.items():
        unknown = {
            label
            for row in split_rows
            for label in (row["label"] if multi_label else [row["label"]])
            if label not in index
        }
        if unknown:
            raise ValueError(f"the {split} split has labels the training split lacks: {sorted(unknown)}")
        if multi_label:
            targets = torch.zeros(len(split_rows), len(names))
            for number, row in enumerate(split_rows):
                targets[number, [index[label] for label in row["label"]]] = 1.0
        else:
            targets = torch.tensor([index[row["label"]] for row in split_rows])
        splits[split] = Split([row["text"] for row in split_rows], targets, len(names))
    return splits


def train_recipe(
    splits: dict[str, Split], problem_type: str, max_length: int, epochs: float, seed: int, path: str
) -> tuple[dict[str, float], float]:
    """The 30-line recipe on the backbone in folder ``path``: (test metrics, seconds of its training loop)."""
    import torch
    from torch import nn
    from transformers import AutoModel, AutoTokenizer, get_linear_schedule_with_warmup

    settings = train_py_defaults()
    tokenizer = AutoTokenizer.from_pretrained(path)
    encoded = {
        name: tokenizer(split.texts, truncation=True, max_length=max_length)["input_ids"]
        for name, split in splits.items()
    }
    torch.manual_seed(seed)
    backbone = AutoModel.from_pretrained(path)
    head = nn.Linear(backbone.config.hidden_size, splits["train"].num_labels)

    def logits_of(ids: list[list[int]]) -> torch.Tensor:
        batch = tokenizer.pad({"input_ids": ids}, return_tensors="pt")
        hidden = backbone(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return head((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9))  # mean over real tokens

    optimizer = torch.optim.AdamW(
        [
            {"params": backbone.parameters(), "lr": settings["learning_rate"]},
            {"params": head.parameters(), "lr": RECIPE_HEAD_LEARNING_RATE},
        ],
        weight_decay=settings["weight_decay"],
        betas=(settings["adam_beta1"], settings["adam_beta2"]),
        eps=settings["adam_epsilon"],
    )
    batch_size, rows = settings["per_device_train_batch_size"], len(encoded["train"])
    steps = math.ceil(epochs * math.ceil(rows / batch_size))  # as Trainer counts a fractional epoch
    warmup = settings["warmup_steps"]
    warmup_steps = (
        int(warmup) if warmup >= 1 else math.ceil(steps * warmup)
    )  # TrainingArguments.get_warmup_steps
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup_steps, steps)
    loss_function = nn.BCEWithLogitsLoss() if problem_type == MULTI_LABEL else nn.CrossEntropyLoss()
    targets = splits["train"].targets
    order = torch.Generator().manual_seed(seed)

    start = time.perf_counter()
    backbone.train(), head.train()
    step = 0
    while step < steps:
        for batch in torch.randperm(rows, generator=order).split(batch_size):
            loss = loss_function(logits_of([encoded["train"][i] for i in batch]), targets[batch])
            loss.backward()
            optimizer.step(), scheduler.step(), optimizer.zero_grad()
            step += 1
            if step == steps:
                break
    seconds = time.perf_counter() - start

    backbone.eval(), head.eval()
    with torch.no_grad():
        test = encoded["test"]
        logits = torch.cat([logits_of(test[at : at + 64]) for at in range(0, len(test), 64)])
    metrics = compute_metrics(logits.numpy(), splits["test"].targets.numpy(), problem_type)
    return {f"test_{name}": value for name, value in metrics.items()}, seconds


# ----------------------------------------------------------------------------------------------------
# train.py's arms
# ----------------------------------------------------------------------------------------------------


def train_py_arguments(
    dataset: str, files: dict[str, Path], flags: list[str], seed: int, output_dir: Path, epochs: float | None
) -> list[str]:
    """One train.py run: bench/accuracy.py's data arguments, the arm's flags, and what the bench sets itself."""
    budget = ["--num_train_epochs", str(epochs)] if epochs is not None else []
    return [
        *data_arguments(dataset, files),
        *flags,
        *budget,
        "--seed",
        str(seed),
        "--output_dir",
        str(output_dir),
        "--overwrite_output_dir",
        "--do_train",
        # Evaluating every epoch changes nothing train.py keeps (the best checkpoint is not kept by default) and
        # would count in train_runtime; the final evaluation and the threshold tuning run after training either way.
        "--eval_strategy",
        "no",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
    ]


def train_with_train_py(arguments: list[str], output_dir: Path) -> tuple[dict[str, float], float]:
    """(test metrics, train_runtime) of a train.py run in this process; its output folder is removed."""
    from pooled_models.train.cli import run

    try:
        result = run(arguments)
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)
        shutil.rmtree(output_dir.with_name(output_dir.name + ".incomplete"), ignore_errors=True)
    metrics = {key: value for key, value in result.metrics.items() if key.startswith("test_")}
    return metrics, float(result.metrics["train_runtime"])


# ----------------------------------------------------------------------------------------------------
# Runs and the report
# ----------------------------------------------------------------------------------------------------


def run_arm(
    arm: str, dataset: str, files: dict[str, Path], seed: int, scratch: Path, epochs: float | None
) -> dict:
    """One run, as report.json records it; an error is recorded, not raised, so the other runs go on."""
    record: dict[str, Any] = {"arm": arm, "seed": seed, "status": "ok", "error": None}
    start = time.perf_counter()
    try:
        if arm == RECIPE:
            problem_type = PROBLEM_TYPE[dataset]
            splits = recipe_splits(files, LABEL_COLUMN[dataset], problem_type)
            budget = epochs if epochs is not None else train_py_defaults()["num_train_epochs"]
            path, _ = resolve_backbone(BACKBONE)
            metrics, train_seconds = train_recipe(
                splits, problem_type, MAX_SEQ_LENGTH[dataset], budget, seed, path
            )
        else:
            output_dir = scratch / f"{arm}-seed{seed}"
            flags = [] if arm == DEFAULTS else CANDIDATES[arm]
            arguments = train_py_arguments(dataset, files, flags, seed, output_dir, epochs)
            metrics, train_seconds = train_with_train_py(arguments, output_dir)
        record.update(metrics=metrics, train_seconds=train_seconds)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 - a failed run is a result, not the end of the benchmark
        record.update(status="failed", error=f"{type(error).__name__}: {' '.join(str(error).split())}")
        traceback.print_exc()
    record["seconds"] = time.perf_counter() - start
    return record


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _sd(values: list[float]) -> float | None:
    return statistics.stdev(values) if len(values) > 1 else None


def summarise(document: dict) -> list[dict]:
    """One row per arm: the mean and sd of each metric over its finished seeds, train seconds, and the differences
    against the recipe (in points, and as a time ratio)."""
    metrics = document["metrics"]
    rows = []
    for arm in document["arms"]:
        finished = [run for run in document["runs"] if run["arm"] == arm and run["status"] == "ok"]
        row = {
            "arm": arm,
            "runs": len(finished),
            "failed": sum(run["arm"] == arm and run["status"] != "ok" for run in document["runs"]),
        }
        for metric in metrics:
            values = [
                run["metrics"][f"test_{metric}"] for run in finished if f"test_{metric}" in run["metrics"]
            ]
            row[metric] = {"mean": _mean(values), "sd": _sd(values), "values": values}
        row["train_seconds"] = _mean([run["train_seconds"] for run in finished])
        rows.append(row)
    recipe = next((row for row in rows if row["arm"] == RECIPE), None)
    for row in rows:
        for metric in metrics:
            ours, theirs = row[metric]["mean"], recipe[metric]["mean"] if recipe else None
            row[metric]["points_vs_recipe"] = (
                100 * (ours - theirs) if ours is not None and theirs is not None else None
            )
        theirs = recipe["train_seconds"] if recipe else None
        row["time_vs_recipe"] = (
            row["train_seconds"] / theirs if row["train_seconds"] is not None and theirs else None
        )
    return rows


def _number(value: float | None, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1f}"


def markdown(document: dict, rows: list[dict]) -> str:
    metrics = document["metrics"]
    seeds = document["seeds"]
    header = (
        ["arm", "flags"]
        + [f"{metric} (mean ± sd)" for metric in metrics]
        + ["train s", "time vs recipe"]
        + [f"{metric} vs recipe (points)" for metric in metrics]
        + ["runs ok"]
    )
    lines = [
        f"# Recipes: {document['dataset']}",
        "",
        f"{document['problem_type'].replace('_', ' ')}; test split; seeds {', '.join(map(str, seeds))}; "
        f"{document['sizes']} rows; backbone {BACKBONE}; max_seq_length {document['max_seq_length']}; "
        f"epochs {document['epochs']}.",
        "",
        f"`{document['command']}`",
        "",
    ]
    for merged in document.get("merged_from", []):  # runs made by another process (--merge-from)
        lines += [f"with the runs of `{merged['command']}`", ""]
    for note in document.get("notes", []):  # e.g. arms renamed when a default they measured was adopted
        lines += [note, ""]
    planned, finished = len(document["arms"]) * len(seeds), len(document["runs"])
    if finished < planned:
        lines += [
            f"**Partial report**: {finished} of {planned} runs so far (`--resume` runs the others).",
            "",
        ]
    lines += [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|",
    ]
    for row in rows:
        flags = {RECIPE: "(plain PyTorch, see bench/recipes.py)", DEFAULTS: "(none)"}.get(row["arm"])
        cells = [row["arm"], flags or f"`{' '.join(CANDIDATES.get(row['arm'], []))}`"]
        for metric in metrics:
            value = row[metric]
            spread = f" ± {_number(value['sd'])}" if value["sd"] is not None else ""
            cells.append(_number(value["mean"]) + spread)
        cells += [
            _number(row["train_seconds"], 0),
            _number(row["time_vs_recipe"], 2) + ("x" if row["time_vs_recipe"] else ""),
        ]
        cells += [_signed(row[metric]["points_vs_recipe"]) for metric in metrics]
        cells.append(f"{row['runs']}/{row['runs'] + row['failed']}")
        lines.append("| " + " | ".join(cells) + " |")
    failures = [run for run in document["runs"] if run["status"] != "ok"]
    if failures:
        lines += ["", "## Failed runs", ""]
        lines += [f"- {run['arm']}, seed {run['seed']}: {run['error']}" for run in failures]
    lines += [
        "",
        "train s: the optimisation loop alone (Trainer's train_runtime; the same loop timed for the recipe), mean over "
        "the seeds. Points: 100 × (the arm's mean - the recipe's mean).",
    ]
    return "\n".join(lines) + "\n"


def chart(document: dict, rows: list[dict], handle) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    metrics = document["metrics"]
    shown = list(reversed(rows))  # barh draws bottom-up: the table's first row on top
    height = max(3.0, 0.45 * len(shown) * len(metrics) / 2 + 1.5)
    figure, axes = plt.subplots(
        1, len(metrics) + 1, figsize=(4 * (len(metrics) + 1), height), dpi=100, sharey=True
    )
    positions = range(len(shown))
    for axis, metric in zip(axes, metrics, strict=False):
        means = [row[metric]["mean"] or 0.0 for row in shown]
        errors = [row[metric]["sd"] or 0.0 for row in shown]
        colours = ["tab:gray" if row["arm"] == RECIPE else "tab:blue" for row in shown]
        axis.barh(positions, means, xerr=errors if any(errors) else None, color=colours, capsize=3)
        for position, row, mean in zip(positions, shown, means, strict=True):
            label = f" {mean:.3f}" if row[metric]["mean"] is not None else " not run"
            axis.text(mean, position, label, va="center", fontsize=8)
        axis.set_xlabel(f"test {metric}")
        axis.margins(x=0.2)
    seconds = [row["train_seconds"] or 0.0 for row in shown]
    axes[-1].barh(positions, seconds, color="tab:orange")
    axes[-1].set_xlabel("train seconds (mean)")
    axes[0].set_yticks(list(positions), [row["arm"] for row in shown], fontsize=8)
    spread = f"; error bars: sd over {len(document['seeds'])} seeds" if len(document["seeds"]) > 1 else ""
    figure.suptitle(f"Recipes on {document['dataset']}{spread}", fontsize=10)
    figure.tight_layout()
    figure.savefig(handle, format="png")
    plt.close(figure)


def write_report(document: dict, folder: Path) -> None:
    """report.md, report.png, then report.json (what --resume reads), each replaced atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = summarise(document)
    text = markdown(document, rows).encode()
    write_atomically(folder / "report.md", lambda handle: handle.write(text))
    write_atomically(folder / "report.png", lambda handle: chart(document, rows, handle))
    data = (json.dumps(json_safe({**document, "summary": rows}), indent=2) + "\n").encode()
    write_atomically(folder / "report.json", lambda handle: handle.write(data))


# What must match for a resumed report's runs to be comparable with the new ones.
COMPARABLE = ("sizes", "max_seq_length", "epochs", "data_seed")


def earlier_report(folder: Path, resume: bool) -> dict | None:
    """The earlier report in ``folder``, to continue with --resume (without it, the report is replaced)."""
    path = folder / "report.json"
    if not path.is_file():
        return None
    if not resume:
        print(f"Replacing the earlier report in {folder} (pass --resume to continue it instead).", flush=True)
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def check_comparable(earlier: dict, document: dict, folder: Path) -> None:
    differences = [
        f"{name} was {earlier.get(name)}, now {document[name]}"
        for name in COMPARABLE
        if earlier.get(name) != document[name]
    ]
    if differences:
        sys.exit(
            f"bench/recipes.py: --resume: the report in {folder} was made with other settings ("
            + "; ".join(differences)
            + "); its runs would not be comparable. Resume with the same --per-class/--max-rows/--data-seed/--epochs, "
            "or choose another --report-dir."
        )


def merge_reports(dataset: str, folder: Path, sources: list[Path]) -> None:
    """Add the finished runs of other report folders (the same dataset and settings: e.g. one bench process per core,
    each with its own --report-dir) to the report in ``folder`` and rewrite it; nothing is trained. A run both
    reports hold is kept as ``folder`` has it."""
    own = folder / "report.json"
    if not own.is_file():
        sys.exit(f"bench/recipes.py: --merge-from: no report to merge into ({own} does not exist).")
    document = json.loads(own.read_text(encoding="utf-8"))
    document.pop("summary", None)
    for source in sources:
        path = source / dataset / "report.json"
        if not path.is_file():
            sys.exit(f"bench/recipes.py: --merge-from: {path} does not exist.")
        other = json.loads(path.read_text(encoding="utf-8"))
        check_comparable(document, other, folder)
        held = {(run["arm"], run["seed"]) for run in document["runs"] if run["status"] == "ok"}
        added = [
            run for run in other["runs"] if run["status"] == "ok" and (run["arm"], run["seed"]) not in held
        ]
        document["runs"] += added
        document["arms"] = list(dict.fromkeys([*document["arms"], *(run["arm"] for run in added)]))
        document["seeds"] = list(dict.fromkeys([*document["seeds"], *(run["seed"] for run in added)]))
        document["candidates"] = {**other.get("candidates", {}), **document.get("candidates", {})}
        document.setdefault("merged_from", []).append(
            {"folder": str(path.parent), "command": other["command"]}
        )
        print(f"{dataset}: {len(added)} runs added from {path.parent}", flush=True)
    write_report(document, folder)
    print((folder / "report.md").read_text(), flush=True)


def run_dataset(dataset: str, args: argparse.Namespace, arms: list[str], command: str) -> None:
    folder = args.report_dir / dataset
    earlier = earlier_report(folder, args.resume)
    # A failed run is run again; only finished ones are kept and skipped.
    finished = [run for run in (earlier or {}).get("runs", []) if run["status"] == "ok"]
    done = {(run["arm"], run["seed"]) for run in finished}
    with tempfile.TemporaryDirectory() as scratch:
        files = data_files(dataset, Path(scratch) / "data", args)
        sizes = {
            split: len(path.read_text(encoding="utf-8").splitlines()) - (path.suffix == ".csv")
            for split, path in files.items()
        }
        print(f"{dataset}: {sizes} rows (data seed {args.data_seed})", flush=True)
        document = {
            "dataset": dataset,
            "problem_type": PROBLEM_TYPE[dataset],
            "metrics": list(METRICS[dataset]),
            "arms": list(dict.fromkeys([*(run["arm"] for run in finished), *arms])),
            "seeds": list(dict.fromkeys([*(run["seed"] for run in finished), *args.seeds])),
            "sizes": sizes,
            "max_seq_length": MAX_SEQ_LENGTH[dataset],
            "epochs": args.epochs if args.epochs is not None else train_py_defaults()["num_train_epochs"],
            "data_seed": args.data_seed,
            "candidates": {arm: CANDIDATES[arm] for arm in arms if arm in CANDIDATES},
            "command": command,
            "runs": finished,
        }
        if earlier is not None:
            check_comparable(earlier, document, folder)
        plan = [(arm, seed) for seed in args.seeds for arm in arms]
        for number, (arm, seed) in enumerate(plan, 1):
            if (arm, seed) in done:
                continue
            print(f"[recipes {dataset} {number}/{len(plan)}] {arm}, seed {seed} ...", flush=True)
            record = run_arm(arm, dataset, files, seed, Path(scratch) / "runs", args.epochs)
            document["runs"] = [
                run for run in document["runs"] if (run["arm"], run["seed"]) != (arm, seed)
            ] + [record]
            write_report(document, folder)
            outcome = (
                ", ".join(
                    f"{key[5:]} {value:.4f}"
                    for key, value in record["metrics"].items()
                    if key[5:] in METRICS[dataset]
                )
                if record["status"] == "ok"
                else f"FAILED: {record['error']}"
            )
            print(f"[recipes {dataset} {number}/{len(plan)}] {arm}, seed {seed}: {outcome}", flush=True)
        write_report(document, folder)
    print((folder / "report.md").read_text(), flush=True)


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default="fortunes,debtags", help="comma-separated: fortunes, debtags")
    parser.add_argument(
        "--arms",
        default=",".join(all_arms()),
        help=f"comma-separated (default: all): {', '.join(all_arms())}",
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[1, 2, 3], help="training seeds (default 1 2 3)"
    )
    parser.add_argument(
        "--per-class", type=int, default=60, help="fortunes: quotations per topic (default 60)"
    )
    parser.add_argument("--max-rows", type=int, default=5000, help="debtags: packages (default 5000)")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the subsample and the split")
    parser.add_argument(
        "--epochs",
        type=float,
        default=None,
        help="training epochs of every arm, the recipe's included (default: train.py's default); a fraction "
        "shortens a smoke test",
    )
    parser.add_argument(
        "--report-dir",
        type=Path,
        default=REPO / "bench" / "results" / "recipes",
        help="reports go to <dir>/<dataset>/",
    )
    parser.add_argument(
        "--resume", action="store_true", help="skip the (arm, seed) runs report.json has finished"
    )
    parser.add_argument(
        "--merge-from",
        type=Path,
        nargs="+",
        default=None,
        metavar="DIR",
        help="add the finished runs of these report dirs (same settings; e.g. a second process on the other core) "
        "to the report in --report-dir and rewrite it, training nothing",
    )
    args = parser.parse_args(argv)
    args.datasets = [name.strip() for name in args.datasets.split(",") if name.strip()]
    args.arms = [name.strip() for name in args.arms.split(",") if name.strip()]
    for option, given, valid in (
        ("--datasets", args.datasets, list(METRICS)),
        ("--arms", args.arms, all_arms()),
    ):
        unknown = [name for name in given if name not in valid]
        if unknown or not given:
            parser.error(
                f"{option}: unknown {', '.join(unknown) or '(none given)'}; valid choices: {', '.join(valid)}"
            )
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds has repeats: {args.seeds}")
    if args.epochs is not None and not args.epochs > 0:
        parser.error(f"--epochs must be > 0, got {args.epochs}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    command = shlex.join(["python", "bench/recipes.py", *(sys.argv[1:] if argv is None else argv)])
    for dataset in args.datasets:
        if args.merge_from:
            merge_reports(dataset, args.report_dir / dataset, args.merge_from)
            continue
        try:
            run_dataset(dataset, args, args.arms, command)
        except KeyboardInterrupt:
            resume = "" if args.resume else " --resume"
            print(
                f"\nInterrupted; the finished runs are in {args.report_dir / dataset}. To continue: {command}{resume}",
                file=sys.stderr,
            )
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
