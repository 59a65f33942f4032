"""The Trainer of train.py: ``PooledTrainer`` (the pooler's and head's own learning rate, the training options'
rate and loss rules, batches with little padding, predictions in input order) and ``MultiTaskTrainer`` (task-sampled
batches, each task's loss weight and head rate, evaluation task by task over a dict of evaluation datasets)."""

from __future__ import annotations

import logging
import math
import time
import warnings

import numpy as np
from torch.utils.data import DataLoader, IterableDataset, SequentialSampler
from transformers import EarlyStoppingCallback, Trainer, TrainerCallback

from .data import TaskSpec
from .data.batching import (
    TASK_KEY,
    LengthGroupedRowSampler,
    LengthSortedSampler,
    TaskBatchSampler,
    TaskRows,
    length_sorted_batches,
    restore_input_order,
    token_lengths,
)
from .evaluation import (
    MEAN_SCORE,
    main_metric,
    task_metrics_function,
)
from .options import (
    TRAINING_OPTIONS,
    check_label_embedding_options,
    head_parameters,
    label_embedding_parameters,
)

__all__ = ["PooledTrainer", "callbacks_for", "check_training_options", "MultiTaskTrainer"]

logger = logging.getLogger(__name__)


class PooledTrainer(Trainer):
    """A Trainer whose optimizer gives the pooler and head their own learning rate (``args.head_learning_rate``),
    and whose batches carry little padding.

    The pooler and head start from random weights while the backbone is pretrained, so the head usually wants a
    larger step than the backbone can take without forgetting. The scheduler scales both rates alike. With
    the training options (options/) a parameter may get a rate of its own (layer-wise decay) and the training loss
    may be replaced (label smoothing, for each kind of head, instead of Trainer's LabelSmoother, which suits
    single-label heads only).

    With ``train_sampling_strategy="group_by_length"`` training batches hold texts of similar length (random between
    groups). With ``length_sorted_eval`` (both train.py's defaults) evaluation and prediction run longest text first,
    in batches of at most the evaluation batch size that end early rather than compute more than 5% padding (one
    process; several processes keep fixed-size batches, which their gathering needs), and ``predict`` returns its
    rows in the dataset's order. (transformers' own Trainer, with group_by_length, also
    shuffles the evaluation order, and ``predict`` then returns rows in that shuffled order.)
    """

    def __init__(self, *args, **kwargs):
        with warnings.catch_warnings():
            # Our compute_loss smooths multi-label targets too (label_smoothing.py); Trainer's warning that it cannot
            # would be wrong.
            warnings.filterwarnings("ignore", message="Label smoothing is not compatible with multi-label")
            super().__init__(*args, **kwargs)
        # Trainer's LabelSmoother is right for single-label heads only: compute_loss smooths instead.
        self.label_smoother = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        losses = [option for option in TRAINING_OPTIONS.values() if option.is_on(self.args)]
        if not losses or not model.training or "labels" not in inputs:
            return super().compute_loss(
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )
        # The model checks the labels and computes its own loss, which an option may replace (a regression task
        # keeps it under label smoothing).
        outputs = model(**inputs)
        loss = outputs.loss
        for option in losses:
            replaced = option.training_loss(self.accelerator.unwrap_model(model), inputs, outputs, self.args)
            loss = loss if replaced is None else replaced
        return (loss, outputs) if return_outputs else loss

    # The three private overrides that stay (the EMA ones went with EMA). Trainer has no public hook for the sampler:
    # get_train_dataloader / get_eval_dataloader would have to be rewritten whole (column removal, workers, seeding,
    # accelerator.prepare, the per-dataset persistent loaders) to change it, which is more code that can drift than
    # these overrides. tests/train/test_trainer_seams.py fails if Trainer stops calling them, or changes their
    # signatures.
    def _get_train_sampler(self, train_dataset=None):
        # Why private: the sampler of the training dataloader, for length-grouped batches read column-wise.
        dataset = self.train_dataset if train_dataset is None else train_dataset
        if self.args.train_sampling_strategy != "group_by_length" or not _has_input_ids(dataset):
            return super()._get_train_sampler(train_dataset)
        # The lengths read column-wise (LengthGroupedSampler would read every row as a Python dict), and groups of 50
        # batches whatever the data's size (LengthGroupedSampler's quarter of the data leaves more padding).
        return LengthGroupedRowSampler(token_lengths(dataset), self.args.train_batch_size)

    def _get_eval_sampler(self, eval_dataset):
        # Why private: the sampler of the evaluation and prediction dataloaders (longest text first, or input order).
        if not _sorts_evaluation(self.args, eval_dataset):
            if eval_dataset is None or self.args.world_size > 1:
                return super()._get_eval_sampler(eval_dataset)
            # Input order: transformers' Trainer would shuffle it under group_by_length (see the class docstring).
            return SequentialSampler(eval_dataset)
        sampler = LengthSortedSampler(token_lengths(eval_dataset))
        # predict puts the rows back with its order, and _get_dataloader cuts its batches, without reading lengths again
        self._sorted_eval_sampler = sampler
        return sampler

    def _get_dataloader(self, dataset, description, batch_size, sampler_fn=None, is_training=False, **kwargs):
        # Why private: the one place evaluation and prediction loaders are built, where their batches are cut to
        # sorted lengths; overriding get_eval_dataloader and get_test_dataloader would duplicate both.
        loader = super()._get_dataloader(
            dataset, description, batch_size, sampler_fn=sampler_fn, is_training=is_training, **kwargs
        )
        if (
            is_training
            or isinstance(dataset, IterableDataset)
            or self.args.world_size > 1
            or self.args.dataloader_persistent_workers
            or not _sorts_evaluation(self.args, dataset)
        ):
            # Several processes gather every step's outputs, which needs batches of one size on every process; they
            # keep the sorted fixed-size batches.
            return loader
        sampler = self._sorted_eval_sampler  # what super() just asked _get_eval_sampler for
        batches = length_sorted_batches(sampler.order, sampler.lengths, batch_size)
        workers = loader.num_workers
        return self.accelerator.prepare(
            DataLoader(
                loader.dataset,  # super() removed the columns the model does not take
                batch_sampler=batches,
                collate_fn=loader.collate_fn,
                num_workers=workers,
                pin_memory=loader.pin_memory,
                prefetch_factor=loader.prefetch_factor if workers else None,
            )
        )

    def predict(self, test_dataset, ignore_keys=None, metric_key_prefix: str = "test"):
        output = super().predict(test_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix)
        if not _sorts_evaluation(self.args, test_dataset):
            return output
        order = self._sorted_eval_sampler.order  # what _get_eval_sampler gave this prediction's dataloader
        return output._replace(
            predictions=restore_input_order(output.predictions, order),
            label_ids=restore_input_order(output.label_ids, order),
        )

    def parameter_learning_rates(self, model) -> dict[int, float]:
        """id of a parameter -> its learning rate, for the parameters that may not train at ``args.learning_rate``:
        the backbone's layers under layer-wise decay, the pooler and head, and label-token embeddings given a rate
        of their own."""
        rates = self.backbone_learning_rates(model)
        rates.update(self.head_learning_rates(model))
        label_rate = getattr(self.args, "label_embedding_learning_rate", None)
        if label_rate is not None:
            rates.update(dict.fromkeys(label_embedding_parameters(model), label_rate))
        return rates

    def parameter_weight_decays(self, model) -> dict[int, float]:
        """id of a parameter -> its weight decay, for the decayed parameters that may not use ``args.weight_decay``:
        label-token embeddings given a weight decay of their own."""
        decay = getattr(self.args, "label_embedding_weight_decay", None)
        return {} if decay is None else dict.fromkeys(label_embedding_parameters(model), decay)

    def backbone_learning_rates(self, model) -> dict[int, float]:
        """The rates the training options give parameters of their own (layer-wise decay: the backbone's layers)."""
        rates: dict[int, float] = {}
        for option in TRAINING_OPTIONS.values():
            rates.update(option.learning_rates(model, self.args))
        return rates

    def head_learning_rates(self, model) -> dict[int, float]:
        """The pooler's and head's rate, ``args.head_learning_rate`` (a subclass may give each head its own)."""
        head_learning_rate = getattr(self.args, "head_learning_rate", None)
        if head_learning_rate is None:
            return {}
        return dict.fromkeys(head_parameters(model), head_learning_rate)

    def create_optimizer(self, model=None):
        if self.optimizer is not None:
            return super().create_optimizer(model)
        opt_model = self.model if model is None else model
        unwrapped = self.accelerator.unwrap_model(opt_model)
        rates = self.parameter_learning_rates(unwrapped)
        decays = self.parameter_weight_decays(unwrapped)
        if not rates and not decays:
            return super().create_optimizer(model)
        decayed = set(self.get_decay_parameter_names(opt_model))
        # One group per (rate, weight decay).
        groups: dict[tuple[float, float], list] = {}
        for name, parameter in opt_model.named_parameters():
            if parameter.requires_grad:
                key = id(parameter)
                rate = rates.get(key, self.args.learning_rate)
                decay = decays.get(key, self.args.weight_decay) if name in decayed else 0.0
                groups.setdefault((rate, decay), []).append(parameter)
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, opt_model)
        self.optimizer = optimizer_cls(
            [
                {"params": parameters, "lr": rate, "weight_decay": decay}
                for (rate, decay), parameters in groups.items()
            ],
            **optimizer_kwargs,
        )
        return self.optimizer


def _has_input_ids(dataset) -> bool:
    return "input_ids" in (getattr(dataset, "column_names", None) or ())


def _sorts_evaluation(args, dataset) -> bool:
    return bool(getattr(args, "length_sorted_eval", False)) and _has_input_ids(dataset)


def check_training_options(model, training_args) -> None:
    """Refuse, before a run writes anything, training options the model cannot take (the Trainer would only find
    out once training starts)."""
    for option in TRAINING_OPTIONS.values():
        option.check_model(model, training_args)
    check_label_embedding_options(model, training_args)


def callbacks_for(training_args) -> list[TrainerCallback]:
    if training_args.early_stopping_patience is None:
        return []
    return [EarlyStoppingCallback(early_stopping_patience=training_args.early_stopping_patience)]


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
