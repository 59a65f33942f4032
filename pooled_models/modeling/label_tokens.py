"""Label-token pooling: one learned token per label in every input, each label scored from its own token.

The label embeddings are a parameter of the pooler. They are written into the backbone's input
embeddings (right after the first special token, e.g. ``[CLS] <label 1> ... <label L> text [SEP]``): label slots
carry marker ids past the vocabulary, which the backbone's word-embedding module reads (:class:`LabelTokenInput`,
mixed into its class, in ``label_token_input.py``), so the tokenizer and vocabulary stay
unchanged and the backbone still does its own input processing (position and token-type embeddings,
ESM's token-dropout scaling, embedding scales...). Each label's final hidden state goes to the
:class:`~.heads.LabelTokenHead`, which gives that label's logit.

Position budget: text and label tokens must fit the backbone's position embeddings. Labels are encoded
``label_tokens_per_pass`` at a time; when they do not all fit in one pass the text is encoded once per
group of labels (the groups of a batch run as one larger batch). Texts longer than the room left are
truncated, keeping their last token (``[SEP]``/``</s>``).

Cost: with ``label_token_layers=k`` the label tokens join only the backbone's top k layers; the text runs alone through
the lower ones (see ``label_token_layers.py``).

This module holds the pooler; where the label embeddings start is ``label_token_inits.py``, where every token goes in
the extended rows ``label_token_layout.py``.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedConfig

from .backbone import position_ids_from_mask, position_offset
from .heads import LABEL_TOKEN_SCORERS, LabelTokenHead
from .label_token_inits import (
    DEFAULT_INIT,
    LabelTokenInit,
    label_token_settings_from_tokenizer,
)
from .label_token_input import (
    _word_embeddings,
    enable_label_token_input,
    marker_input_refusal,
)
from .label_token_layers import (
    ALL_LAYERS,
    LABEL_TOKEN_ATTENTION,
    ONE_WAY,
    TWO_WAY,
    layer_stack,
    run_with_late_labels,
)
from .label_token_layout import AFTER_THE_TEXT, _Layout
from .pooling import POOLINGS, Pooler
from .registry import LABEL_TOKEN_INITS
from .text_config import max_positions_of, state_width_of, text_config_of

__all__ = [
    "LabelTokenPooler",
    "LabelEmbeddings",
    "LabelTokenInit",
    "LABEL_TOKEN_INITS",
    "label_token_settings_from_tokenizer",
]


def _default_per_pass(config: PreTrainedConfig) -> int:
    # All labels in one pass while they take at most half of the positions; the text keeps the other half.
    max_positions = max_positions_of(config)
    if max_positions is None or config.num_labels <= max_positions // 2:
        return config.num_labels
    return max_positions // 2


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
        return marker_input_refusal(
            backbone,
            reads="each label token's own final state",
            writes="a learned vector per label",
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
