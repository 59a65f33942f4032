"""The data of a multi-task run: every task's rows behind one index (for the task sampler), one task's rows for its
evaluation, and a collator that pads a batch the way its task needs (labels per token padded with -100)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from torch.utils.data import Dataset as TorchDataset
from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding

from ..modeling.configuration_multitask import TOKEN

__all__ = ["TASK_KEY", "TaskRows", "MultiTaskRows", "MultiTaskCollator"]

# The key of the task's name in a row and in a batch; the model's forward takes it (model(**batch)).
TASK_KEY = "task"


class TaskRows(TorchDataset):
    """One task's encoded rows, each with the task's name."""

    def __init__(self, task: str, rows):
        self.task = task
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {**self.rows[index], TASK_KEY: self.task}


class MultiTaskRows(TorchDataset):
    """Every task's encoded rows, one after the other (in task order): what the task sampler's indices point into."""

    def __init__(self, tasks: dict[str, Any]):
        self.parts = [TaskRows(task, rows) for task, rows in tasks.items()]
        self.sizes = {part.task: len(part) for part in self.parts}
        self.starts = []
        start = 0
        for part in self.parts:
            self.starts.append(start)
            start += len(part)
        self.total = start

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, index: int) -> dict[str, Any]:
        for part, start in zip(reversed(self.parts), reversed(self.starts), strict=True):
            if index >= start:
                return part[index - start]
        raise IndexError(index)


def _padding_on_the_right(tokenizer):
    if getattr(tokenizer, "padding_side", "right") == "right":
        return tokenizer
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.padding_side = "right"
    return tokenizer


class MultiTaskCollator:
    """Pads a batch of one task's rows: as ``DataCollatorWithPadding`` for a sequence task, as
    ``DataCollatorForTokenClassification`` (labels padded with -100) for a token task; the batch keeps the task's
    name under ``task``."""

    def __init__(self, tokenizer, kinds: dict[str, str]):
        self.kinds = dict(kinds)
        self.sequence = DataCollatorWithPadding(tokenizer)
        # Token batches are padded on the right whatever the tokenizer says (the model gives the same logits either
        # way), so that a row's predictions start at position 0 when they are read back per word.
        self.token = DataCollatorForTokenClassification(_padding_on_the_right(tokenizer))

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, Any]:
        tasks = {feature.get(TASK_KEY) for feature in features}
        if len(tasks) != 1 or None in tasks:
            raise ValueError(
                f"A batch holds rows of one task (the task sampler draws them so); this one mixes {sorted(map(str, tasks))}."
            )
        task = tasks.pop()
        rows = [{key: value for key, value in feature.items() if key != TASK_KEY} for feature in features]
        batch = (self.token if self.kinds[task] == TOKEN else self.sequence)(rows)
        batch[TASK_KEY] = task
        return batch
