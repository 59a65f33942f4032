"""Label-token pooling: one learned token per label in every input, each label scored from its own token.

The label embeddings are a parameter of the pooler. They are written into the backbone's input
embeddings (right after the first special token, e.g. ``[CLS] <label 1> ... <label L> text [SEP]``): label slots
carry marker ids past the vocabulary, which the backbone's word-embedding module reads (:class:`LabelTokenInput`,
mixed into its class), so the tokenizer and vocabulary stay
unchanged and the backbone still does its own input processing (position and token-type embeddings,
ESM's token-dropout scaling, embedding scales...). Each label's final hidden state goes to the
:class:`~.heads.LabelTokenHead`, which gives that label's logit.

Position budget: text and label tokens must fit the backbone's position embeddings. Labels are encoded
``label_tokens_per_pass`` at a time; when they do not all fit in one pass the text is encoded once per
group of labels (the groups of a batch run as one larger batch). Texts longer than the room left are
truncated, keeping their last token (``[SEP]``/``</s>``).

Cost: with ``label_token_layers=k`` the label tokens join only the backbone's top k layers; the text runs alone through
the lower ones (see ``label_token_layers.py``).

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedConfig
from transformers import initialization as init
from transformers.utils import logging

from .backbone import input_embeddings_of, pools_the_sequence, position_ids_from_mask, position_offset
from .heads import LABEL_TOKEN_SCORERS, LabelTokenHead
from .label_token_layers import (
    ALL_LAYERS,
    LABEL_TOKEN_ATTENTION,
    ONE_WAY,
    TWO_WAY,
    layer_stack,
    run_with_late_labels,
)
from .pooling import POOLINGS, Pooler
from .registry import LABEL_TOKEN_INITS, Component
from .text_config import max_positions_of, state_width_of, text_config_of

__all__ = [
    "LabelTokenPooler",
    "LabelEmbeddings",
    "LabelTokenInit",
    "LABEL_TOKEN_INITS",
    "label_token_settings_from_tokenizer",
]

logger = logging.get_logger(__name__)

# Where the label tokens go: after this many leading tokens of the text; -1 puts them after the text.
AFTER_THE_TEXT = -1


def _default_per_pass(config: PreTrainedConfig) -> int:
    # All labels in one pass while they take at most half of the positions; the text keeps the other half.
    max_positions = max_positions_of(config)
    if max_positions is None or config.num_labels <= max_positions // 2:
        return config.num_labels
    return max_positions // 2


def label_token_settings_from_tokenizer(config_kwargs: dict[str, Any], tokenizer) -> dict[str, Any]:
    """The settings only a tokenizer knows: the token ids labels start from, and the number of leading special
    tokens (where the label tokens go)."""
    settings: dict[str, Any] = {}
    init = LABEL_TOKEN_INITS.lookup(config_kwargs.get("label_token_init") or DEFAULT_INIT)
    if config_kwargs.get("label_token_init_ids") is None:
        ids = init.ids_from_tokenizer(_label_names(config_kwargs), tokenizer)
        if ids is not None:
            settings["label_token_init_ids"] = ids
    if config_kwargs.get("label_token_position") is None:
        probe = tokenizer("x")["input_ids"]
        settings["label_token_position"] = 1 if probe and probe[0] in set(tokenizer.all_special_ids) else 0
    return settings


def _label_names(config_kwargs: dict[str, Any]) -> list[str]:
    id2label = config_kwargs.get("id2label")
    if id2label:
        return [id2label[key] for key in sorted(id2label, key=int)]
    return [f"LABEL_{index}" for index in range(config_kwargs.get("num_labels", 2))]


# ----------------------------------------------------------------------------------------------------
# Where the label embeddings start (label_token_init)
# ----------------------------------------------------------------------------------------------------

DEFAULT_INIT = "label_text"


class LabelTokenInit(Component):
    """A way to initialise the label embeddings, registered with ``@LABEL_TOKEN_INITS.register(name)``."""

    @classmethod
    def ids_from_tokenizer(cls, label_names: list[str], tokenizer) -> list[list[int]] | None:
        """The ``label_token_init_ids`` this initialisation reads, from the backbone's tokenizer (None: none)."""
        return None

    @staticmethod
    def initialise(parameter: nn.Parameter, word_embeddings: torch.Tensor, config: PreTrainedConfig) -> None:
        raise NotImplementedError


def _cls_ids_from_backbone(config: PreTrainedConfig) -> list[list[int]] | None:
    backbone = text_config_of(config)
    cls_id = getattr(backbone, "cls_token_id", None)
    if cls_id is None:
        cls_id = getattr(backbone, "bos_token_id", None)
    return None if cls_id is None else [[int(cls_id)] for _ in range(config.num_labels)]


class _FromTokenIds(LabelTokenInit):
    """Each label starts at the mean input embedding of its own token ids (``label_token_init_ids``)."""

    @classmethod
    def check_config(cls, config):
        ids, num_labels = config.label_token_init_ids, config.num_labels
        if ids is None:
            return  # a model built from its config alone: initialise() falls back to the vocabulary mean
        if not (isinstance(ids, list) and len(ids) == num_labels):
            raise ValueError(
                f"label_token_init_ids must hold one list of token ids per label ({num_labels}), got "
                f"{len(ids) if isinstance(ids, list) else type(ids).__name__}."
            )
        vocab_size = text_config_of(config).vocab_size
        for label, token_ids in enumerate(ids):
            if not (
                isinstance(token_ids, list)
                and len(token_ids) > 0
                and all(
                    isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab_size for i in token_ids
                )
            ):
                raise ValueError(
                    f"label_token_init_ids[{label}] = {token_ids!r} must be a non-empty list of token ids in "
                    f"[0, {vocab_size - 1}]."
                )

    @staticmethod
    def initialise(parameter, word_embeddings, config):
        if config.label_token_init_ids is None:
            # Built from a config alone (PooledForSequenceClassification(config), re-heading to more labels where no
            # tokenizer was saved): no token ids to start from, as every built-in model builds from its config.
            logger.warning_once(
                f"label_token_init={config.label_token_init!r} has no label_token_init_ids (no tokenizer was given to "
                "read them): the label tokens start from the mean input embedding instead "
                "(label_token_init='vocab_mean'). Build the model with from_backbone(), or pass "
                "label_token_init_ids, to start them from the label names."
            )
            FromVocabularyMean.initialise(parameter, word_embeddings, config)
            return
        vectors = [
            word_embeddings[torch.tensor(ids, device=word_embeddings.device)].mean(dim=0)
            for ids in config.label_token_init_ids
        ]
        init.copy_(parameter, torch.stack(vectors))


@LABEL_TOKEN_INITS.register("label_text")
class FromLabelText(_FromTokenIds):
    """Each label starts at the mean embedding of its name's tokens ("billing" at the embedding of "billing")."""

    config_options = {"label_token_init_ids": None}  # read from the tokenizer by from_backbone, or given

    @classmethod
    def ids_from_tokenizer(cls, label_names, tokenizer):
        ids = []
        for name in label_names:
            tokens = tokenizer(str(name), add_special_tokens=False)["input_ids"]
            if not tokens:
                raise ValueError(
                    f"label_token_init='label_text': the label name {name!r} has no tokens to start from."
                )
            ids.append([int(i) for i in tokens])
        return ids


@LABEL_TOKEN_INITS.register("cls")
class FromCLS(_FromTokenIds):
    """Every label starts at the embedding of the CLS (or BOS) token."""

    config_options = {"label_token_init_ids": _cls_ids_from_backbone}

    @classmethod
    def ids_from_tokenizer(cls, label_names, tokenizer):
        cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        if cls_id is None:
            raise ValueError("label_token_init='cls' but the tokenizer has neither a CLS nor a BOS token.")
        return [[int(cls_id)] for _ in label_names]


@LABEL_TOKEN_INITS.register("vocab_mean")
class FromVocabularyMean(LabelTokenInit):
    """Every label starts at the mean of all input embeddings."""

    @staticmethod
    def initialise(parameter, word_embeddings, config):
        init.copy_(parameter, word_embeddings.mean(dim=0).expand_as(parameter))


@LABEL_TOKEN_INITS.register("random")
class FromNoise(LabelTokenInit):
    """Normal noise with the model's ``initializer_range``."""

    @staticmethod
    def initialise(parameter, word_embeddings, config):
        init.normal_(parameter, std=config.initializer_range)


# ----------------------------------------------------------------------------------------------------
# The pooler
# ----------------------------------------------------------------------------------------------------


class LabelEmbeddings(nn.Module):
    """One learned input vector per label. A module of its own, read through its forward, so that hooks that
    bring weights to the device for a forward (accelerate's offloading) bring these too. Not an ``nn.Embedding``:
    the model initialises them itself (from the label names), which the default embedding init would undo."""

    def __init__(self, num_labels: int, hidden_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_labels, hidden_size))

    def init_parameters(self, config: PreTrainedConfig, input_embeddings: nn.Module) -> None:
        LABEL_TOKEN_INITS.lookup(config.label_token_init).initialise(
            self.weight, input_embeddings.weight, config
        )

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        return self.weight[index]


@POOLINGS.register("label_tokens")
class LabelTokenPooler(Pooler):
    """One learned token per label placed in the input; returns each label's final hidden state ``[B, L, H]``."""

    config_options = {
        "label_token_scorer": "per_label",
        "label_token_position": 1,
        "label_tokens_per_pass": _default_per_pass,
        "label_token_layers": ALL_LAYERS,
        "label_token_attention": TWO_WAY,
    }
    head_class = LabelTokenHead

    @classmethod
    def options_for(cls, config):
        # label_token_init first: the settings of the chosen initialisation (its token ids) depend on it.
        options = {"label_token_init": DEFAULT_INIT}
        init_name = config.label_token_init or DEFAULT_INIT
        if init_name in LABEL_TOKEN_INITS:
            options.update(LABEL_TOKEN_INITS[init_name].options_for(config))
        return {**options, **cls.config_options}

    @classmethod
    def every_option(cls):
        return {"label_token_init", *cls.config_options} | LABEL_TOKEN_INITS.every_option()

    @classmethod
    def tokenizer_settings(cls, config_kwargs, load_tokenizer):
        init = LABEL_TOKEN_INITS.lookup(config_kwargs.get("label_token_init") or DEFAULT_INIT)
        needs_ids = (
            config_kwargs.get("label_token_init_ids") is None
            and "label_token_init_ids" in init.config_options
        )
        if not needs_ids and config_kwargs.get("label_token_position") is not None:
            return {}
        return label_token_settings_from_tokenizer(config_kwargs, load_tokenizer())

    @classmethod
    def check_config(cls, config):
        def require(condition: bool, message: str) -> None:
            if not condition:
                raise ValueError(message)

        num_labels = config.num_labels
        LABEL_TOKEN_INITS.lookup(config.label_token_init).check_config(config)
        require(
            config.label_token_scorer in LABEL_TOKEN_SCORERS,
            f"Unknown label_token_scorer {config.label_token_scorer!r}. Valid choices: {', '.join(LABEL_TOKEN_SCORERS)}.",
        )
        position = config.label_token_position
        require(
            isinstance(position, int) and not isinstance(position, bool) and position >= AFTER_THE_TEXT,
            f"label_token_position must be an integer >= 0 (after that many leading tokens) or -1 (after the "
            f"text), got {position!r}.",
        )
        per_pass = config.label_tokens_per_pass
        require(
            isinstance(per_pass, int) and not isinstance(per_pass, bool) and 1 <= per_pass <= num_labels,
            f"label_tokens_per_pass must be an integer in [1, num_labels={num_labels}], got {per_pass!r}.",
        )
        layers, num_layers = config.label_token_layers, _num_layers(config)
        require(
            layers == ALL_LAYERS
            or (
                isinstance(layers, int)
                and not isinstance(layers, bool)
                and 1 <= layers <= (num_layers or layers)
            ),
            f"label_token_layers must be {ALL_LAYERS!r} or an integer in [1, num_hidden_layers={num_layers}] (the "
            f"backbone's top layers the label tokens join), got {layers!r}.",
        )
        require(
            config.label_token_attention in LABEL_TOKEN_ATTENTION,
            f"Unknown label_token_attention {config.label_token_attention!r}. Valid choices: "
            f"{', '.join(LABEL_TOKEN_ATTENTION)}.",
        )
        require(
            config.position_ids_from_mask,
            "pooling='label_tokens' needs position_ids_from_mask=True: the label tokens shift the text's positions.",
        )

    def __init__(self, config: PreTrainedConfig):
        super().__init__()
        self.num_labels = config.num_labels
        self.output_dim = state_width_of(config)
        self.label_embeddings = LabelEmbeddings(self.num_labels, self.output_dim)
        self.position = config.label_token_position
        self.per_pass = config.label_tokens_per_pass
        self.num_passes = math.ceil(self.num_labels / self.per_pass)
        self.added_tokens = self.per_pass  # every input carries one pass of label tokens
        # The top layers the label tokens join; None: all of them, from the input on (full insertion). k = the number
        # of layers is full insertion too: there the labels' own embedding layer is the only layer below. One-way
        # attention runs the layers one by one (its mask is made there): "all" is then every layer of the stack.
        layers = config.label_token_layers
        self.one_way = config.label_token_attention == ONE_WAY
        if self.one_way:
            self.top_layers = _num_layers(config) if layers == ALL_LAYERS else layers
        else:
            self.top_layers = None if layers in (ALL_LAYERS, _num_layers(config)) else layers

    # -- checks against the backbone -------------------------------------------------------------------

    @classmethod
    def backbone_refusal(cls, backbone):
        if pools_the_sequence(backbone):
            return (
                f"reads each label token's own final state, but {type(backbone).__name__} pools the sequence to fewer "
                "states than tokens"
            )
        embeddings = input_embeddings_of(backbone)
        if isinstance(embeddings, nn.Embedding):
            return None
        kind = (
            "has no input embedding table"
            if embeddings is None
            else f"embeds ids with {type(embeddings).__name__}"
        )
        return (
            "writes a learned vector per label into the backbone's token embedding table (an nn.Embedding), but "
            f"{type(backbone).__name__} {kind} (get_input_embeddings())"
        )

    def check_backbone(self, backbone: nn.Module, position_budget: int | None) -> None:
        super().check_backbone(backbone, position_budget)
        embeddings = _word_embeddings(backbone)
        width = embeddings.weight.shape[1]
        if self.label_embeddings.weight.shape[1] != width:
            # Factorised embeddings (ALBERT, ELECTRA, RemBERT, MobileBERT) are narrower than the hidden size and
            # projected up inside the backbone: a label's vector is a token embedding, so it takes their width.
            self.label_embeddings = LabelEmbeddings(self.num_labels, width)
        if position_budget is not None and position_budget - self.per_pass < 2:
            raise ValueError(
                f"label_tokens_per_pass={self.per_pass} leaves {position_budget - self.per_pass} of the backbone's "
                f"{position_budget} positions for the text; lower label_tokens_per_pass."
            )
        if self.one_way:  # its mask is made where the layers run one by one
            layer_stack(
                backbone,
                self.top_layers,
                needed_by=f"label_token_attention={ONE_WAY!r}",
                valid_choice=f"label_token_attention={TWO_WAY!r}",
            )
        elif self.top_layers is not None:
            layer_stack(backbone, self.top_layers)  # refuses a backbone whose layers it cannot run one by one

    # -- forward -------------------------------------------------------------------------------------

    def encode(self, encoder, inputs: dict[str, Any], output_hidden_states: bool):
        if inputs.get("position_ids") is not None:
            raise ValueError("pooling='label_tokens' derives position ids itself; do not pass position_ids.")
        layout = _Layout.build(inputs["attention_mask"], self, encoder.position_budget)
        vocabulary = _word_embeddings(encoder.backbone).num_embeddings
        if self.top_layers is not None:
            return self._encode_late(encoder, layout, inputs, vocabulary, output_hidden_states)
        extended = layout.extend_inputs(inputs, encoder.pad_token_id, vocabulary)
        if extended.get("inputs_embeds") is not None:
            # Given embeddings: the label vectors are written into them here.
            is_label = (layout.label_index >= 0).unsqueeze(-1)
            label_vectors = self.label_embeddings(layout.label_index.clamp(min=0)).to(
                extended["inputs_embeds"].dtype
            )
            extended["inputs_embeds"] = torch.where(is_label, label_vectors, extended["inputs_embeds"])
        # Given ids: label slots hold marker ids, which the backbone's embedding module reads (LabelTokenInput).
        outputs = encoder.run_backbone(**extended, output_hidden_states=output_hidden_states)
        return outputs, layout.read_labels(outputs.last_hidden_state)

    def _encode_late(
        self, encoder, layout: _Layout, inputs: dict[str, Any], vocabulary: int, output_hidden_states
    ):
        """``label_token_layers=k``: the text alone through the lower layers, the label tokens joining the top k."""
        unsupported = sorted(
            key
            for key, value in inputs.items()
            if key not in _INPUTS and value is not None and value is not False
        )
        if unsupported:
            raise ValueError(
                f"label_token_layers={self.top_layers} runs the backbone's layers itself, without "
                f"{', '.join(unsupported)}; use label_token_layers={ALL_LAYERS!r} for them."
            )
        offset = position_offset(encoder.backbone)
        text = layout.text_alone(inputs, encoder.pad_token_id)
        text["position_ids"] = position_ids_from_mask(text["attention_mask"], offset)
        # The label tokens are embedded as full insertion embeds them: marker ids read by the input embeddings
        # (LabelTokenInput) when the text is given as ids, their vectors as given embeddings otherwise; each at the
        # position it has under full insertion, with the token type and attention of a real token.
        label_ids = layout.label_ids.clamp(min=0)
        labels = {"input_ids": None, "inputs_embeds": None, "token_type_ids": None}
        if inputs.get("input_ids") is not None:
            labels["input_ids"] = label_ids + vocabulary
        else:
            labels["inputs_embeds"] = self.label_embeddings(label_ids).to(inputs["inputs_embeds"].dtype)
        labels["position_ids"] = layout.label_slot + offset
        labels["attention_mask"] = (layout.label_ids >= 0).long()
        request = bool(output_hidden_states)  # a selection is made from all of them by the model
        outputs = run_with_late_labels(
            layer_stack(encoder.backbone, self.top_layers),
            layout,
            text,
            labels,
            self.top_layers,
            request,
            one_way=self.one_way,
        )
        return outputs, layout.read_labels(outputs.last_hidden_state)

    def connect(self, model: nn.Module) -> None:
        enable_label_token_input(_word_embeddings(model.backbone), model)


# What the model passes every pooler's encode; other keywords (output_attentions...) are the backbone forward's own.
_INPUTS = ("input_ids", "inputs_embeds", "attention_mask", "token_type_ids", "position_ids")


def _num_layers(config: PreTrainedConfig) -> int | None:
    return getattr(text_config_of(config), "num_hidden_layers", None)


class LabelTokenInput:
    """Mixed into the backbone's own input embedding class (its weights and checkpoint keys stay as they are): an id
    at or past the vocabulary size is a marker for label ``id - vocabulary``, and gets that label's learned vector
    from the model's label-token pooler; the other ids are looked up as before.

    The markers travel in ``input_ids`` through the backbone, so everything it does with the ids besides the lookup
    (ESM's token dropout counts mask tokens, for one) sees ids, as for any input. Nothing is registered or changed
    per call, so the forward pass compiles (``torch.compile(fullgraph=True)``) and exports. The vectors come from
    ``model.pooler`` at each call: under PEFT that is the trained copy of the pooler.
    """

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        vocabulary = self.num_embeddings
        is_label = input_ids >= vocabulary
        looked_up = super().forward(input_ids.masked_fill(is_label, 0))
        owner = self.__dict__.get("_label_token_model")
        if owner is None:
            return looked_up
        label_ids = (input_ids - vocabulary).clamp(min=0, max=owner.pooler.num_labels - 1)
        labels = owner.pooler.label_embeddings(label_ids).to(looked_up.dtype)
        return torch.where(is_label.unsqueeze(-1), labels, looked_up)


_LABEL_TOKEN_CLASSES: dict[type, type] = {}


def enable_label_token_input(embeddings: nn.Embedding, model: nn.Module) -> None:
    """Make ``embeddings`` (the backbone's input embedding module) read label markers for ``model``."""
    base = type(embeddings)
    if not issubclass(base, LabelTokenInput):
        if base not in _LABEL_TOKEN_CLASSES:
            _LABEL_TOKEN_CLASSES[base] = type(f"LabelToken{base.__name__}", (LabelTokenInput, base), {})
        embeddings.__class__ = _LABEL_TOKEN_CLASSES[base]
    # A plain attribute, not a registered submodule: the model holds the backbone, not the other way round.
    object.__setattr__(embeddings, "_label_token_model", model)


def _word_embeddings(backbone: nn.Module) -> nn.Embedding:
    """The backbone's token embedding table (``check_backbone`` refused a backbone without one)."""
    return input_embeddings_of(backbone)


class _Layout:
    """Where every text token and label token goes in the extended, right-padded sequences.

    Row ``b * num_passes + g`` holds text ``b`` with label group ``g``. The layout depends only on each
    text's own tokens, never on the batch's padding side or width, so the result is padding-invariant.
    The text alone (truncated, right-padded: what ``label_token_layers=k`` runs through the lower layers) has one
    row per text; ``insert`` spreads its states into the extended rows.
    """

    def __init__(
        self, text_source, text_keep, text_index, source, keep, label_slot, label_ids, label_index, passes
    ):
        self.text_source = text_source  # [B, T] index of the original token at each slot of the text alone
        self.text_keep = text_keep  # [B, T] a text token sits at the slot
        self.text_index = text_index  # [B', T'] slot of the text alone each extended slot reads
        self.source = source  # [B', T'] index of the original token at each extended slot (0 where none)
        self.keep = keep  # [B', T'] a text token sits at the extended slot
        self.label_slot = label_slot  # [B', G] slot of each label token
        # [B', G] label id of each label token, -1 for the slots that pad the last group
        self.label_ids = label_ids
        self.label_index = label_index  # [B', T'] label id at each slot, -1 elsewhere
        self.attention_mask = (keep | (label_index >= 0)).long()  # [B', T']
        self.num_passes, self.per_pass, self.num_labels = passes

    @classmethod
    def build(
        cls, attention_mask: torch.Tensor, pooler: LabelTokenPooler, position_budget: int | None
    ) -> _Layout:
        real = attention_mask != 0
        batch, length = real.shape
        device = real.device
        per_pass, num_passes = pooler.per_pass, pooler.num_passes
        counts = real.sum(dim=1)
        text_budget = length if position_budget is None else position_budget - per_pass
        kept = counts.clamp(max=text_budget)
        rank = real.long().cumsum(dim=1) - 1
        is_last = rank == (counts - 1).unsqueeze(1)
        # Truncation keeps the first kept - 1 tokens and the last one (the closing special token).
        keep_token = real & ((rank < (kept - 1).unsqueeze(1)) | is_last)
        text_slot = torch.where(is_last, (kept - 1).unsqueeze(1), rank)
        insert_at = kept if pooler.position == AFTER_THE_TEXT else kept.clamp(max=pooler.position)
        # A width known from the shapes (the text's room plus the label tokens), in eager mode as in compiled and
        # exported graphs, so that all give the same outputs (last_hidden_state included): a width read off the
        # mask (int(kept.max())) would be a data-dependent shape, which export cannot keep.
        longest = min(length, text_budget)
        width = longest + per_pass
        text_width = max(longest, 1)  # texts without tokens still get a (masked) column

        # The text alone: each kept token's original index at its slot; dropped tokens go to a spare last column.
        slot_or_spare = torch.where(keep_token, text_slot, torch.full_like(text_slot, text_width))
        text_source = torch.zeros(batch, text_width + 1, dtype=torch.long, device=device)
        text_source.scatter_(1, slot_or_spare, torch.arange(length, device=device).expand(batch, length))
        text_keep = torch.zeros(batch, text_width + 1, dtype=torch.bool, device=device)
        text_keep.scatter_(1, slot_or_spare, keep_token)
        text_source, text_keep = text_source[:, :text_width], text_keep[:, :text_width]

        # The extended rows: the text with room for the label tokens at insert_at.
        slots = torch.arange(width, device=device).unsqueeze(0)
        after_labels = slots >= (insert_at + per_pass).unsqueeze(1)
        text_index = torch.where(after_labels, slots - per_pass, slots).clamp(max=text_width - 1)  # [B, T']
        keep = text_keep.gather(1, text_index) & ((slots < insert_at.unsqueeze(1)) | after_labels)
        source = text_source.gather(1, text_index)

        # One row per (text, label group).
        text_index = text_index.repeat_interleave(num_passes, dim=0)
        source = source.repeat_interleave(num_passes, dim=0)
        keep = keep.repeat_interleave(num_passes, dim=0)
        offsets = torch.arange(per_pass, device=device)
        label_slot = insert_at.repeat_interleave(num_passes).unsqueeze(1) + offsets  # [B', G]
        group = torch.arange(num_passes, device=device).repeat(batch).unsqueeze(1)
        label_id = group * per_pass + offsets  # [B', G]; ids >= num_labels pad the last group
        label_ids = torch.where(label_id < pooler.num_labels, label_id, -1)
        label_index = torch.full((batch * num_passes, width), -1, dtype=torch.long, device=device)
        label_index.scatter_(1, label_slot, label_ids)
        return cls(
            text_source,
            text_keep,
            text_index,
            source,
            keep,
            label_slot,
            label_ids,
            label_index,
            (num_passes, per_pass, pooler.num_labels),
        )

    def _at_text_slots(self, values: torch.Tensor, fill) -> torch.Tensor:
        """``values`` (``[B, T]`` or ``[B, T, H]``, in the input's layout) at the slots of the text alone."""
        index = (
            self.text_source
            if values.ndim == 2
            else self.text_source.unsqueeze(-1).expand(-1, -1, values.shape[-1])
        )
        keep = self.text_keep if values.ndim == 2 else self.text_keep.unsqueeze(-1)
        return torch.where(
            keep, values.gather(1, index), torch.as_tensor(fill, dtype=values.dtype, device=values.device)
        )

    def insert(self, text: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        """``text`` (``[B, T]`` or ``[B, T, H]``, in the layout of the text alone) spread over the extended rows, with
        ``labels`` (``[B', G]`` or ``[B', G, H]``) at the label slots; zeros where neither is."""
        rows = text.repeat_interleave(self.num_passes, dim=0)
        index = (
            self.text_index
            if text.ndim == 2
            else self.text_index.unsqueeze(-1).expand(-1, -1, text.shape[-1])
        )
        keep = self.keep if text.ndim == 2 else self.keep.unsqueeze(-1)
        spread = torch.where(
            keep, rows.gather(1, index), torch.zeros((), dtype=text.dtype, device=text.device)
        )
        if labels is None:
            return spread
        valid = self.label_ids >= 0
        slot = self.label_slot
        if labels.ndim == 3:
            valid, slot = valid.unsqueeze(-1), slot.unsqueeze(-1).expand(-1, -1, labels.shape[-1])
        labels = torch.where(
            valid, labels.to(spread.dtype), torch.zeros((), dtype=spread.dtype, device=spread.device)
        )
        return spread.scatter(1, slot, labels)

    def text_alone(self, inputs: dict[str, Any], pad_token_id: int) -> dict[str, Any]:
        """The embedding inputs of the texts alone, truncated and right-padded as in the extended rows."""
        text = {"input_ids": None, "inputs_embeds": None, "token_type_ids": None}
        if inputs.get("input_ids") is not None:
            text["input_ids"] = self._at_text_slots(inputs["input_ids"], pad_token_id)
        else:
            text["inputs_embeds"] = self._at_text_slots(inputs["inputs_embeds"], 0.0)
        if inputs.get("token_type_ids") is not None:
            text["token_type_ids"] = self._at_text_slots(inputs["token_type_ids"], 0)
        # A text without tokens attends to its first (padding) slot, whose state no one reads: no attention row is
        # empty, and no ESM token-dropout ratio divides by zero real tokens.
        empty = ~self.text_keep.any(dim=1, keepdim=True)
        first = torch.arange(self.text_keep.shape[1], device=empty.device) == 0
        text["attention_mask"] = (self.text_keep | (empty & first)).long()
        return text

    def _gather(self, values: torch.Tensor, fill) -> torch.Tensor:
        """``values`` (in the input's layout) at the text slots of the extended rows; ``fill`` elsewhere."""
        rows = values.repeat_interleave(self.num_passes, dim=0)
        index = (
            self.source if values.ndim == 2 else self.source.unsqueeze(-1).expand(-1, -1, values.shape[-1])
        )
        gathered = rows.gather(1, index)
        keep = self.keep if values.ndim == 2 else self.keep.unsqueeze(-1)
        return torch.where(keep, gathered, torch.as_tensor(fill, dtype=values.dtype, device=values.device))

    def extend_inputs(self, inputs: dict[str, Any], pad_token_id: int, vocabulary: int) -> dict[str, Any]:
        extended = {
            key: value
            for key, value in inputs.items()
            if key not in ("input_ids", "inputs_embeds", "attention_mask", "token_type_ids")
        }
        extended["attention_mask"] = self.attention_mask
        if inputs.get("input_ids") is not None:
            ids = self._gather(inputs["input_ids"], pad_token_id)
            # Label slots hold marker ids, vocabulary + label: ids no token has, which LabelTokenInput reads.
            extended["input_ids"] = torch.where(self.label_index >= 0, self.label_index + vocabulary, ids)
        else:
            extended["inputs_embeds"] = self._gather(inputs["inputs_embeds"], 0.0)
        if inputs.get("token_type_ids") is not None:
            extended["token_type_ids"] = self._gather(inputs["token_type_ids"], 0)
        return extended

    def read_labels(self, hidden_states: torch.Tensor) -> torch.Tensor:
        index = self.label_slot.unsqueeze(-1).expand(-1, -1, hidden_states.shape[-1])
        states = hidden_states.gather(1, index)  # [B', G, H]
        states = states.reshape(-1, self.num_passes * self.per_pass, hidden_states.shape[-1])
        return states[:, : self.num_labels]
