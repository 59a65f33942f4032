"""The model arguments: the backbone, and every ``PooledConfig`` setting a run may choose, each a typed field with its
help text. ``tests/train/test_train_arguments.py`` fails when a ``PooledConfig`` setting has no argument here, or an
argument's default is not the config's (train.py's own defaults are named in ``TRAIN_PY_DEFAULTS``)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedConfig

from ...errors import UsageError
from ...modeling.configuration_pooled import PooledConfig
from ...modeling.registry import POOLINGS
from ..options import REMOVED_OPTIONS
from .defaults import (
    FEW_EXAMPLES_PER_LABEL,
    FEW_EXAMPLES_POOLING,
    LABEL_TOKEN_ATTENTION_DEFAULT,
    LABEL_TOKEN_LAYERS_DEFAULT,
    MULTI_LABEL_DEFAULT_LOSS,
    defaults_to,
)

__all__ = [
    "JSONValue",
    "PoolingChoices",
    "ModelArguments",
    "FROM_TRAINING_DATA",
    "TRAIN_PY_DEFAULTS",
    "parse_pos_weight",
    "pooled_config_fields",
    "chosen_model_settings",
]


class JSONValue:
    """argparse type of settings richer than a scalar or a list: the flag's text parsed as JSON (or kept as text)."""

    def __new__(cls, text: str) -> Any:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text


class PoolingChoices:
    """What ``--pooling`` takes: a registered pooling. Read when the flag is parsed, so that poolings registered
    after this import count too."""

    def __contains__(self, name: object) -> bool:
        return name in POOLINGS

    def __iter__(self):
        return iter(POOLINGS)


# --pos_weight auto: negatives / positives per label, counted on the training split.
FROM_TRAINING_DATA = "auto"


# Where train.py's default differs from PooledConfig's (docs/training.md, "Defaults"): the multi-label loss and the
# pooling are chosen once the problem type and the training set are known (plan.py, few_examples.py).
TRAIN_PY_DEFAULTS: dict[str, Any] = {"multi_label_loss": None, "pooling": None}
# PooledConfig settings that are no model flag: the run sets them (max_seq_length: the length it trained with, from
# the data flag --max_seq_length or the backbone's own; train/model.py; label text's seen-label margin: the config's
# default, or the data flag --seen_label_margin with a zero-shot file, zero_shot_eval.py).
RUN_DECIDED = ("max_seq_length", "label_text_seen_margin", "label_text_seen_ids")


def _setting(default: Any, help: str, **metadata: Any) -> Any:
    return field(default=default, metadata={"help": help, **metadata})


@dataclass
class ModelArguments:
    """The backbone, and every PooledConfig setting (pooling, head...) as its own argument."""

    _argument_group_name = "model: the backbone, and every PooledConfig setting (pooling, head)"

    model_name_or_path: str | None = _setting(
        None,
        "The backbone: a Hub id or a local folder of any model built into transformers (BERT, RoBERTa, ESM, DeBERTa, "
        "ModernBERT, ...). A folder saved by train.py continues from that pooled model.",
    )
    tokenizer_name: str | None = _setting(None, "Tokenizer to use, if not the one saved with the backbone.")
    model_revision: str | None = _setting(None, "Branch, tag or commit of a Hub backbone.")
    cache_dir: str | None = _setting(None, "Where downloaded backbones and datasets are cached.")
    pooling: str | None = _setting(
        None,
        "Name of a registered pooling strategy, e.g. cls, last_token, mean, max, min, mean_max, cls_mean_max, "
        "mean_sqrt_len, weighted_mean, gem, attention, concat_layers, weighted_layer, lstm, label_tokens, label_text. "
        f"train.py's default: {FEW_EXAMPLES_POOLING['pooling']} ({FEW_EXAMPLES_POOLING['label_text_scorer']} scorer) "
        f"for a new single-label model trained on at most {FEW_EXAMPLES_PER_LABEL} rows per label of labels named in "
        "words, else mean (measured: docs/label-text.md, Defaults).",
        choices=PoolingChoices(),
    )
    layer_start: int | None = _setting(
        None,
        "Layer strategies only. First entry of the backbone's hidden_states to use, indexed like a Python list (0 = "
        "embedding output, 1 = first layer, -1 = last layer). Defaults to the last 4 layers for concat_layers and to "
        "every layer (1) for weighted_layer and lstm.",
    )
    layer_token_pooling: str | None = _setting(
        None, "Layer strategies only. The token pooling applied to each selected layer. Defaults to cls."
    )
    lstm_hidden_size: int | None = _setting(
        None,
        "lstm only. Hidden size of the LSTM run over the layers. Defaults to the backbone's hidden size.",
    )
    attention_heads: int | None = _setting(
        None,
        "attention only (also as layer_token_pooling). Number of learned attention queries; their pooled vectors are "
        f"concatenated. {defaults_to('attention_heads')}",
    )
    attention_hidden_size: int | None = _setting(
        None, "attention only. Width of the tanh layer that scores the tokens. Defaults to the hidden size."
    )
    gem_p: float | None = _setting(
        None, f"gem only. Initial value of the learnable exponent. {defaults_to('gem_p')}"
    )
    label_token_init: str | None = _setting(
        None,
        "`label_tokens` only. Where each label's learned token starts: label_text (the mean embedding of the label "
        "name's tokens), cls (the CLS/BOS embedding), vocab_mean (the mean of all input embeddings) or random. "
        "Defaults to label_text.",
    )
    label_token_init_ids: JSONValue | None = _setting(
        None,
        "label_tokens with label_token_init label_text or cls: the token ids each label starts from, one list per "
        "label (JSON). train.py reads them with the backbone's tokenizer when they are not given.",
    )
    label_tokens_per_pass: int | None = _setting(
        None,
        "label_tokens only. How many label tokens go into one pass of the backbone; with more labels, the text is "
        "encoded once per group of labels. Defaults to every label while they take at most half of the positions.",
    )
    label_token_layers: JSONValue | None = _setting(
        None,
        "label_tokens only. How many of the backbone's top layers the label tokens join: 'all' (from the input), or "
        "an integer k, so that the text runs alone through the lower layers and the label tokens join the top k. "
        f"train.py's default: {LABEL_TOKEN_LAYERS_DEFAULT} where the backbone supports it (measured against 'all' on "
        "both benchmarks; docs/training.md, Defaults), 'all' elsewhere.",
    )
    label_token_attention: str | None = _setting(
        None,
        "label_tokens only. two_way: text and label tokens attend to each other; one_way: the label tokens attend to "
        f"the text, the text not to them. train.py's default: {LABEL_TOKEN_ATTENTION_DEFAULT!r} where the backbone "
        "supports it (measured against 'two_way' on both benchmarks; docs/training.md, Defaults), 'two_way' "
        "elsewhere.",
    )
    label_descriptions: JSONValue | None = _setting(
        None,
        "label_text only. The text a label is read as instead of its name: a JSON object, e.g. "
        '\'{"billing": "questions about invoices"}\', or the path of a file: .json holding that object, or .csv, .tsv '
        "or .jsonl with the columns label and description, one row per label. A value that starts with '{' is read "
        "as JSON, any other as a path, which must exist. Labels it does not describe are read as their names; a "
        "label the training data does not have is refused. Merged with label_description_column: a label both "
        "describe must get the same text from each.",
    )
    label_text_ids: JSONValue | None = _setting(
        None,
        "label_text only. Each label's text as token ids with the tokenizer's special tokens, one list per label "
        "(JSON). train.py reads them with the backbone's tokenizer from the label names (or label_descriptions) when "
        "they are not given.",
    )
    label_text_scorer: str | None = _setting(
        None,
        "label_text only. shared: one scorer for every label (the scaled cosine similarity of the text's vector and "
        "the label's), so that labels given as text at call time are scored too; per_label: that similarity plus "
        f"each label's own linear term, for the model's own labels. {defaults_to('label_text_scorer')}",
    )
    label_text_pooling: str | None = _setting(
        None,
        "label_text only. A label's vector: mean over its segment's final states, or its marker token's final "
        f"state. {defaults_to('label_text_pooling')}",
    )
    label_text_layers: JSONValue | None = _setting(
        None,
        "label_text only. In how many of the backbone's top layers the labels also attend to the text: 0 (never; "
        f"any backbone), an integer k, or 'all'. {defaults_to('label_text_layers')}",
    )
    classifier_head: str = _setting(
        "linear",
        "linear: dropout and a linear layer (BERT style). dense: dense, activation, dropout and an output projection "
        "(RoBERTa/ESM style).",
    )
    classifier_dropout: float | None = _setting(
        None,
        "Dropout before the output layer. Defaults to the backbone's classifier_dropout, else its "
        "hidden_dropout_prob, else 0.1.",
    )
    classifier_hidden_size: int | None = _setting(
        None, "dense head only. Width of the dense layer. Defaults to the backbone's hidden size."
    )
    classifier_activation: str | None = _setting(
        None,
        "dense head only. Activation after the dense layer, any name of transformers.activations.ACT2FN (tanh, gelu, "
        f"silu, relu, ...). {defaults_to('classifier_activation')}",
    )
    position_ids_from_mask: bool = _setting(
        True,
        "Derive the backbone's position ids from the attention mask, so a text gets the same positions (and output) "
        "whether it is padded on the left or on the right.",
    )
    packed_batches: bool = _setting(
        False,
        "Run the backbone on padding-free (packed) rows, each text with its own positions and attention, the outputs "
        "those of the padded batch. Needs position_ids_from_mask and a backbone that takes position ids and a "
        "prepared attention mask (not DeBERTa-v2 or ESM).",
    )
    multi_label_loss: str | None = _setting(
        None,
        "Multi-label only. bce (binary cross-entropy), focal (Lin et al. 2017) or asymmetric (Ridnik et al. 2021). "
        f"train.py's default: {MULTI_LABEL_DEFAULT_LOSS!r} for a multi-label run (measured on the debtags benchmark; "
        "docs/training.md, Defaults), left unset otherwise.",
    )
    focal_gamma: float | None = _setting(
        None,
        f"focal only. Focusing exponent: easy examples count (1 - p_t)^gamma. {defaults_to('focal_gamma')}",
    )
    asymmetric_gamma_neg: float | None = _setting(
        None, f"asymmetric only. Focusing exponent of the negatives. {defaults_to('asymmetric_gamma_neg')}"
    )
    asymmetric_gamma_pos: float | None = _setting(
        None, f"asymmetric only. Focusing exponent of the positives. {defaults_to('asymmetric_gamma_pos')}"
    )
    asymmetric_clip: float | None = _setting(
        None,
        f"asymmetric only. Negatives with a probability below it add no loss. {defaults_to('asymmetric_clip')}",
    )
    pos_weight: list[str] | None = _setting(
        None,
        "Multi-label only. Weight of the positive term of each label's loss. train.py: 'auto' computes it from the "
        "training split's labels (negatives / positives per label); or give one number per label (--pos_weight 1 "
        "4.5 2, or a JSON list).",
    )
    decision_threshold: JSONValue | None = _setting(
        None,
        "Multi-label only. The sigmoid score from which a label is predicted: one for every label or one per label "
        "(a JSON list). Unset: 0.5, or tuned on validation (tune_thresholds).",
    )
    initializer_range: float | None = _setting(
        None, "Standard deviation used to initialise the pooler and head. Defaults to the backbone's."
    )
    normalize_embeddings: bool = _setting(
        False,
        "Sentence embeddings: whether encode scales every vector to length 1 when its call does not say. The "
        "model's outputs (pooled vectors, logits) are never normalised.",
    )

    document_window: int | None = _setting(
        None,
        "Document mode (--document_mode): the tokens of one window, special tokens included; a text is read whole, "
        "in overlapping windows pooled across the document. At most what the backbone has positions for. train.py's "
        "default: the length the same run without document mode cuts texts at (--max_seq_length, else the backbone's "
        "limit; a sentence-transformers folder's max_seq_length set aside, as in a cut run).",
    )
    document_stride: int | None = _setting(
        None,
        "Document mode: the tokens consecutive windows share, from 0 to document_window - 1. Defaults to "
        "document_window // 8.",
    )
    document_pooling: str | None = _setting(
        None,
        "Document mode: how the windows' vectors become the document's: mean, max, attention (a learned "
        "weighting), transformer (a small transformer over the windows with their positions) or first_plus_rest "
        "(the first window plus the rest through a learned gate that starts at zero). Defaults to first_plus_rest.",
    )
    document_transformer_layers: int | None = _setting(
        None, "document_pooling transformer only. Its layers. Defaults to 2."
    )
    document_transformer_heads: int | None = _setting(
        None,
        "document_pooling transformer only. Its attention heads, a divisor of the window vectors' width. Unset: 64 "
        "dimensions per head where the width allows it.",
    )

    def __post_init__(self):
        self.pos_weight = parse_pos_weight(self.pos_weight)


def parse_pos_weight(value: Any) -> str | list[float] | None:
    """``pos_weight`` as a flag or a config file gives it: None, ``"auto"`` or one number per label.

    Accepted: ``--pos_weight auto``, ``--pos_weight 1 4.5 2``, ``--pos_weight '[1, 4.5, 2]'``, and in a config file
    ``pos_weight: auto`` or ``pos_weight: [1, 4.5, 2]``.
    """
    if value is None:
        return None
    items = [value] if isinstance(value, str) else list(value)
    if len(items) == 1 and isinstance(items[0], str):
        text = items[0].strip()
        if text == FROM_TRAINING_DATA:
            return FROM_TRAINING_DATA
        if text.startswith("["):
            try:
                items = json.loads(text)
            except json.JSONDecodeError:
                items = None
    try:
        numbers = [float(item) for item in items if not isinstance(item, bool)]
    except (TypeError, ValueError):
        numbers = []
    if not numbers or len(numbers) != len(items):
        raise UsageError(
            f"pos_weight must be '{FROM_TRAINING_DATA}' (negatives / positives per label in the training split) or "
            f"one number per label, got {value!r}."
        )
    return numbers


def pooled_config_fields(config_class: type = PooledConfig) -> list[dataclasses.Field]:
    """PooledConfig's own settings (pooling, head...), without the base config's and ``backbone_config``; the options
    removed in 0.3 stay config fields (saved models load) but are no longer train.py settings, and the run decides
    ``RUN_DECIDED`` itself."""
    skipped = {item.name for item in dataclasses.fields(PreTrainedConfig)} | {"backbone_config"}
    skipped |= set(REMOVED_OPTIONS) | set(RUN_DECIDED)
    return [item for item in dataclasses.fields(config_class) if item.init and item.name not in skipped]


def config_default(config_field: dataclasses.Field) -> Any:
    if config_field.default is not dataclasses.MISSING:
        return config_field.default
    if config_field.default_factory is not dataclasses.MISSING:
        return config_field.default_factory()
    return None


def chosen_model_settings(model_args: ModelArguments) -> dict[str, Any]:
    """The PooledConfig settings the user chose: those that differ from PooledConfig's own defaults (a setting left
    to train.py, TRAIN_PY_DEFAULTS, counts once it is given)."""
    chosen = {}
    for config_field in pooled_config_fields():
        value = getattr(model_args, config_field.name)
        if config_field.name in TRAIN_PY_DEFAULTS:
            # given, it is chosen even where it equals PooledConfig's default (--multi_label_loss bce)
            if value is not None:
                chosen[config_field.name] = value
            continue
        if value != config_default(config_field):
            chosen[config_field.name] = value
    return chosen
