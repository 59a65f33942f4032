"""The optional training techniques train.py keeps, registered by name as poolings are, the options it removed, and
the parameter groups they and the Trainer share (head, label embeddings, backbone).

An option is one module here: a :class:`TrainingOption` subclass with its argument check, the rule that does the
work (a parameter-group learning rate, or a training loss), and the line it adds to the model card, registered with
:func:`register_option`. The command line, the Trainer and the card ask :data:`TRAINING_OPTIONS`; nothing else names
an option. Adding one is one module in this folder (imported when this package is) plus its test.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Mapping
from typing import Any

from ...errors import UsageError
from ...modeling.label_tokens import LabelEmbeddings
from ...modeling.modeling_pooled import PooledPreTrainedModel

__all__ = [
    "backbone_of",
    "head_parameters",
    "task_head_parameters",
    "label_embedding_parameters",
    "given_label_embedding_options",
    "check_label_embedding_options",
    "TrainingOption",
    "TRAINING_OPTIONS",
    "register_option",
    "require_number",
    "REMOVED_IN",
    "REMOVED_OPTIONS",
    "AUTO_POOLING",
    "REMOVED_VALUES",
    "refuse_removed_options",
    "removed_value_message",
]


class TrainingOption:
    """One optional technique, off by default. ``name`` is its training argument (a field of
    ``cli.PooledTrainingArguments``, or of transformers' ``TrainingArguments``)."""

    name: str = ""
    card_label: str = ""  # the row the model card gives it in "Training settings"
    # On, the Trainer computes the loss itself and offers it to training_loss (trainer.py, _loss). False: the option
    # leaves Trainer's own loss path alone (a rate rule that joined later, so that its runs train as before).
    offers_loss: bool = True

    def is_on(self, args) -> bool:
        raise NotImplementedError

    def check_arguments(self, args) -> None:
        """Refuse a value out of range (a config file's value bypasses argparse's type)."""

    def check_model(self, model, args) -> None:
        """Refuse, before the run writes anything, a model the option cannot apply to."""

    def learning_rates(self, model, args, head_rates: Mapping[int, float]) -> dict[int, float]:
        """id of a parameter -> its learning rate, for the parameters this option gives their own. ``head_rates``: the
        rates the run gave each task's pooler and head and the label-token embeddings (a parameter missing trains at
        ``args.learning_rate``), which an option's rule may start from; the option's rates are laid over them."""
        return {}

    def training_loss(self, model, inputs, outputs, args):
        """The training loss this option computes instead of the model's, or None to keep the model's."""
        return None

    def card_row(self, args, model=None, optimizer=None) -> dict[str, Any]:
        """The option's row of the card's training settings. ``model`` and ``optimizer``: the trained model and the
        optimizer it trained with (None where the run did not train), for a row that gives what training used."""
        return {self.card_label: getattr(args, self.name)} if self.is_on(args) else {}


TRAINING_OPTIONS: dict[str, TrainingOption] = {}


def register_option(cls: type[TrainingOption]) -> type[TrainingOption]:
    if not cls.name or cls.name in TRAINING_OPTIONS:
        raise ValueError(f"A training option needs a name of its own, got {cls.name!r}.")
    TRAINING_OPTIONS[cls.name] = cls()
    return cls


def require_number(name: str, value: Any, valid, valid_range: str) -> None:
    """Refuse a setting that is not a number in its range (a config file's value bypasses argparse's type)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not valid(value):
        raise UsageError(f"{name} must be a number {valid_range}, got {value!r}.")


# Options removed in 0.3, each after it lost on the project's own benchmarks (bench/recipes.py, 3 seeds; the results
# stay in bench/results/recipes): name -> what it measured and what to do instead. The CLI refuses each one, from the
# command line and from a config file, with this text. The three model settings among them stay PooledConfig fields,
# so a saved model that records them still loads and predicts; train.py no longer sets them.
REMOVED_IN = "0.3"


REMOVED_OPTIONS = {
    "ema_decay": "an exponential moving average of the weights measured -1.2 macro-F1 on fortunes. Train without it: "
    "the last weights (or, with --load_best_model_at_end, the best checkpoint's) are saved",
    "linear_probe_epochs": "LP-FT (the pooler and head alone first) measured -0.4 macro-F1 on fortunes. Train "
    "everything from the start: --head_learning_rate already gives the new head its larger steps",
    "auto_poolings": "--pooling auto measured -1.1 macro-F1 on fortunes at 1.3x the training time. Compare poolings "
    "with pooled-sweep (sweep.py) and pass the winner as --pooling",
    "auto_pooling_budget": "--pooling auto measured -1.1 macro-F1 on fortunes at 1.3x the training time. Compare "
    "poolings with pooled-sweep (sweep.py) and pass the winner as --pooling",
    "classifier_dropout_samples": "multi-sample dropout in the head measured -0.7 macro-F1 on fortunes. Leave it out "
    "(one dropout sample, classifier_dropout as usual); saved models that use it still load",
    "label_token_scorer": "the 'shared' label-token scorer measured 0.44 against 0.54 for 'per_label' (fortunes "
    "macro-F1). Leave it out: label tokens score with 'per_label'; saved models that use 'shared' still load",
    "label_token_position": "label tokens after the text measured -2.7 macro-F1 on fortunes. Leave it out: label "
    "tokens go before the text; saved models that put them after still load",
}


# --pooling auto: the value, refused the same way.
AUTO_POOLING = "auto"


REMOVED_POOLING_AUTO = REMOVED_OPTIONS["auto_poolings"]

# Values removed from settings that stay: setting -> (the value, when it went, why and what to do instead). The CLI
# refuses each one, from the command line and from a config file, with this text.
REMOVED_VALUES = {
    "pooling": (AUTO_POOLING, f"in pooled_models {REMOVED_IN}", REMOVED_POOLING_AUTO),
    "document_mode": (
        "auto",
        "after pooled_models 0.7.1",
        "its threshold (document mode from 10% of the training texts longer than one window) was never measured to "
        "gain. Valid choices: true (read every text whole, in windows), false (cut texts at the run's length, the "
        "default)",
    ),
}


def removed_option_message(name: str, source: str) -> str:
    return (
        f"{source} sets {name!r}, which was removed in pooled_models {REMOVED_IN}: {REMOVED_OPTIONS[name]}."
    )


def refuse_removed_options(values: dict[str, Any], source: str) -> None:
    """A UsageError naming the first removed option (or removed value: ``pooling: auto``) that ``values`` sets."""
    for key in values:
        name = key.lstrip("-").replace("-", "_").split("=")[0]
        if name in REMOVED_OPTIONS:
            raise UsageError(removed_option_message(name, source))
        if name in REMOVED_VALUES and _names_value(key, values[key], REMOVED_VALUES[name][0]):
            raise UsageError(removed_value_message(name, source))


def removed_value_message(name: str, source: str) -> str:
    value, when, why = REMOVED_VALUES[name]
    return f"{source} sets {name} {value!r}, which was removed {when}: {why}."


def _names_value(key: str, value: Any, removed: str) -> bool:
    return value == removed or key.endswith(f"={removed}")


# The parameter groups' shared pieces (which parameters are the head, which are label-token embeddings, which
# module is the backbone): the Trainer's optimizer and the options' rate rules read them.
# Training settings of the label-token embeddings (unset: the pooler's and head's rate, the run's weight decay).
LABEL_EMBEDDING_OPTIONS = ("label_embedding_learning_rate", "label_embedding_weight_decay")


def given_label_embedding_options(training_args) -> list[str]:
    """The label-embedding settings a run gives (LABEL_EMBEDDING_OPTIONS that are set)."""
    return [name for name in LABEL_EMBEDDING_OPTIONS if getattr(training_args, name, None) is not None]


logger = logging.getLogger(__name__)


def backbone_of(model):
    """The encoder of a pooled model, or of any other Transformers model (the sweep's vanilla baseline)."""
    return model.get_backbone() if isinstance(model, PooledPreTrainedModel) else model.base_model


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


def task_head_parameters(model, task: str) -> set[int]:
    """ids of the parameters of one task's head: that task's pooler and head in a multi-task model, the whole head of
    a single-task one (or of the sweep's vanilla model)."""
    if hasattr(model, "task_configs"):
        return {id(parameter) for parameter in model.head_parameters(task)}
    return head_parameters(model)


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


def _register_every_option() -> None:
    """Import every module of this folder: each registers its option. Adding an option is adding its module; the
    modules import this one, so this one names none of them (no import cycle)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


_register_every_option()
