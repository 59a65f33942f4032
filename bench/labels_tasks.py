"""bench/labels.py's arms, data and scores: what each run is (an :class:`Arm` on a :class:`Task`) and how its
predictions are scored. bench/labels.py's docstring says what each setting and arm means."""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from backbones import MINILM
from corpora.debtags import DebtagsMissing, build_debtags, tag_descriptions
from corpora.fortunes import FortunesMissing, build_fortunes

REPO = Path(__file__).resolve().parent.parent
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
    "frozen_lr": Arm(
        "frozen", TRAINED, (), "logistic regression on the backbone's frozen sentence embeddings"
    ),
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
    backbone: str = MINILM  # bench/backbones.py's --backbone: minilm, mpnet or a model folder


def make_task(dataset: Dataset, setting: str, seed: int, shrink: float = 1.0, backbone: str = MINILM) -> Task:
    splits = {
        split: rows[: max(1, round(len(rows) * shrink))] if shrink < 1 else rows
        for split, rows in dataset.splits.items()
    }
    names = dataset.names
    if setting == "full":
        return Task(
            dataset,
            setting,
            seed,
            splits["train"],
            splits["validation"],
            splits["test"],
            names,
            names,
            backbone,
        )
    if setting in SHOTS:
        train = few_shot_rows(splits["train"], SHOTS[setting], seed)
        return Task(dataset, setting, seed, train, None, splits["test"], names, names, backbone)
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
        backbone,
    )


def arm_flags(arm: Arm, task: Task) -> list[str]:
    """The arm's train.py flags for this task: its own, and its multi-label ones on a multi-label dataset."""
    if not task.dataset.multi_label:
        return list(arm.flags)
    untuned = task.validation is None and arm.untuned_multi_label_flags is not None
    return [*arm.flags, *(arm.untuned_multi_label_flags if untuned else arm.multi_label_flags)]


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
