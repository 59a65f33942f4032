"""Training pieces for train.py: a Trainer with a separate learning rate for the pooler and head, batches with little
padding, backbone freezing and early stopping."""

from __future__ import annotations

import logging
import warnings

from torch.utils.data import DataLoader, IterableDataset, SequentialSampler
from transformers import EarlyStoppingCallback, Trainer, TrainerCallback

from ..modeling.label_tokens import LabelEmbeddings
from ..modeling.modeling_pooled import PooledPreTrainedModel
from .arguments import given_label_embedding_options
from .batching import (
    LengthGroupedRowSampler,
    LengthSortedSampler,
    length_sorted_batches,
    restore_input_order,
    token_lengths,
)
from .errors import UsageError
from .label_smoothing import check_label_smoothing, smoothed_loss
from .learning_rates import layerwise_learning_rates
from .model_setup import backbone_of

logger = logging.getLogger(__name__)

__all__ = [
    "head_parameters",
    "freeze_backbone",
    "PooledTrainer",
    "callbacks_for",
    "check_training_options",
]

# ----------------------------------------------------------------------------------------------------
# Optimisation: head learning rate and a frozen backbone
# ----------------------------------------------------------------------------------------------------


def head_parameters(model) -> set[int]:
    """ids of the parameters that start from random weights: the pooler's and the classification head's (every
    head's, for a multi-task model).

    For another model (the sweep's vanilla baseline) they are the ones named in its
    ``newly_initialized_parameters``: those ``from_pretrained`` found no weights for.
    """
    if isinstance(model, PooledPreTrainedModel) and hasattr(model, "head_parameters"):
        return {id(parameter) for parameter in model.head_parameters()}
    new = set(getattr(model, "newly_initialized_parameters", ()))
    return {id(parameter) for name, parameter in model.named_parameters() if name in new}


def label_embedding_parameters(model) -> set[int]:
    """ids of the parameters of every label-token embedding module in ``model`` (PEFT's trained copies included)."""
    return {
        id(parameter)
        for module in model.modules()
        if isinstance(module, LabelEmbeddings)
        for parameter in module.parameters()
    }


def check_label_embedding_options(model, training_args) -> None:
    """A UsageError when a label-embedding setting is given to a model without label-token embeddings."""
    given = given_label_embedding_options(training_args)
    if given and not label_embedding_parameters(model):
        raise UsageError(
            f"{' and '.join(given)} set how the label-token embeddings train, but this model has none (they come "
            "with pooling='label_tokens'): leave them unset, or choose that pooling."
        )


def freeze_backbone(model) -> int:
    """Stop the backbone's gradients; returns the number of frozen parameters."""
    frozen = 0
    for parameter in backbone_of(model).parameters():
        parameter.requires_grad_(False)
        frozen += parameter.numel()
    return frozen


class PooledTrainer(Trainer):
    """A Trainer whose optimizer gives the pooler and head their own learning rate (``args.head_learning_rate``),
    and whose batches carry little padding.

    The pooler and head start from random weights while the backbone is pretrained, so the head usually wants a
    larger step than the backbone can take without forgetting. The scheduler scales both rates alike. With
    ``layerwise_lr_decay`` below 1 the backbone's layers get lower rates the nearer they are to the input
    (learning_rates.py); with ``label_smoothing_factor`` the training loss is smoothed for each kind of head
    (label_smoothing.py) instead of by Trainer's LabelSmoother, which suits single-label heads only.

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
        epsilon = self.args.label_smoothing_factor
        if not epsilon or not model.training or "labels" not in inputs:
            return super().compute_loss(
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )
        # The model checks the labels and computes its own loss, which a regression task keeps.
        outputs = model(**inputs)
        smoothed = smoothed_loss(self.accelerator.unwrap_model(model), inputs, outputs.logits, epsilon)
        loss = outputs.loss if smoothed is None else smoothed
        return (loss, outputs) if return_outputs else loss

    def _get_train_sampler(self, train_dataset=None):
        dataset = self.train_dataset if train_dataset is None else train_dataset
        if self.args.train_sampling_strategy != "group_by_length" or not _has_input_ids(dataset):
            return super()._get_train_sampler(train_dataset)
        # The lengths read column-wise (LengthGroupedSampler would read every row as a Python dict), and groups of 50
        # batches whatever the data's size (LengthGroupedSampler's quarter of the data leaves more padding).
        return LengthGroupedRowSampler(token_lengths(dataset), self.args.train_batch_size)

    def _get_eval_sampler(self, eval_dataset):
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
        """The backbone's rates under ``args.layerwise_lr_decay`` (none when it is 1.0: all at ``learning_rate``)."""
        decay = getattr(self.args, "layerwise_lr_decay", 1.0)
        if decay == 1.0:
            return {}
        return layerwise_learning_rates(backbone_of(model), self.args.learning_rate, decay)

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


# ----------------------------------------------------------------------------------------------------
# Callbacks and checkpoints
# ----------------------------------------------------------------------------------------------------


def check_training_options(model, training_args) -> None:
    """Refuse, before a run writes anything, training options the model cannot take (the Trainer would only find
    out once training starts)."""
    decay = getattr(training_args, "layerwise_lr_decay", 1.0)
    if decay != 1.0:  # a backbone whose layers cannot be found raises a UsageError
        layerwise_learning_rates(backbone_of(model), training_args.learning_rate, decay)
    check_label_embedding_options(model, training_args)
    unsmoothed = check_label_smoothing(model, training_args.label_smoothing_factor)
    if unsmoothed:
        logger.info(
            "Label smoothing applies to the classification tasks; the regression tasks (%s) keep their loss.",
            ", ".join(unsmoothed),
        )


def callbacks_for(training_args) -> list[TrainerCallback]:
    if training_args.early_stopping_patience is None:
        return []
    return [EarlyStoppingCallback(early_stopping_patience=training_args.early_stopping_patience)]
