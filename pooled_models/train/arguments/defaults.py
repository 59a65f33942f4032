"""train.py's own defaults where they differ from PooledConfig's and TrainingArguments', in one place that both the
code that applies them and ``--help`` read, so the two cannot disagree; and the defaults of the model's parts (a
pooling's, a head's, a loss's settings) as the registries give them, for the help of those settings."""

from __future__ import annotations

from typing import Any

from ...modeling.config_validation import CHOICES
from ...modeling.label_token_layers import ONE_WAY
from ...modeling.registry import LABEL_TOKEN_INITS

__all__ = [
    "SAMPLING_STRATEGIES",
    "DEFAULT_KEPT_COLUMN",
    "FEW_EXAMPLES_PER_LABEL",
    "FEW_EXAMPLES_POOLING",
    "MULTI_LABEL_DEFAULT_LOSS",
    "LABEL_TOKEN_LAYERS_DEFAULT",
    "LABEL_TOKEN_ATTENTION_DEFAULT",
    "ASYMMETRIC_UNTUNED_THRESHOLD",
    "part_default",
    "defaults_to",
]


# At most this many training rows per label (rows / labels) count as few examples: bench/labels.py measured the
# defaults below at 8 and 32 per label (fortunes' full split, 36 per label, and the README quickstart's 100 keep the
# others).
FEW_EXAMPLES_PER_LABEL = 32


# What a single-label run with few examples per label reads its labels as, when it names no pooling: each label's name
# in the input, scored by the shared similarity plus a term of its own. On fortunes with 8 examples per label it beat
# mean pooling trained as long (docs/label-text.md, "Defaults"); multi-label runs keep mean pooling, which won on debtags.
FEW_EXAMPLES_POOLING = {"pooling": "label_text", "label_text_scorer": "per_label"}


# The loss of a multi-label run that asks for none. On the debtags benchmark (bench/multilabel_defaults.py) the
# asymmetric loss beat BCE by 0.03 micro-F1 and 0.10 macro-F1: most (text, label) pairs are easy negatives, which
# it stops counting, so the rare positives are not drowned out.
MULTI_LABEL_DEFAULT_LOSS = "asymmetric"


# The top layers label tokens join when a run does not say. On the benchmarks (bench/label_token_layers.py, 3 seeds)
# the top 2 layers beat full insertion by 0.074 macro-F1 on fortunes and 0.021 micro-F1 on debtags in 0.65x its
# training time; full insertion stays PooledConfig's default (what checkpoints without the setting were trained with).
LABEL_TOKEN_LAYERS_DEFAULT = 2


# How text and label tokens attend when a run does not say (bench/recipes.py, 3 seeds; README, "Label tokens against
# mean pooling"): one-way, where the backbone runs it; PooledConfig keeps "two_way", what older checkpoints ran.
LABEL_TOKEN_ATTENTION_DEFAULT = ONE_WAY


# The decision threshold of a new asymmetric-loss head that nobody sets and nothing tunes (no validation data). The loss
# barely counts a negative the model gives 0.5 (its weight is p ** 4), so 0.5 lets through many false positives: on
# debtags every threshold tuned on validation data came out between 0.67 and 0.77 (bench/labels.py, full and
# zero-shot runs), and with 8 examples per label 0.7 instead of 0.5 gains 0.1 micro-F1 (docs/label-text.md, "Defaults").
ASYMMETRIC_UNTUNED_THRESHOLD = 0.7


def part_default(option: str) -> Any:
    """The default a registered part (pooling, head, loss, label-token start) gives ``option``, when it is a
    constant; a KeyError when no part has one (or parts disagree)."""
    found = {
        repr(default): default
        for registry in (*CHOICES, LABEL_TOKEN_INITS)
        for name in registry
        for key, default in registry.lookup(name).config_options.items()
        if key == option and default is not None and not callable(default)
    }
    if len(found) != 1:
        raise KeyError(f"{option}: {len(found)} constant defaults among the registered parts")
    return next(iter(found.values()))


def defaults_to(option: str) -> str:
    """``Defaults to 3.0.``: the sentence that ends the help of a part's setting, from the part's own default."""
    return f"Defaults to {part_default(option)}."


# The test file's column carried into predictions.jsonl without being named (--keep_columns names others).
DEFAULT_KEPT_COLUMN = "id"

# How a multi-task run draws its next batch's task (--task_sampling; data/multitask.py).
SAMPLING_STRATEGIES = ("proportional", "temperature", "round_robin")
