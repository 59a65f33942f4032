"""bench/labels.py's runners: one run of an arm on a task (train.py in a subprocess, SetFit, the cosine baseline,
logistic regression on frozen embeddings), recorded as a dict; a failed run is a result, not the end of the
benchmark."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from backbones import backbone_folder, backbone_name, train_py_model
from labels_tasks import (
    ARMS,
    MAX_SEQ_LENGTH,
    REPO,
    Arm,
    Task,
    arm_flags,
    best_threshold,
    scores_of,
    write_split,
)

# ----------------------------------------------------------------------------------------------------
# Running an arm
# ----------------------------------------------------------------------------------------------------


def folder_of(task: Task) -> str:
    return str(backbone_folder(task.backbone))


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
        train_py_model("bench/labels.py", task.backbone),
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
        folder_of(task), **({"multi_target_strategy": "one-vs-rest"} if multi else {})
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

    model = SentenceTransformer(folder_of(task))

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


def run_frozen(task: Task, arm: Arm, scratch: Path) -> dict[str, Any]:
    """Logistic regression on the backbone's frozen sentence embeddings (its own pooling, normalised), texts cut at
    train.py's length; one-vs-rest for multi-label, deciding at 0.5. sklearn's defaults otherwise: a user with k
    examples per label has no validation rows to choose C on."""
    import numpy as np
    from sentence_transformers import SentenceTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    model = SentenceTransformer(folder_of(task))
    model.max_seq_length = MAX_SEQ_LENGTH[task.dataset.name]
    names = task.candidates
    start = time.perf_counter()
    train = model.encode([row["text"] for row in task.train], normalize_embeddings=True)
    if task.dataset.multi_label:
        targets = np.array([[int(name in row["labels"]) for name in names] for row in task.train])
        classifier = OneVsRestClassifier(LogisticRegression(max_iter=2000)).fit(train, targets)
    else:
        classifier = LogisticRegression(max_iter=2000).fit(train, [row["labels"][0] for row in task.train])
    seconds = time.perf_counter() - start
    predicted = classifier.predict(
        model.encode([row["text"] for row in task.test], normalize_embeddings=True)
    )
    if task.dataset.multi_label:
        predictions = [[names[column] for column in np.flatnonzero(row)] for row in predicted]
    else:
        predictions = [str(label) for label in predicted]
    return {"train_seconds": seconds, "scores": scores_of(task, predictions)}


RUNNERS = {"train.py": run_train_py, "setfit": run_setfit, "cosine": run_cosine, "frozen": run_frozen}


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
        "backbone": backbone_name(task.backbone),
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
