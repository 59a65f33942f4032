"""PooledConfig: a backbone's config nested inside, plus the pooling and head settings, validated.

The config holds data, as transformers' own configs do: typed fields (``@strict`` refuses a value of the wrong type,
or a name no registry holds, when it is set), and one validation of the rules that span fields (``_validate``, in
``config_validation.py``): the settings of parts other than the chosen ones are refused, those of the chosen parts
are filled with their defaults and checked. Which settings were edited since the last validation (``config.x = y``,
or ``from_pretrained(folder, x=y)``, which transformers applies with ``setattr`` after building the config) is read
from a snapshot of the settings as last validated, so that an edit is validated when a model is built from the
config, runs or is saved, and a setting that the edit left behind (of a pooling no longer chosen) is dropped rather
than refused. Loading a config reads no tokenizer: the one setting that needs one (the token ids label tokens start
from) is resolved when a model is built.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers (and its huggingface_hub) and its sibling model files.
"""

import copy
import dataclasses
import os
import shutil
from typing import Any, ClassVar, Literal

from huggingface_hub.dataclasses import strict, validated_field
from transformers.configuration_utils import PreTrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

# The parts a config chooses among register themselves where they are defined; these modules are imported here so
# that the registries are complete wherever the config is loaded, a trust_remote_code copy included (transformers
# copies the files a module imports with "from .module import").
from .compat import BACKBONE_SUB_CONFIGS, backbone_sub_config_defaults, default_backbone_config
from .config_validation import CHOICES, SettingsValidation
from .document_settings import document_structure, reads_documents
from .engines import refuse_engine_without_plugin
from .heads import HEADS
from .label_text import LabelTextPooler  # noqa: F401  (registers pooling "label_text")
from .label_text_margin import stated_before_the_margin
from .label_tokens import LABEL_TOKEN_INITS  # also registers pooling "label_tokens"
from .layer_pooling import LayerPooler  # noqa: F401  (registers the layer strategies)
from .losses import MULTI_LABEL_LOSSES
from .pipeline_reference import custom_pipelines, keeps_custom_pipelines, pipeline_files
from .pooling import POOLINGS
from .registry import Registry
from .text_config import TextConfigSizes
from .window_pooling import WINDOW_POOLINGS

__all__ = ["PooledConfig", "CHOICES", "SETTINGS", "LOAD_TIME_SETTINGS"]

# Settings every head's module reads once, when it is built (besides the chosen parts' own): a built model cannot follow
# a change of them, so structure() lists them.
BUILT_WITH = ("classifier_dropout_samples",)
# Settings read only when a module's parameters are initialised: a built model has no use for them, so they shape
# nothing (structure() leaves them out) and a change of them takes effect at the next initialisation (re-heading).
INITIALISATION_ONLY = ("label_token_init", "label_token_init_ids")
# Pooler settings read at each call, not when a module is built: a built model follows their edits (structure() leaves
# them out). Label text's seen-label margin (label_text_margin.py).
READ_AT_EACH_CALL = ("label_text_seen_margin", "label_text_seen_ids")

# Keys that make transformers import and run code named by a config. A backbone config nested in ours is
# always built from transformers' own classes, so none of them is ever kept.
CODE_REFERENCE_KEYS = ("auto_map", "trust_remote_code", "custom_pipelines")


def registered(registry: Registry, default: str | None):
    """A field whose value names a part of ``registry``: an unknown name is refused when it is set (``@strict`` runs
    the check on every assignment), with the valid choices."""

    def known(value: Any) -> None:
        if value is not None:
            registry.lookup(value)

    return validated_field(known, default=default)


@strict
class PooledConfig(SettingsValidation, TextConfigSizes, PreTrainedConfig):
    r"""
    Configuration of [`PooledModel`] and [`PooledForSequenceClassification`]: any Transformers encoder (or
    decoder) as the backbone, a pooling strategy on top of its hidden states and a classification head.

    Args:
        backbone_config (`dict` or `PreTrainedConfig`, *optional*):
            The backbone's configuration, of any model type built into Transformers (`bert`, `roberta`, `esm`,
            `deberta-v2`, `modernbert`, `gpt2`, `llama`, ...). A dict must hold its `model_type`. Defaults to a
            BERT-base configuration. Code references (`auto_map`, `trust_remote_code`) are removed from it.
        pooling (`str`, *optional*, defaults to `"mean"`):
            Name of a registered pooling strategy, e.g. `cls`, `last_token`, `mean`, `max`, `min`, `mean_max`,
            `cls_mean_max`, `mean_sqrt_len`, `weighted_mean`, `gem`, `attention`, `concat_layers`,
            `weighted_layer`, `lstm`. See `pooled_models.POOLERS` for the full list.
        layer_start (`int`, *optional*):
            Layer strategies only. First entry of the backbone's `hidden_states` to use, indexed like a Python
            list (0 = embedding output, 1 = first layer, -1 = last layer). Defaults to the last 4 layers for
            `concat_layers` and to every layer (1) for `weighted_layer` and `lstm`.
        layer_token_pooling (`str`, *optional*):
            Layer strategies only. The token pooling applied to each selected layer. Defaults to `"cls"`.
        lstm_hidden_size (`int`, *optional*):
            `lstm` only. Hidden size of the LSTM run over the layers. Defaults to the backbone's hidden size.
        attention_heads (`int`, *optional*):
            `attention` only (also as `layer_token_pooling`). Number of learned attention queries; their
            pooled vectors are concatenated. Defaults to 1.
        attention_hidden_size (`int`, *optional*):
            `attention` only. Width of the tanh layer that scores the tokens. Defaults to the hidden size.
        gem_p (`float`, *optional*):
            `gem` only. Initial value of the learnable exponent. Defaults to 3.0.
        label_token_init (`str`, *optional*):
            `label_tokens` only. Where each label's learned token starts: `"label_text"` (the mean embedding of
            the label name's tokens), `"cls"` (the CLS/BOS embedding), `"vocab_mean"` (the mean of all input
            embeddings) or `"random"`. See `pooled_models.LABEL_TOKEN_INITS`. Defaults to `"label_text"`.
        label_token_init_ids (`list[list[int]]`, *optional*):
            `label_tokens` with `label_token_init="label_text"` or `"cls"`: the token ids each label starts from,
            one list per label. `from_backbone` reads them with the backbone's tokenizer. Without them (a model
            built from its config alone, new labels of a re-headed model with no tokenizer saved) the label
            tokens start from the mean input embedding, as `"vocab_mean"`, with a warning.
        label_token_scorer (`str`, *optional*):
            `label_tokens` only. `"per_label"`: each label has its own weight vector and bias over its token's
            final state; `"shared"`: one vector scores every label's token. Defaults to `"per_label"`.
        label_token_position (`int`, *optional*):
            `label_tokens` only. Where the label tokens go: after this many leading tokens of the text (1: right
            after `[CLS]`/`<s>`), or -1 for after the text. `from_backbone` sets it from the tokenizer's special
            tokens. Defaults to 1.
        label_tokens_per_pass (`int`, *optional*):
            `label_tokens` and `label_text`. How many labels go into one pass of the backbone; with more labels, the
            text is encoded once per group of labels. Defaults to every label while their tokens take at most half of
            the backbone's positions.
        label_token_layers (`int` or `str`, *optional*):
            `label_tokens` only. How many of the backbone's top layers the label tokens join: `"all"` (they are in
            the input, as above), or an integer k from 1 to the number of layers, so that the text runs alone
            through the lower layers (in its own positions) and the label tokens' embedded vectors are inserted in
            front of the top k layers, which costs far less with many labels. k equal to the number of layers is
            `"all"`. k below it runs the backbone's layers one by one, which BERT-style (BERT, MiniLM, RoBERTa,
            XLM-RoBERTa, CamemBERT), ESM and DistilBERT backbones support. Defaults to `"all"`.
        label_token_attention (`str`, *optional*):
            `label_tokens` only. `"two_way"`: text and label tokens attend to each other. `"one_way"`: the label
            tokens attend to the text (and to each other), the text does not attend to the label tokens, so the
            text's states are those it has alone and each label reads them. `"one_way"` runs the backbone's layers
            one by one (the backbones `label_token_layers=k` supports; with `"all"` the label tokens join from the
            first layer and the text keeps its own positions) with eager or sdpa attention. Defaults to
            `"two_way"`.
        label_descriptions (`dict[str, str]`, *optional*):
            `label_text` only. The text a label is read as, by label name, instead of the name itself (e.g.
            `{"billing": "questions about invoices and payments"}`); labels not in it are read as their names.
        label_text_ids (`list[list[int]]`, *optional*):
            `label_text` only. Each label's text as token ids, with the tokenizer's special tokens (the first slot is
            the marker's). `from_backbone` reads them with the backbone's tokenizer from the label names (or
            `label_descriptions`). Without them the model scores only labels given at call time (`label_input_ids`).
        label_text_scorer (`str`, *optional*):
            `label_text` only. `"shared"`: one scorer for every label, the scaled cosine similarity of the text's
            vector and the label's (two learned numbers), so that labels given as text at call time (never seen in
            training) are scored too. `"per_label"`: that similarity plus each label's own linear term on the text's
            vector (a weight vector and a bias per label, starting at zero), for the model's own labels. Defaults to
            `"shared"`.
        label_text_pooling (`str`, *optional*):
            `label_text` only. A label's vector: `"mean"` over its segment's final states (marker and text tokens), or
            its `"marker"` token's final state. Defaults to `"mean"`.
        label_text_layers (`int` or `str`, *optional*):
            `label_text` only. In how many of the backbone's top layers the labels also attend to the text: 0 (never:
            text and labels are two embeddings, compared by the scorer; any backbone), an integer k (the lower layers
            encode the text alone and each label alone, once per call; the top k layers join them), or `"all"`. The
            text never attends to the labels, and a label never to another label. k >= 1 runs the backbone's layers
            one by one (BERT-style, ESM and DistilBERT backbones, sdpa or eager attention). Defaults to 0 (every
            backbone with a token embedding table runs it).
        label_text_seen_margin (`float`, *optional*):
            `label_text` only. Taken off the logit of every label the model was trained on (calibrated stacking), so
            that a label never seen in training, asked together with trained ones, competes as it did before
            training; the trained labels' order among themselves is unchanged. train.py tunes it on the validation
            rows (`label_text_margin.py`). Defaults to 0 (none).
        label_text_seen_ids (`list[list[int]]`, *optional*):
            `label_text` only. The texts (as `label_text_ids` holds them) of the labels `label_text_seen_margin` is
            taken off, matched by their token ids wherever they are asked. Defaults to the model's own labels.
        classifier_head (`str`, *optional*, defaults to `"linear"`):
            `"linear"`: dropout and a linear layer (BERT style). `"dense"`: dense, activation, dropout and an
            output projection (RoBERTa/ESM style).
        classifier_dropout (`float`, *optional*):
            Dropout before the output layer. Defaults to the backbone's `classifier_dropout`, else its
            `hidden_dropout_prob`, else 0.1.
        classifier_dropout_samples (`int`, *optional*, defaults to 1):
            Multi-sample dropout (Inoue 2019): in training, the head runs this many times on each pooled vector (or
            token), each run with its own dropout masks, and the logits are averaged, so that one step learns from
            several thinned heads for the cost of the head alone (the backbone runs once). Evaluation and inference
            run the head once, without dropout, whatever the setting. 1: off (one run, as any classifier). Needs a
            `classifier_dropout` above 0.
        classifier_hidden_size (`int`, *optional*):
            `dense` head only. Width of the dense layer. Defaults to the backbone's hidden size.
        classifier_activation (`str`, *optional*):
            `dense` head only. Activation after the dense layer, any name of `transformers.activations.ACT2FN`
            (`tanh`, `gelu`, `silu`, `relu`, ...). Defaults to `"tanh"`.
        multi_label_loss (`str`, *optional*, defaults to `"bce"`):
            Multi-label only. `"bce"` (binary cross-entropy), `"focal"` (focal loss, Lin et al. 2017) or
            `"asymmetric"` (asymmetric loss, Ridnik et al. 2021), for label sets where most labels are
            negative for most texts.
        focal_gamma (`float`, *optional*):
            `focal` only. Focusing exponent: easy examples count (1 - p_t)^gamma. Defaults to 2.0.
        asymmetric_gamma_neg (`float`, *optional*):
            `asymmetric` only. Focusing exponent of the negatives. Defaults to 4.0.
        asymmetric_gamma_pos (`float`, *optional*):
            `asymmetric` only. Focusing exponent of the positives. Defaults to 0.0.
        asymmetric_clip (`float`, *optional*):
            `asymmetric` only. Negatives with a probability below it add no loss. Defaults to 0.05.
        pos_weight (`list[float]`, *optional*):
            Multi-label only. Weight of the positive term of each label's loss, usually negatives/positives
            in the training data (`pooled_models.thresholds.positive_weights` computes it).
        decision_threshold (`float` or `list[float]`, *optional*):
            Multi-label only. The sigmoid score from which a label is predicted: one for every label or one per
            label, usually tuned on validation data (`pooled_models.thresholds.tune_thresholds`). Unset: 0.5.
        position_ids_from_mask (`bool`, *optional*, defaults to `True`):
            Derive the backbone's position ids from the attention mask, so a text gets the same positions
            (and the same output) whether it is padded on the left or on the right. Without it, left padding
            shifts the absolute positions of BERT-style backbones.
        packed_batches (`bool`, *optional*, defaults to `False`):
            Run the backbone on padding-free (packed) rows: the batch's texts concatenated, each with its own
            positions and attention that cannot cross to another text, the hidden states put back in the padded
            layout (zeros at the padding) before pooling, so the outputs are those of the padded batch. With
            flash-attention (varlen) no padding is computed; with sdpa or eager a block-diagonal mask keeps the
            texts apart, which on CPU was measured slower than batches of similar length (README, "Speed: packed
            batches"). Needs `position_ids_from_mask=True` and a backbone that takes position ids and a prepared
            attention mask (not DeBERTa-v2 or ESM); `output_attentions` is refused.
        initializer_range (`float`, *optional*):
            Standard deviation used to initialise the pooler and head. Defaults to the backbone's.
        normalize_embeddings (`bool`, *optional*, defaults to `False`):
            Sentence embeddings: whether `encode` scales every vector to length 1 when its call does not say. Set by
            `from_backbone` from a sentence-transformers folder's `Normalize` module. The model's outputs (pooled
            vectors, logits) are never normalised.
        max_seq_length (`int`, *optional*):
            The most tokens of a text the model reads: `pipeline(...)`, `encode`, train.py's evaluation and
            predictions, and vLLM (its `max_model_len`, from the `sentence_bert_config.json` that `save_pretrained`
            writes) cut a longer text there, so every path gives the same scores. train.py sets it to the length it
            trained with; `from_backbone` to a sentence-transformers folder's `max_seq_length`. Unset: the tokenizer's
            `model_max_length`. Always capped at what the backbone has positions for (less the label tokens of
            `pooling="label_tokens"`). `embedding_max_length`, its name in 0.3, is read as it.
        document_window (`int`, *optional*):
            Document mode: the tokens of one window, special tokens included. A text is cut into overlapping
            windows of this length, each window runs through the backbone and the pooling, and the windows' vectors
            are pooled across the document (`document_pooling`) before the head, so the whole text is read. At most
            what the backbone has positions for (less the label tokens of `pooling="label_tokens"`). Unset: off, a
            text is cut at `max_seq_length`.
        document_stride (`int`, *optional*):
            Document mode: the tokens consecutive windows share (the tokenizer's `stride`), from 0 to
            `document_window - 1`. Defaults to `document_window // 8`.
        document_pooling (`str`, *optional*):
            Document mode: how the windows' vectors become the document's: `"mean"`, `"max"`, `"attention"` (a
            learned weighting), `"transformer"` (a small transformer over the windows with their positions, then
            the maximum) or `"first_plus_rest"` (the first window's vector plus the attention-weighted rest through
            a learned gate that starts at zero: the model starts as the model reading one window). Defaults to
            `"first_plus_rest"`.
        document_transformer_layers (`int`, *optional*):
            `document_pooling="transformer"` only. Its layers. Defaults to 2.
        document_transformer_heads (`int`, *optional*):
            `document_pooling="transformer"` only. Its attention heads, a divisor of the window vectors' width.
            Unset: 64 dimensions per head where the width allows it, else the largest divisor up to 8.

    Settings that do not apply to the chosen pooling or head raise a `ValueError`; the ones that apply but
    are left unset are filled with their defaults, so `config.json` shows exactly what was built.

    Example:

    ```python
    >>> from transformers import BertConfig
    >>> from pooled_models import PooledConfig, PooledForSequenceClassification

    >>> config = PooledConfig(backbone_config=BertConfig(), pooling="concat_layers", layer_token_pooling="mean",
    ...                       num_labels=3)
    >>> model = PooledForSequenceClassification(config)
    ```
    """

    model_type = "pooled"
    # The setting's name in 0.3: a saved config.json, a keyword or an attribute of that name reads and writes it.
    attribute_map: ClassVar[dict[str, str]] = {"embedding_max_length": "max_seq_length"}
    sub_configs_defaults = backbone_sub_config_defaults()  # compat.py: empty before transformers 5.20
    sub_configs = BACKBONE_SUB_CONFIGS

    # The config class first: huggingface_hub's strict validation tries the union in order, and a config that fails
    # `dict` is serialised whole (repr) into the discarded TypeError, which made building a model several times slower.
    backbone_config: PreTrainedConfig | dict | None = None
    pooling: str = registered(POOLINGS, "mean")
    layer_start: int | None = None
    layer_token_pooling: str | None = None
    lstm_hidden_size: int | None = None
    attention_heads: int | None = None
    attention_hidden_size: int | None = None
    gem_p: float | int | None = None
    label_token_init: str | None = registered(LABEL_TOKEN_INITS, None)
    label_token_init_ids: list[list[int]] | None = None
    label_token_scorer: Literal["per_label", "shared"] | None = None
    label_token_position: int | None = None
    label_tokens_per_pass: int | None = None
    label_token_layers: int | Literal["all"] | None = None
    label_token_attention: Literal["two_way", "one_way"] | None = None
    label_descriptions: dict[str, str] | None = None
    label_text_ids: list[list[int]] | None = None
    label_text_scorer: Literal["per_label", "shared"] | None = None
    label_text_pooling: Literal["mean", "marker"] | None = None
    label_text_layers: int | Literal["all"] | None = None
    label_text_seen_margin: float | int | None = None
    label_text_seen_ids: list[list[int]] | None = None
    classifier_head: str = registered(HEADS, "linear")
    classifier_dropout: float | int | None = None
    classifier_dropout_samples: int = 1
    classifier_hidden_size: int | None = None
    classifier_activation: str | None = None
    position_ids_from_mask: bool = True
    packed_batches: bool = False
    multi_label_loss: str = registered(MULTI_LABEL_LOSSES, "bce")
    focal_gamma: float | int | None = None
    asymmetric_gamma_neg: float | int | None = None
    asymmetric_gamma_pos: float | int | None = None
    asymmetric_clip: float | int | None = None
    pos_weight: list[float | int] | None = None
    decision_threshold: float | int | list[float | int] | None = None
    initializer_range: float | None = None
    # They choose no module, so a built model follows their edits: encode's normalisation, and every path's length
    normalize_embeddings: bool = False
    max_seq_length: int | None = None
    # Document mode (document_settings.py): the window and stride cut texts; the pooling chooses a module.
    document_window: int | None = None
    document_stride: int | None = None
    document_pooling: str | None = registered(WINDOW_POOLINGS, None)
    document_transformer_layers: int | None = None
    document_transformer_heads: int | None = None

    def __post_init__(self, **kwargs):
        refuse_engine_without_plugin()  # engines.py: vLLM without the plugin would serve another pooling
        if not keeps_custom_pipelines(__name__):  # the package registers its pipeline (pipeline_reference.py)
            kwargs.pop("custom_pipelines", None)
        self.backbone_config = _clean_backbone_config(self.backbone_config)
        super().__post_init__(**kwargs)
        if self.id2label is not None and self.label2id is None:
            self.label2id = {label: index for index, label in self.id2label.items()}
        self._settle()

    @property
    def reads_documents(self) -> bool:
        """Whether the model is in document mode: a text read whole, in windows (``document_window`` set)."""
        return reads_documents(self)

    # -- validation -----------------------------------------------------------------------------------------
    # The rules and the snapshot edits are read against: SettingsValidation (config_validation.py).

    def _settings(self) -> dict[str, Any]:
        """The settings, and the backbone's vocabulary size, which the label tokens' starting ids must fit."""
        return {name: getattr(self, name, None) for name in (*SETTINGS, "vocab_size")}

    def structure(self) -> dict[str, Any]:
        """The settings a built model's modules depend on: its pooling and head with their settings, and the number
        of labels, and what the modules read once when built (BUILT_WITH). A model cannot follow a change of these (it
        keeps its modules); loading it again can."""
        names = (
            (
                {"pooling", "classifier_head", "num_labels", *BUILT_WITH}
                | POOLINGS.every_option()
                | HEADS.every_option()
            )
            - set(INITIALISATION_ONLY)
            - set(READ_AT_EACH_CALL)
        )
        return {**{name: getattr(self, name, None) for name in sorted(names)}, **document_structure(self)}

    # -- loading and saving ---------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs):
        """The saved config, with the load-time keywords (``from_pretrained(folder, pooling=..., num_labels=...)``)
        applied to it and validated together, as edits: the saved settings they leave behind are dropped."""
        edits = {key: kwargs.pop(key) for key in list(kwargs) if key in LOAD_TIME_SETTINGS}
        # Saved before the seen-label margin existed: no margin, as then, not today's default (label_text_margin.py).
        loaded = super().from_dict(stated_before_the_margin(config_dict), **kwargs)
        if edits:
            config = loaded[0] if isinstance(loaded, tuple) else loaded
            for key, value in edits.items():
                setattr(config, key, value)
            config._settle(explicit=set(edits))
        return loaded

    def save_pretrained(self, save_directory, push_to_hub: bool = False, **kwargs):
        self.ensure_valid()  # never save settings that would not load back
        # The pipelines config.json names for trust_remote_code loads (pipeline_reference.py), next to it. Before the
        # config: transformers uploads what a save wrote (push_to_hub), the model's save included.
        os.makedirs(save_directory, exist_ok=True)
        for path in pipeline_files(self.pooling, self.architectures):
            shutil.copy(path, os.path.join(save_directory, path.name))
        return super().save_pretrained(save_directory, push_to_hub=push_to_hub, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        output = _serialised(super().to_dict())
        # Where a checkpoint's own code finds its pipelines (pipeline_reference.py): derived from the pooling.
        output["custom_pipelines"] = custom_pipelines(self.pooling, self.architectures)
        return output

    def get_text_config(self, decoder=None, encoder=None) -> PreTrainedConfig:
        """The backbone's config: the one that holds the text settings (``vocab_size``...), which transformers reads
        and writes through this method (``resize_token_embeddings`` sets ``vocab_size`` on it)."""
        return self.backbone_config.get_text_config(decoder=decoder, encoder=encoder)


# The settings an edit is read from: PooledConfig's own (the backbone's config is the backbone's), and the label space.
SETTINGS = frozenset(
    {field.name for field in dataclasses.fields(PooledConfig)}
    - {field.name for field in dataclasses.fields(PreTrainedConfig)}
    - {"backbone_config"}
    | {"id2label", "problem_type"}
)
# The keywords from_pretrained applies to a loaded config as edits: the settings, and the label count and map.
LOAD_TIME_SETTINGS = SETTINGS | {"num_labels", "label2id"}


def _serialised(output: dict[str, Any]) -> dict[str, Any]:
    """A config's dict without the private snapshot, and with the backbone's ``_name_or_path`` (where the backbone was
    loaded from, often a path on this machine; ``encode`` finds its tokenizer there) blank, as a sub-config built in
    place has it."""
    output.pop("_validated", None)
    if isinstance(output.get("backbone_config"), dict) and "_name_or_path" in output["backbone_config"]:
        output["backbone_config"]["_name_or_path"] = ""
    return output


def _clean_backbone_config(backbone_config: Any) -> PreTrainedConfig | None:
    """A copy of the backbone config, built from transformers' own class, without code references."""
    if backbone_config is None:
        return default_backbone_config()  # BERT-base (built by transformers' SubConfigSpec where it has one)
    if isinstance(backbone_config, PreTrainedConfig):
        config_dict = backbone_config.to_dict()
    elif isinstance(backbone_config, dict):
        config_dict = copy.deepcopy(backbone_config)
    else:
        raise ValueError(
            f"backbone_config must be a dict or a PreTrainedConfig, got {type(backbone_config).__name__}."
        )
    for key in CODE_REFERENCE_KEYS:
        config_dict.pop(key, None)
    model_type = config_dict.get("model_type")
    if model_type == PooledConfig.model_type:
        raise ValueError("backbone_config is itself a pooled config; nest the backbone's own config instead.")
    if model_type not in CONFIG_MAPPING:
        raise ValueError(
            f"backbone_config has model_type {model_type!r}, which is not a model type built into "
            f"transformers (pooled_models never runs remote code). Valid choices: {', '.join(sorted(CONFIG_MAPPING))}."
        )
    return CONFIG_MAPPING[model_type].from_dict(config_dict)


PooledConfig.register_for_auto_class()
