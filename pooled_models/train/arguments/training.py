"""The training arguments: transformers' ``TrainingArguments`` with train.py's defaults (measured where they differ)
and its additions (the head's learning rate, length-sorted evaluation, freezing, the training options, early
stopping, staging, threshold tuning, task sampling), checked where a config file's value bypasses argparse."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from transformers import TrainingArguments

from ...errors import UsageError
from ...thresholds import AVERAGES, DEFAULT_THRESHOLD
from ..options import TRAINING_OPTIONS, require_number
from .defaults import ASYMMETRIC_UNTUNED_THRESHOLD, FEW_EXAMPLES_PER_LABEL, SAMPLING_STRATEGIES
from .documents import DocumentArguments, check_document_arguments
from .speed import SpeedArguments, check_speed_arguments

__all__ = [
    "PooledTrainingArguments",
    "THRESHOLD_TUNING",
    "HEAD_LEARNING_RATE",
    "NUM_TRAIN_EPOCHS",
    "LEARNING_RATE",
    "FEW_EXAMPLES_LEARNING_RATE",
    "MIN_TRAIN_STEPS",
    "MAX_DEFAULT_EPOCHS",
    "TRAIN_BATCH_SIZE",
    "ACCELERATOR_LOADER_WORKERS",
    "uses_an_accelerator",
    "SAMPLING_STRATEGIES",
]


# --tune_thresholds: how train.py chooses the multi-label decision threshold(s) on the validation split.
THRESHOLD_TUNING = ("auto", "global", "per_label", "none")


# train.py's optimisation defaults where they differ from TrainingArguments' (docs/training.md, "Defaults"). The head learning
# rate (bench/recipes.py, 3 seeds): on fortunes 5e-3 gains 4.8 points of macro-F1 over 1e-3 (2e-3: 2.6); on debtags
# it costs 0.6 of micro-F1 against 1e-3 (0.9 against 2e-3) and gains 3.0 of macro-F1. It is the rate that beats the
# 30-line recipe (whose head trains at 2e-3) on both.
HEAD_LEARNING_RATE = 5e-3


LEARNING_RATE = 5e-5
# The backbone's rate on few examples per label: with the epochs raised for them, 1e-4 beat 5e-5 by 0.02-0.03 on
# fortunes and debtags at 8 examples per label (bench/labels.py; docs/label-text.md, "Defaults").
FEW_EXAMPLES_LEARNING_RATE = 1e-4


NUM_TRAIN_EPOCHS = 4.0
# A small training set gets more passes, so that the run takes at least this many optimisation steps: at 4 epochs, 8
# examples per label is 11-14 steps an epoch, too few for the head to leave its random start (bench/labels.py, shot8:
# +0.09 accuracy on fortunes and +0.06 micro-F1 on debtags; docs/label-text.md, "Defaults").
MIN_TRAIN_STEPS = 250
MAX_DEFAULT_EPOCHS = 32


TRAIN_BATCH_SIZE = 16


# DataLoader worker processes on an accelerator, so that the next batches are collated and pinned while the device
# computes (the main process then only launches the step). 0 on the CPU, whose cores compute the step.
ACCELERATOR_LOADER_WORKERS = 2


@dataclass
class PooledTrainingArguments(DocumentArguments, SpeedArguments, TrainingArguments):
    _argument_group_name = (
        "training: transformers' TrainingArguments, with pooled_models' defaults and additions"
    )

    # head_learning_rate and num_train_epochs were measured (bench/recipes.py, bench/multilabel_defaults.py;
    # docs/training.md, "Defaults"); the batch size, warmup and weight decay are the usual fine-tuning recipe.
    # output_dir has no default, so a run never writes into a folder nobody asked for.
    learning_rate: float | None = field(
        default=None,
        metadata={
            "help": f"Learning rate of the backbone. Default: {LEARNING_RATE:g}, or {FEW_EXAMPLES_LEARNING_RATE:g} "
            f"on a training set of few examples per label (at most {FEW_EXAMPLES_PER_LABEL} rows per label)."
        },
    )
    head_learning_rate: float | None = field(
        default=HEAD_LEARNING_RATE,
        metadata={
            "help": "Learning rate of the pooler and head, which start from random weights and so need larger "
            "steps than the pretrained backbone."
        },
    )
    label_embedding_learning_rate: float | None = field(
        default=None,
        metadata={
            "help": "pooling='label_tokens': learning rate of the label embeddings (the label tokens' input vectors). "
            "Unset: head_learning_rate, as the rest of the pooler."
        },
    )
    label_embedding_weight_decay: float | None = field(
        default=None,
        metadata={
            "help": "pooling='label_tokens': weight decay of the label embeddings. Unset: weight_decay."
        },
    )
    num_train_epochs: float | None = field(
        default=None,
        metadata={
            "help": f"Number of passes over the training data. Default: {NUM_TRAIN_EPOCHS:g}, or more on a training set "
            f"of few examples per label (at most {FEW_EXAMPLES_PER_LABEL} rows per label), so that the run takes at least {MIN_TRAIN_STEPS} optimisation steps (at most "
            f"{MAX_DEFAULT_EPOCHS} epochs)."
        },
    )
    per_device_train_batch_size: int = field(
        default=TRAIN_BATCH_SIZE, metadata={"help": "Training batch size per process."}
    )
    warmup_steps: float = field(
        default=0.1,
        metadata={"help": "Linear warmup: a number of steps, or a fraction of all steps when below 1."},
    )
    weight_decay: float = field(
        default=0.01, metadata={"help": "AdamW weight decay (not on biases and norms)."}
    )
    # Measured in bench/throughput.py (docs/performance.md, "Speed"): on texts of mixed length most positions of a random batch are
    # padding, which the backbone computes like real tokens.
    train_sampling_strategy: str = field(
        default="group_by_length",
        metadata={
            "help": "Sampler for training: 'group_by_length' (batches of texts of similar length, random between "
            "groups: little padding), 'random' (transformers' default), 'sequential' or 'batch_rebalance'.",
            "choices": ["group_by_length", "random", "sequential", "batch_rebalance"],
        },
    )
    length_sorted_eval: bool = field(
        default=True,
        metadata={
            "help": "Evaluate and predict in batches sorted by length (little padding); predictions are written in "
            "the input's order either way."
        },
    )
    freeze_backbone: bool = field(default=False, metadata={"help": "Train only the pooler and head."})
    layerwise_lr_decay: float = field(
        default=1.0,
        metadata={
            "help": "Layer-wise learning-rate decay, in (0, 1]: backbone layer i of L trains at learning_rate x "
            "decay^(L-1-i) (the top layer at learning_rate), the embeddings at learning_rate x decay^L, and the "
            "pooler and head at head_learning_rate, so that the layers nearest the input, which hold the most "
            "general features, change least. 1.0: off (one learning rate for the whole backbone)."
        },
    )
    label_smoothing_factor: float = field(
        default=0.0,
        metadata={
            "help": "Label smoothing epsilon, in [0, 1): single-label and token classification train on "
            "cross-entropy against 1 - epsilon on the true class plus epsilon spread over all classes; multi-label "
            "runs train their multi-label loss on targets y * (1 - epsilon) + epsilon / 2. Only the training loss "
            "is smoothed. Refused for regression; a multi-task run's regression tasks keep their loss. 0: off."
        },
    )
    early_stopping_patience: int | None = field(
        default=None,
        metadata={
            "help": "Stop after this many evaluations without improvement of metric_for_best_model, and keep the "
            "best model (turns on load_best_model_at_end)."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Replace an existing output_dir (only once the new run has succeeded)."},
    )
    keep_checkpoints: bool = field(
        default=False,
        metadata={
            "help": "Keep the checkpoint-* folders (optimizer state, for resuming) in the finished output_dir."
        },
    )
    eval_strategy: str = field(
        default="auto",
        metadata={
            "help": "When to evaluate during training: 'no', 'steps', 'epoch', or 'auto': every epoch with --do_eval."
        },
    )
    save_strategy: str = field(
        default="auto",
        metadata={
            "help": "When to save a checkpoint: 'no', 'steps', 'epoch', 'best', or 'auto': like eval_strategy "
            "when evaluating, else every epoch."
        },
    )
    save_total_limit: int | None = field(
        default=2, metadata={"help": "Keep at most this many checkpoints (the best one is always kept)."}
    )
    logging_steps: float = field(default=50, metadata={"help": "Log the training loss every N steps."})
    log_level: str = field(
        default="passive",
        metadata={
            "help": "What a run prints. 'passive' (the default), 'warning', 'error', 'critical': what was read and "
            "built, one progress bar per phase, the metrics and where the model went, with the libraries' warnings. "
            "'info' or 'debug': also the libraries' logs (transformers, accelerate, datasets), transformers' own "
            "progress bars and its metrics dumps, as transformers' examples print them.",
            "choices": ["debug", "info", "warning", "error", "critical", "passive"],
        },
    )
    dataloader_pin_memory: bool | None = field(
        default=None,
        metadata={
            "help": "Pin the batches' memory for a faster copy to the accelerator. Default: on where an accelerator "
            "is used, off on the CPU (where pinning does nothing but warn)."
        },
    )
    dataloader_num_workers: int | None = field(
        default=None,
        metadata={
            "help": "Worker processes that collate the batches. Default: "
            f"{ACCELERATOR_LOADER_WORKERS} where an accelerator is used (the next batches are ready while the device "
            "computes), 0 on the CPU (the main process; its cores compute the step)."
        },
    )
    logging_nan_inf_filter: bool = field(
        default=False,
        metadata={
            "help": "transformers' filter: check every step's loss on the host and log the others' average in place "
            "of a nan/inf one (two host synchronisations a step, which a GPU waits for). Off by default: train.py "
            "checks the loss where it is logged and stops the run at a nan/inf loss, naming the step and its "
            "batch's rows."
        },
    )
    tune_thresholds: Literal["auto", "global", "per_label", "none"] = field(
        default="auto",
        metadata={
            "help": "Multi-label: after training, choose the decision threshold that maximises F1 on the validation "
            "split and save it in config.json. 'global': one for every label; 'per_label': one per label; 'none': "
            f"keep decision_threshold ({DEFAULT_THRESHOLD} unless set); 'auto': global when a multi-label run trains "
            "with validation data and decision_threshold is not set, else none, with "
            f"{ASYMMETRIC_UNTUNED_THRESHOLD} for a new asymmetric-loss head ({DEFAULT_THRESHOLD} lets "
            "through many false positives of that loss)."
        },
    )
    threshold_average: Literal["micro", "macro"] = field(
        default="micro", metadata={"help": "The F1 that tune_thresholds maximises: micro- or macro-averaged."}
    )
    task_sampling: Literal["proportional", "temperature", "round_robin"] = field(
        default="proportional",
        metadata={
            "help": "Multi-task: which task each batch comes from. 'proportional': by task size (an epoch is one "
            "pass over every task); 'temperature': by size ** sampling_alpha; 'round_robin': the tasks take turns."
        },
    )
    sampling_alpha: float = field(
        default=0.5,
        metadata={
            "help": "Multi-task, task_sampling temperature: the exponent of the task sizes (1 = proportional, 0 = uniform)."
        },
    )

    def __post_init__(self):
        if self.output_dir is None:
            raise UsageError("output_dir is required: the folder the trained model is saved in.")
        # A config file's values bypass argparse's choices.
        for name, valid in (
            ("tune_thresholds", THRESHOLD_TUNING),
            ("threshold_average", AVERAGES),
            ("task_sampling", SAMPLING_STRATEGIES),
        ):
            if getattr(self, name) not in valid:
                raise UsageError(
                    f"Unknown {name} {getattr(self, name)!r}. Valid choices: {', '.join(valid)}."
                )
        if (
            isinstance(self.sampling_alpha, bool)
            or not isinstance(self.sampling_alpha, (int, float))
            or self.sampling_alpha < 0
        ):
            raise UsageError(f"sampling_alpha must be a number >= 0, got {self.sampling_alpha!r}.")
        for name in ("head_learning_rate", "label_embedding_learning_rate", "label_embedding_weight_decay"):
            if getattr(self, name) is not None:
                require_number(name, getattr(self, name), lambda value: value >= 0, ">= 0 (or unset)")
        for option in TRAINING_OPTIONS.values():
            option.check_arguments(self)
        check_speed_arguments(self)
        check_document_arguments(self)
        if self.early_stopping_patience is not None:
            if self.early_stopping_patience < 1:
                raise UsageError(f"early_stopping_patience must be >= 1, got {self.early_stopping_patience}.")
            self.load_best_model_at_end = True
        if self.eval_strategy == "auto":
            self.eval_strategy = "epoch" if self.do_eval else "no"
        if self.save_strategy == "auto":
            evaluating = self.eval_strategy != "no"  # IntervalStrategy is a str enum: this holds for both
            self.save_strategy = (
                str(getattr(self.eval_strategy, "value", self.eval_strategy)) if evaluating else "epoch"
            )
        # Left unset, the backbone's learning rate is chosen once the training set's size is known (few_examples.py).
        self.learning_rate_chosen = self.learning_rate is not None
        if self.learning_rate is None:
            self.learning_rate = LEARNING_RATE
        # Left unset, the number of epochs is chosen once the training set's size is known (plan.default_epochs).
        self.epochs_chosen = self.num_train_epochs is not None
        if self.num_train_epochs is None:
            self.num_train_epochs = NUM_TRAIN_EPOCHS
        # Left unset, the best-model metric is chosen once the problem type is known (training.BEST_MODEL_METRIC).
        self.best_metric_chosen = self.metric_for_best_model is not None
        if _launched_on_several_cpu_processes():
            # TrainingArguments only sets up CPU data parallelism (gloo) when asked to use the CPU; without it every
            # process launched by `accelerate launch --multi_gpu` on a machine without GPUs trains alone.
            self.use_cpu = True
        self._device_defaults()
        super().__post_init__()

    def _device_defaults(self) -> None:
        """The loader settings left unset, for the device the run computes on."""
        accelerator = uses_an_accelerator(self.use_cpu)
        if self.dataloader_pin_memory is None:
            self.dataloader_pin_memory = accelerator
        if self.dataloader_num_workers is None:
            self.dataloader_num_workers = ACCELERATOR_LOADER_WORKERS if accelerator else 0
        if self.accelerator_config is None and self.dataloader_pin_memory:
            # Pinned batches copied to the device without waiting for it (accelerate's non_blocking, which it
            # advises with pinned memory): a blocking copy is a host synchronisation per tensor per step
            # (bench/gpu.py counted about four per step).
            self.accelerator_config = {"non_blocking": True}


def uses_an_accelerator(use_cpu: bool) -> bool:
    """Whether the run computes on an accelerator (pinned memory then speeds the copies): not with use_cpu, nor
    where torch sees none."""
    import torch

    return not use_cpu and torch.accelerator.is_available()


def _launched_on_several_cpu_processes() -> bool:
    import torch

    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.accelerator.is_available()
