"""The Trainer of train.py, one class for one task or several (as sentence-transformers' trainer takes a dict of
datasets): ``eval_dataset`` maps each task to its rows, ``train_dataset`` is one task's rows or a ``MultiTaskRows``
of several. On top of transformers' ``Trainer`` it gives the pooler and head their own learning rate (each task's
head its own), applies the training options' rate and loss rules and each task's loss weight, batches rows of
similar length (task by task), evaluates each task with its own metrics, and predicts in input order.

Trainer builds every DataLoader itself, with its own settings (workers, pinned memory, persistent workers, prefetch,
``seed_worker``, ``accelerator.prepare``); where the batches differ (a length-sorted evaluation, several tasks'
training batches) the loader Trainer built is copied with the other batch sampler. Evaluation runs Trainer's own
``evaluation_loop`` task by task and reports once.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
import warnings
from collections.abc import Mapping
from contextlib import nullcontext
from types import MappingProxyType

import torch
from torch.utils.data import DataLoader, IterableDataset, SequentialSampler
from transformers import EarlyStoppingCallback, Trainer, TrainerCallback
from transformers.trainer_utils import speed_metrics

from ..modeling.configuration_multitask import SEQUENCE
from .data.batching import (
    LengthGroupedRowSampler,
    LengthSortedSampler,
    length_sorted_batches,
    restore_input_order,
    token_lengths,
)
from .data.buckets import warm_up_rows
from .data.flat import FlatCollator
from .data.multitask import TASK_KEY, MultiTaskRows, TaskBatchSampler
from .data.token_budget import TokenBudgetBatches, consecutive_budget_batches
from .evaluation import summary_metrics, task_metrics_function
from .loss_guard import LossGuard, NonFiniteLossError, non_finite_message, rows_of_batch
from .options import (
    TRAINING_OPTIONS,
    check_label_embedding_options,
    label_embedding_parameters,
    task_head_parameters,
)
from .tasks import TaskSpec

__all__ = ["PooledTrainer", "callbacks_for", "check_training_options", "rebatched"]

logger = logging.getLogger(__name__)


class PooledTrainer(Trainer):
    """A Trainer over one task or several (``tasks``: their specs, in task order).

    The pooler and head start from random weights while the backbone is pretrained, so each head trains at its
    task's ``head_learning_rate`` (else ``args.head_learning_rate``): a larger step than the backbone can take without
    forgetting. The scheduler scales all rates alike. A training option (options/) may give parameters a rate of
    their own (layer-wise decay) or replace the training loss (label smoothing, for every kind of head, instead of
    Trainer's LabelSmoother, which suits single-label heads only); a task's ``loss_weight`` scales its training loss.

    With ``train_sampling_strategy="group_by_length"`` training batches hold texts of similar length; with several
    tasks every batch holds one task's rows (``task_sampling``: proportional, temperature, round robin; a task's
    ``start_epoch`` keeps it out until then). With ``length_sorted_eval`` (both train.py's defaults) evaluation and
    prediction run longest text first, in batches of at most the evaluation batch size that end early rather than
    compute more than 5% padding (one process; several processes keep fixed-size batches, which their gathering
    needs), and ``predict`` returns its rows in the dataset's order. (transformers' own Trainer, with
    group_by_length, shuffles the evaluation order, and ``predict`` then returns rows in that shuffled order.)
    """

    def __init__(
        self,
        *args,
        tasks: list[TaskSpec] | None = None,
        name_tasks: bool | None = None,
        length_buckets: tuple[int, ...] | None = None,
        window_budget: int | None = None,
        **kwargs,
    ):
        # Read by _build_accelerator_args, which Trainer's __init__ calls.
        self.length_buckets = length_buckets
        self.loss_guard = LossGuard()
        with warnings.catch_warnings():
            # Our compute_loss smooths multi-label targets too (label_smoothing.py); Trainer's warning that it cannot
            # would be wrong.
            warnings.filterwarnings("ignore", message="Label smoothing is not compatible with multi-label")
            super().__init__(*args, **kwargs)
        # Trainer's LabelSmoother is right for single-label heads only: compute_loss smooths instead.
        self.label_smoother = None
        # Without tasks: one sequence task, scored by the caller's compute_metrics (a Trainer used on its own).
        self.tasks = {spec.name: spec for spec in tasks or [TaskSpec("", SEQUENCE, data=None)]}
        self.scores_tasks = bool(tasks)
        # Metrics named by task (eval_<task>_f1) with their mean: a run of several tasks, or a multi-task model's run.
        self.name_tasks = len(self.tasks) > 1 if name_tasks is None else name_tasks
        self.task_sampler: TaskBatchSampler | None = None
        # Document mode (data/documents.py): rows are documents of windows; a training batch holds up to this many
        # windows, an evaluation batch up to per_device_eval_batch_size windows. None: rows are texts.
        self.window_budget = window_budget
        self.add_callback(_SamplerEpoch(self))
        # A compiled model on length buckets is compiled for every bucket before the first step (_warm_up).
        self.warm_up_pending = bool(length_buckets) and self.args.torch_compile

    def metric_prefix(self, prefix: str, task: str) -> str:
        """A task's metrics are ``eval_<metric>`` in a run of one task, ``eval_<task>_<metric>`` among several."""
        return f"{prefix}_{task}" if self.name_tasks else prefix

    # -- the loss ----------------------------------------------------------------------------------------------

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        task = inputs.get(TASK_KEY, next(iter(self.tasks)))
        loss, outputs = self._loss(model, inputs, num_items_in_batch)
        weight = self.tasks[task].loss_weight if task in self.tasks else 1.0
        if model.training and weight != 1.0:  # evaluation losses stay comparable between runs
            loss = loss * weight
        return (loss, outputs) if return_outputs else loss

    def _loss(self, model, inputs, num_items_in_batch):
        losses = [
            option for option in TRAINING_OPTIONS.values() if option.offers_loss and option.is_on(self.args)
        ]
        if not losses or not model.training or "labels" not in inputs:
            return super().compute_loss(
                model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
            )
        # The model checks the labels and computes its own loss, which an option may replace (a regression task
        # keeps it under label smoothing).
        outputs = model(**inputs)
        loss = outputs.loss
        for option in losses:
            replaced = option.training_loss(self.accelerator.unwrap_model(model), inputs, outputs, self.args)
            loss = loss if replaced is None else replaced
        return loss, outputs

    # -- the step: compiled once per bucket, the loss checked where the host reads it -----------------------------

    def _build_accelerator_args(self, **kwargs):
        # Why private: the one place Trainer hands torch.compile's settings (accelerate's TorchDynamoPlugin) over.
        # On length buckets every shape is compiled on its own (dynamic=False): dynamo's default makes the lengths
        # symbolic at the second shape, and a CUDA graph is recorded per shape either way, so static graphs of the
        # few bucket shapes are the fastest.
        arguments = super()._build_accelerator_args(**kwargs)
        plugin = arguments.get("dynamo_plugin")
        if plugin is not None and self.length_buckets:
            plugin.dynamic = False
        return arguments

    def training_step(self, model, inputs, num_items_in_batch=None):
        if self.warm_up_pending:
            self.warm_up_pending = False
            self.warm_up(model)
        loss = super().training_step(model, inputs, num_items_in_batch)
        # Kept on the device with its batch (no synchronisation): read only where a logged loss is not finite.
        self.loss_guard.record(self.state.global_step + 1, loss, inputs)
        return loss

    def warm_up(self, model) -> None:
        """Compile the model for every length bucket before the first step (counted in the time to it): one
        forward and backward pass on a batch of training rows padded to each bucket, the gradients then dropped
        and the random state put back, so that the run trains as it would have without it."""
        rows = warm_up_rows(
            token_lengths(self.train_dataset), self.length_buckets, self.args.train_batch_size, self.args.seed
        )
        accepted = _forward_inputs(self.accelerator.unwrap_model(model, keep_torch_compile=False))
        states = _random_states()
        started = time.perf_counter()
        for batch_rows in rows:
            features = [
                {key: value for key, value in self.train_dataset[row].items() if key in accepted}
                for row in batch_rows
            ]
            super().training_step(model, self.data_collator(features))
        model.zero_grad(set_to_none=True)
        _restore_random_states(states)
        logger.info(
            "Compiled the model for %d length bucket(s) in %.1f s, before the first step.",
            len(rows),
            time.perf_counter() - started,
        )

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Trainer's log, after the NaN guard: a logged training loss (``loss``, ``train_loss``) that is not finite
        stops the run, naming the first step whose loss was not finite and its batch's rows (loss_guard.py)."""
        for key in ("loss", "train_loss"):
            if key in logs and not math.isfinite(logs[key]):
                found = self.loss_guard.first_non_finite()
                rows = rows_of_batch(found[2], self.train_dataset) if found and found[2] is not None else None
                raise NonFiniteLossError(non_finite_message(found, rows, logs[key]))
        if "loss" in logs:
            self.loss_guard.clear()
        super().log(logs, start_time)

    # -- batches -----------------------------------------------------------------------------------------------

    # The three private overrides (Trainer has no public hook for the sampler): get_train_dataloader and
    # get_eval_dataloader would have to be rewritten whole (column removal, workers, seeding, accelerator.prepare,
    # the per-dataset persistent loaders) to change it, which is more code that can drift than these overrides.
    # tests/train/test_trainer_seams.py fails if Trainer stops calling them, or changes their signatures.
    def _get_train_sampler(self, train_dataset=None):
        # Why private: the sampler of the training dataloader, for length-grouped batches read column-wise.
        dataset = self.train_dataset if train_dataset is None else train_dataset
        if isinstance(dataset, MultiTaskRows):
            return SequentialSampler(dataset)  # _get_dataloader gives the loader the task sampler's batches
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
        # Why private: the one place every loader is built, where several tasks' training batches and the evaluation
        # batches cut to sorted lengths replace Trainer's batches; overriding get_train_dataloader,
        # get_eval_dataloader and get_test_dataloader would duplicate all three.
        loader = super()._get_dataloader(
            dataset, description, batch_size, sampler_fn=sampler_fn, is_training=is_training, **kwargs
        )
        if is_training and isinstance(dataset, MultiTaskRows):
            self.task_sampler = self._task_sampler(dataset, batch_size)
            return self.accelerator.prepare(rebatched(loader, self.task_sampler))
        if is_training and self.window_budget is not None and _has_input_ids(dataset):
            # Each row's length is its number of windows: batches of whole documents up to the window budget, drawn
            # from a shuffle. Not grouped by window count: a document's windows are full rows (only its last one is
            # padded), so grouping saves no padding, and on the manual pages it made batches of one length, so of a
            # few sections (a batch's most frequent label: 45% of its documents against 31% shuffled) and of 6 to
            # 54 documents; trained so, document mode scored 0.448 against the cut model's 0.667
            # (bench/long_documents.py, docs/long-documents.md, "Defaults").
            batches = TokenBudgetBatches(
                token_lengths(dataset),
                self.window_budget,
                padded=False,
                seed=self.args.data_seed or self.args.seed,
                grouped=False,
            )
            return self.accelerator.prepare(rebatched(loader, batches))
        budget = getattr(self.args, "max_tokens_per_batch", None)
        if is_training and budget is not None and _has_input_ids(dataset):
            padded = not isinstance(self.data_collator, FlatCollator)  # padded rows cost the batch's longest
            batches = TokenBudgetBatches(
                token_lengths(dataset), budget, padded, seed=self.args.data_seed or self.args.seed
            )
            return self.accelerator.prepare(rebatched(loader, batches))
        if (
            is_training
            or isinstance(dataset, IterableDataset)
            or self.args.world_size > 1
            or self.args.dataloader_persistent_workers
            or not _sorts_evaluation(self.args, dataset)
        ):
            # Several processes gather every step's outputs, which needs batches of one size on every process; they
            # keep the sorted fixed-size batches. Persistent loaders are kept by Trainer as it built them.
            return loader
        sampler = self._sorted_eval_sampler  # what super() just asked _get_eval_sampler for
        if self.window_budget is not None:  # documents, most windows first, up to batch_size windows a batch
            batches = consecutive_budget_batches(sampler.order, sampler.lengths, batch_size)
        else:
            batches = length_sorted_batches(sampler.order, sampler.lengths, batch_size)
        return self.accelerator.prepare(rebatched(loader, batches))

    def _task_sampler(self, rows: MultiTaskRows, batch_size: int) -> TaskBatchSampler:
        grouped = self.args.train_sampling_strategy == "group_by_length"
        return TaskBatchSampler(
            rows.sizes,
            batch_size,
            strategy=self.args.task_sampling,
            alpha=self.args.sampling_alpha,
            start_epochs={name: spec.start_epoch for name, spec in self.tasks.items()},
            seed=self.args.seed,
            group=self.args.world_size,
            # each task's batches length-grouped, as a single task's are
            lengths={task: token_lengths(part) for task, part in rows.parts.items()} if grouped else None,
        )

    # -- evaluation and prediction -----------------------------------------------------------------------------

    def evaluate(
        self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        """Each task's rows through Trainer's ``evaluation_loop`` with the task's metrics; one report for all: the
        metrics logged once, and, for several tasks, their mean main metric and mean loss."""
        datasets = self._task_datasets(eval_dataset)
        start, rows, steps = time.time(), 0, 0
        metrics: dict[str, float] = {}
        for task, dataset in datasets.items():
            with self._metrics_of(task):
                loader = self.get_eval_dataloader(task if eval_dataset is None else dataset)
                output = self.evaluation_loop(
                    loader,
                    "Evaluation",
                    prediction_loss_only=None,
                    ignore_keys=ignore_keys,
                    metric_key_prefix=self.metric_prefix(metric_key_prefix, task),
                )
            metrics.update(output.metrics)
            rows, steps = rows + output.num_samples, steps + len(loader)
        if self.name_tasks:
            kinds = {name: spec.kind for name, spec in self.tasks.items() if name in datasets}
            metrics.update(summary_metrics(self.model, kinds, metrics, metric_key_prefix))
        metrics.update(speed_metrics(metric_key_prefix, start, num_samples=rows, num_steps=steps))
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def _task_datasets(self, eval_dataset) -> Mapping:
        datasets = self.eval_dataset if eval_dataset is None else eval_dataset
        if isinstance(datasets, Mapping):
            return datasets
        (task,) = self.tasks  # one dataset: the one task's
        return {task: datasets}

    def predict_task(self, task: str, dataset, metric_key_prefix: str = "test"):
        """``predict`` on one task's rows, with its metrics, named as the task's (``test_<task>_<metric>``)."""
        with self._metrics_of(task):
            return self.predict(dataset, metric_key_prefix=self.metric_prefix(metric_key_prefix, task))

    def predict(self, test_dataset, ignore_keys=None, metric_key_prefix: str = "test"):
        output = super().predict(test_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix)
        if not _sorts_evaluation(self.args, test_dataset):
            return output
        order = self._sorted_eval_sampler.order  # what _get_eval_sampler gave this prediction's dataloader
        return output._replace(
            predictions=restore_input_order(output.predictions, order),
            label_ids=restore_input_order(output.label_ids, order),
        )

    def _metrics_of(self, task: str):
        return _TaskMetrics(self, task) if self.scores_tasks else nullcontext()

    # -- optimisation ------------------------------------------------------------------------------------------

    def parameter_learning_rates(self, model) -> dict[int, float]:
        """id of a parameter -> its learning rate, for the parameters that may not train at ``args.learning_rate``:
        each task's pooler and head, label-token embeddings given a rate of their own, then what the training
        options give (options/: the backbone's layers under layer-wise decay, first_plus_rest's gate from its head's
        rate). The one place the optimizer's groups are decided."""
        rates: dict[int, float] = {}
        for name, spec in self.tasks.items():
            rate = spec.head_learning_rate
            rate = getattr(self.args, "head_learning_rate", None) if rate is None else rate
            if rate is not None:
                rates.update(dict.fromkeys(task_head_parameters(model, name), rate))
        label_rate = getattr(self.args, "label_embedding_learning_rate", None)
        if label_rate is not None:
            rates.update(dict.fromkeys(label_embedding_parameters(model), label_rate))
        head_rates = MappingProxyType(dict(rates))
        for option in TRAINING_OPTIONS.values():
            rates.update(option.learning_rates(model, self.args, head_rates))
        return rates

    def parameter_weight_decays(self, model) -> dict[int, float]:
        """id of a parameter -> its weight decay, for the decayed parameters that may not use ``args.weight_decay``:
        label-token embeddings given a weight decay of their own."""
        decay = getattr(self.args, "label_embedding_weight_decay", None)
        return {} if decay is None else dict.fromkeys(label_embedding_parameters(model), decay)

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


class _TaskMetrics:
    """For the ``with`` block: the Trainer's ``compute_metrics`` are the task's (read from its config when they run)."""

    def __init__(self, trainer: PooledTrainer, task: str):
        self.trainer, self.task = trainer, task

    def __enter__(self):
        trainer = self.trainer
        self.saved = trainer.compute_metrics
        kind = trainer.tasks[self.task].kind
        trainer.compute_metrics = task_metrics_function(trainer.model, self.task, kind)

    def __exit__(self, *exc):
        self.trainer.compute_metrics = self.saved


def rebatched(loader: DataLoader, batch_sampler) -> DataLoader:
    """A DataLoader like ``loader`` (its dataset, with the columns Trainer removed, its collator and every setting
    Trainer gave it: workers, pinned memory, persistent workers, prefetch, worker seeding), cutting its batches with
    ``batch_sampler``. Still to be prepared by the accelerator."""
    workers = loader.num_workers
    return DataLoader(
        loader.dataset,
        batch_sampler=batch_sampler,
        collate_fn=loader.collate_fn,
        num_workers=workers,
        pin_memory=loader.pin_memory,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context if workers else None,
        generator=loader.generator,
        prefetch_factor=loader.prefetch_factor if workers else None,
        persistent_workers=loader.persistent_workers if workers else False,
        pin_memory_device=loader.pin_memory_device,
        in_order=loader.in_order,
    )


def _forward_inputs(model) -> set[str]:
    """The names a model's forward takes, and the label columns a collator turns into ``labels``."""
    return set(inspect.signature(model.forward).parameters) | {"label", "labels", "label_ids", TASK_KEY}


def _random_states() -> tuple:
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None


def _restore_random_states(states: tuple) -> None:
    torch.set_rng_state(states[0])
    if states[1] is not None:
        torch.cuda.set_rng_state_all(states[1])


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

    def __init__(self, trainer: PooledTrainer):
        self.trainer = trainer

    def on_epoch_begin(self, args, state, control, **kwargs):
        sampler = self.trainer.task_sampler
        if sampler is not None:
            sampler.set_epoch(math.floor(state.epoch + 1e-9) if state.epoch else 0)
