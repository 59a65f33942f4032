"""The Trainer of a multi-task run: task-homogeneous batches from the task sampler, each task's loss weight and head
learning rate, and evaluation task by task (``eval_<task>_<metric>``, plus ``eval_mean_score``, the mean of every
task's main metric, which best-model selection can use).

A model forward takes one task's batch (``model(**batch)`` with ``batch["task"]``) and returns that task's logits and
loss, as a single-task model would: Trainer's loss, its ``label_ids``, its gathering across processes and its
``load_best_model_at_end`` work unchanged.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
from torch.utils.data import DataLoader
from transformers import EvalPrediction, TrainerCallback

from ..modeling.configuration_multitask import TOKEN
from ..modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from .batching import token_lengths
from .metrics import compute_metrics, logits_of
from .multitask_data import TASK_KEY, TaskRows
from .sampling import TaskBatchSampler
from .task_specs import TaskSpec
from .token_metrics import token_metrics, uses_entity_tags
from .trainer import PooledTrainer

__all__ = ["MultiTaskTrainer", "MEAN_SCORE", "main_metric", "task_metrics_function"]

# The metric that sums up the tasks: the mean of each task's main metric (all "higher is better").
MEAN_SCORE = "mean_score"


def main_metric(kind: str, problem_type: str | None, names: list[str]) -> str:
    """The metric that sums up one task, higher being better: macro-F1 (single-label), micro-F1 (multi-label),
    Pearson's r (regression), entity F1 (token tasks with entity tags), token accuracy (other tags)."""
    if kind == TOKEN:
        return "f1" if uses_entity_tags(names) else "accuracy"
    return {SINGLE_LABEL: "f1_macro", MULTI_LABEL: "f1_micro", REGRESSION: "pearson"}[problem_type]


def task_metrics_function(model, task: str) -> Callable[[EvalPrediction], dict[str, float]]:
    """The metrics of one task's predictions: read from the model's task config when they are computed, so a
    threshold tuned after training counts."""

    def compute(prediction: EvalPrediction) -> dict[str, float]:
        config = model.task_configs[task]
        logits = logits_of(prediction.predictions)
        if model.config.kind(task) == TOKEN:
            names = [config.id2label[index] for index in range(config.num_labels)]
            return token_metrics(logits, prediction.label_ids, names)
        return compute_metrics(logits, prediction.label_ids, config.problem_type, config.decision_threshold)

    return compute


class _SamplerEpoch(TrainerCallback):
    """Tells the task sampler which epoch begins, also after a resume that skips the epoch's first batches (Accelerate
    then wraps the batch sampler in one that does not pass the epoch on)."""

    def __init__(self, trainer: MultiTaskTrainer):
        self.trainer = trainer

    def on_epoch_begin(self, args, state, control, **kwargs):
        sampler = self.trainer.task_sampler
        if sampler is not None:
            sampler.set_epoch(math.floor(state.epoch + 1e-9) if state.epoch else 0)


class MultiTaskTrainer(PooledTrainer):
    """``PooledTrainer`` for ``PooledForMultiTask``: ``train_dataset`` is a ``MultiTaskRows``, ``eval_dataset`` a
    mapping task -> its rows; ``tasks`` says each task's loss weight, head learning rate, start epoch."""

    def __init__(self, *args, tasks: list[TaskSpec], name_metrics_by_task: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.tasks = {spec.name: spec for spec in tasks}
        # A run of one token task names its metrics as a single run does (eval_f1, not eval_tokens_f1).
        self.name_metrics_by_task = name_metrics_by_task
        self.task_sampler: TaskBatchSampler | None = None
        self.add_callback(_SamplerEpoch(self))

    # -- optimisation ------------------------------------------------------------------------------------------

    def head_learning_rates(self, model) -> dict[int, float]:
        """Each head trains at its task's ``head_learning_rate``, else the run's."""
        rates = {}
        for name, spec in self.tasks.items():
            rate = (
                spec.head_learning_rate
                if spec.head_learning_rate is not None
                else self.args.head_learning_rate
            )
            if rate is not None:
                rates.update(
                    dict.fromkeys((id(parameter) for parameter in model.head_parameters(name)), rate)
                )
        return rates

    def get_train_dataloader(self) -> DataLoader:
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        self.task_sampler = TaskBatchSampler(
            self.train_dataset.sizes,
            self._train_batch_size,
            strategy=self.args.task_sampling,
            alpha=self.args.sampling_alpha,
            start_epochs={name: spec.start_epoch for name, spec in self.tasks.items()},
            seed=self.args.seed,
            group=self.args.world_size,
            lengths=self._task_lengths(),
        )
        collator = self.data_collator
        if self.args.remove_unused_columns:
            collator = self._get_collator_with_removed_columns(collator, description="training")
        loader = DataLoader(
            self.train_dataset,
            batch_sampler=self.task_sampler,
            collate_fn=collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
        )
        return self.accelerator.prepare(loader)

    def _task_lengths(self) -> dict[str, list[int]] | None:
        """Each task's row lengths when training batches are length-grouped (train.py's default), as single-task
        runs group theirs."""
        if self.args.train_sampling_strategy != "group_by_length":
            return None
        return {part.task: token_lengths(part.rows) for part in self.train_dataset.parts}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        task = inputs.get(TASK_KEY)
        result = super().compute_loss(
            model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
        )
        weight = self.tasks[task].loss_weight if task in self.tasks else 1.0
        if not model.training or weight == 1.0:  # evaluation losses stay comparable between runs
            return result
        if return_outputs:
            loss, outputs = result
            return loss * weight, outputs
        return result * weight

    # -- evaluation, task by task ------------------------------------------------------------------------------

    def evaluate(
        self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        datasets = self.eval_dataset if eval_dataset is None else eval_dataset
        if not isinstance(datasets, dict):
            return super().evaluate(
                eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix
            )
        self._memory_tracker.start()
        start = time.time()
        metrics: dict[str, float] = {}
        for task, rows in datasets.items():
            output = self._task_loop(
                task, rows, ignore_keys, self.metric_prefix(metric_key_prefix, task), "Evaluation"
            )
            metrics.update(output.metrics)
        if self.name_metrics_by_task:
            metrics.update(self.summary_metrics(metrics, list(datasets), metric_key_prefix))
        metrics[f"{metric_key_prefix}_runtime"] = round(time.time() - start, 4)
        if self.state.epoch is not None:
            metrics["epoch"] = self.state.epoch
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        self._memory_tracker.stop_and_update_metrics(metrics)
        return metrics

    def metric_prefix(self, prefix: str, task: str) -> str:
        return f"{prefix}_{task}" if self.name_metrics_by_task else prefix

    def predict_task(self, task: str, rows, metric_key_prefix: str = "test"):
        """``Trainer.predict`` on one task's rows, its metrics named ``<prefix>_<task>_<metric>``."""
        return self._task_loop(task, rows, None, self.metric_prefix(metric_key_prefix, task), "Prediction")

    def _task_loop(self, task: str, rows, ignore_keys, prefix: str, description: str):
        dataset = rows if isinstance(rows, TaskRows) else TaskRows(task, rows)
        saved, self.compute_metrics = self.compute_metrics, task_metrics_function(self.model, task)
        try:
            return self.evaluation_loop(
                self.get_eval_dataloader(dataset),
                description,
                ignore_keys=ignore_keys,
                metric_key_prefix=prefix,
            )
        finally:
            self.compute_metrics = saved

    def summary_metrics(self, metrics: dict[str, float], tasks: list[str], prefix: str) -> dict[str, float]:
        """``<prefix>_mean_score`` (the mean of each task's main metric; an undefined one, such as Pearson's r of a
        constant prediction, counts 0) and ``<prefix>_loss`` (the mean of the tasks' losses)."""
        model = self.model
        scores, losses = [], []
        for task in tasks:
            config = model.task_configs[task]
            names = [config.id2label[index] for index in range(config.num_labels)]
            task_prefix = self.metric_prefix(prefix, task)
            value = metrics.get(
                f"{task_prefix}_{main_metric(model.config.kind(task), config.problem_type, names)}"
            )
            scores.append(0.0 if value is None or math.isnan(value) else value)
            if f"{task_prefix}_loss" in metrics:
                losses.append(metrics[f"{task_prefix}_loss"])
        summary = {f"{prefix}_{MEAN_SCORE}": float(np.mean(scores))}
        if losses:
            summary[f"{prefix}_loss"] = float(np.mean(losses))
        return summary
