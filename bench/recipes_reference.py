"""bench/recipes.py's reference: the 30-line fine-tuning recipe in plain PyTorch (mean pooling, one ``nn.Linear``,
AdamW at train.py's optimisation defaults with the head at 2e-3), against which every arm is compared."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

from pooled_models.modeling.problem_types import MULTI_LABEL
from pooled_models.train.arguments import PooledTrainingArguments
from pooled_models.train.arguments.training import LEARNING_RATE, NUM_TRAIN_EPOCHS
from pooled_models.train.evaluation import compute_metrics

RECIPE_HEAD_LEARNING_RATE = 2e-3


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
