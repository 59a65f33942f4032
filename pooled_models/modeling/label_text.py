"""Label-text pooling: every label's own words in the input, read by the backbone next to the text.

Each label is a segment ``[marker] name [SEP]`` (the tokenizer's ids of its name, or of its description from
``label_descriptions``, with a learned marker vector in the first slot, where the tokenizer puts ``[CLS]``/``<s>``;
the marker starts at that token's embedding). The text and the labels run through the backbone:

* the backbone's lower layers encode the text alone and each label alone (once per call, not once per text);
* in its top ``label_text_layers`` layers, every label's segment also attends to the text: text ``b`` is joined with
  every group of ``label_tokens_per_pass`` labels (``label_text_layout.py``). The text never attends to the labels
  (its states are exactly those the backbone gives it alone) and a label never attends to another label, so a label's
  score does not depend on which other labels are asked, nor on how they are grouped. ``label_text_layers=0``: the
  labels never read the text (text and labels are compared as two embeddings); ``"all"``: from the first layer on.

Each label's vector is its marker's final state or the mean over its segment (``label_text_pooling``); the text's is
the mean over its own final states. The head (``heads.LabelTextHead``) scores each label: one scorer shared by every
label (``label_text_scorer="shared"``: the scaled cosine of the text's and the label's vectors), which scores labels
given at call time too (``label_input_ids``: the open label set), or one weight vector per label (``"per_label"``).

The labels' texts as token ids (read from the tokenizer, padded, checked in the config and at call time) are
``label_text_inputs.py``'s; their names stay importable from here.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import PreTrainedConfig
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import logging

from .backbone import position_ids_from_mask, position_offset
from .heads import LABEL_TEXT_SCORERS, LabelTextHead
from .label_text_inputs import (
    _as_tensor,
    _check_call_labels,
    _check_descriptions,
    _check_label_text_ids,
    _label_names_of,
    _require,
    label_text_token_ids,
    label_texts,
    pad_label_ids,
)
from .label_text_layout import (
    LabelSegments,
    group_segments,
    joined_attention,
    masked_mean,
    segment_vectors,
    split_joined,
)
from .label_text_margin import (
    check_seen_margin,
    default_seen_margin,
    seen_label_texts,
    seen_margin,
    seen_mask,
    seen_mask_of_rows,
)
from .label_token_layers import ALL_LAYERS, layer_stack
from .label_tokens import _word_embeddings, enable_label_token_input, marker_input_refusal
from .pooling import Pooler
from .registry import POOLINGS
from .text_config import max_positions_of, state_width_of, text_config_of

__all__ = [
    "LabelTextPooler",
    "LabelMarker",
    "LABEL_TEXT_POOLINGS",
    "label_texts",
    "label_text_token_ids",
    "pad_label_ids",
    "seen_margins_asked",
]

logger = logging.get_logger(__name__)

# label_text_pooling: which states give a label's vector.
LABEL_TEXT_POOLINGS = ("mean", "marker")
# Slots of label text per pass when the backbone states no position limit (the default per pass keeps a pass's labels
# within half of the positions otherwise, as label tokens do).
DEFAULT_LABEL_SLOTS = 256


def _default_per_pass(config: PreTrainedConfig) -> int:
    # Every label in one pass while their slots take at most half of the backbone's positions (the joined rows then stay
    # within what the backbone was trained on), else as many labels as fit there.
    ids = config.label_text_ids or []
    length = max((len(row) for row in ids), default=1)
    positions = max_positions_of(config)
    budget = DEFAULT_LABEL_SLOTS if positions is None else positions // 2
    return max(1, min(config.num_labels, budget // length))


class LabelMarker(nn.Module):
    """The learned marker vector of every label segment, read by the backbone's input embeddings for the marker id
    (``label_token_input.LabelTokenInput`` reads ``pooler.label_embeddings``). A module read through its forward, so that
    offloading hooks bring it to the device; initialised by the pooler."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(1, hidden_size))

    def init_parameters(self, config: PreTrainedConfig, input_embeddings: nn.Module) -> None:
        """The embedding of the token the marker takes the place of (the tokenizer's CLS), else the vocabulary's mean."""
        word_embeddings = input_embeddings.weight
        ids = config.label_text_ids
        with torch.no_grad():
            start = word_embeddings[ids[0][0]] if ids else word_embeddings.mean(dim=0)
        init.copy_(self.weight, start.expand_as(self.weight))

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        return self.weight[index]


def _num_layers(config: PreTrainedConfig) -> int | None:
    return getattr(text_config_of(config), "num_hidden_layers", None)


@POOLINGS.register("label_text")
class LabelTextPooler(Pooler):
    """Every label's text in the input, next to the text; returns ``[B, 1 + L, H]``: the text's vector, then each
    label's (``PooledModel`` gives the labels' ``[B, L, H]``)."""

    config_options = {
        "label_descriptions": None,
        "label_text_ids": None,  # read from the tokenizer by from_backbone, or given
        "label_text_scorer": "shared",
        "label_text_pooling": "mean",
        "label_text_layers": 0,
        "label_tokens_per_pass": _default_per_pass,
        "label_text_seen_margin": default_seen_margin,  # label_text_margin.py says why this number
        "label_text_seen_ids": None,
    }
    head_class = LabelTextHead
    reads_label_texts = True

    @classmethod
    def tokenizer_settings(cls, config_kwargs, load_tokenizer):
        if config_kwargs.get("label_text_ids") is not None:
            return {}
        texts = label_texts(_label_names_of(config_kwargs), config_kwargs.get("label_descriptions"))
        return {"label_text_ids": label_text_token_ids(texts, load_tokenizer())}

    @classmethod
    def check_config(cls, config):
        num_labels = config.num_labels
        _require(
            config.label_text_scorer in LABEL_TEXT_SCORERS,
            f"Unknown label_text_scorer {config.label_text_scorer!r}. Valid choices: {', '.join(LABEL_TEXT_SCORERS)}.",
        )
        _require(
            config.label_text_pooling in LABEL_TEXT_POOLINGS,
            f"Unknown label_text_pooling {config.label_text_pooling!r}. Valid choices: "
            f"{', '.join(LABEL_TEXT_POOLINGS)}.",
        )
        layers, num_layers = config.label_text_layers, _num_layers(config)
        _require(
            layers == ALL_LAYERS
            or (
                isinstance(layers, int)
                and not isinstance(layers, bool)
                and 0 <= layers <= (num_layers or layers)
            ),
            f"label_text_layers must be {ALL_LAYERS!r} or an integer in [0, num_hidden_layers={num_layers}] (the "
            f"backbone's top layers in which the labels read the text; 0: never), got {layers!r}.",
        )
        per_pass = config.label_tokens_per_pass
        _require(
            isinstance(per_pass, int) and not isinstance(per_pass, bool) and 1 <= per_pass <= num_labels,
            f"label_tokens_per_pass must be an integer in [1, num_labels={num_labels}], got {per_pass!r}.",
        )
        _check_descriptions(config)
        _check_label_text_ids(config)
        check_seen_margin(config)
        _require(
            config.position_ids_from_mask,
            "pooling='label_text' needs position_ids_from_mask=True: the labels' positions are counted like a text's.",
        )

    def __init__(self, config: PreTrainedConfig):
        super().__init__()
        self.num_labels = config.num_labels
        self.output_dim = state_width_of(config)
        # One learned marker vector, read by the backbone's input embeddings for the marker id (LabelTokenInput).
        self.label_embeddings = LabelMarker(self.output_dim)
        self.pooling = config.label_text_pooling
        self.per_pass = config.label_tokens_per_pass
        layers = config.label_text_layers
        self.top_layers = _num_layers(config) if layers == ALL_LAYERS else layers
        # The labels' own texts (the closed label set), as config.json holds them: padded lists made into tensors at each
        # call (constants to a compiled or exported graph), on the inputs' device. Not buffers: from_pretrained leaves
        # buffers that are not in the checkpoint unset. Built from a config alone (no texts): every label is its marker
        # alone, as untrained label tokens would be.
        rows = [list(ids) for ids in config.label_text_ids or []]
        self.has_label_texts = bool(rows)
        width = max((len(row) for row in rows), default=1)
        rows = rows or [[0]] * self.num_labels
        self.label_rows = [row + [0] * (width - len(row)) for row in rows]
        self.label_row_mask = [[1] * len(row) + [0] * (width - len(row)) for row in rows]
        # The config itself (not a copy): the seen-label margin is read at each call (calibrate).
        self.model_config = config

    @classmethod
    def backbone_refusal(cls, backbone):
        if getattr(backbone.config, "model_type", None) == "reformer":
            return (
                "runs each label's text through the backbone as a sequence of its own, but ReformerModel trains only "
                "on sequences exactly as long as its axial_pos_shape multiplies out to"
            )
        return marker_input_refusal(
            backbone,
            reads="each label's own final states",
            writes="a learned marker vector before every label",
        )

    def check_backbone(self, backbone: nn.Module, position_budget: int | None) -> None:
        super().check_backbone(backbone, position_budget)
        embeddings = _word_embeddings(backbone)
        width = embeddings.weight.shape[1]
        if self.label_embeddings.weight.shape[1] != width:
            self.label_embeddings = LabelMarker(width)  # factorised embeddings: a token embedding's width
        if self.top_layers:
            layer_stack(
                backbone,
                self.top_layers,
                needed_by=f"pooling='label_text' with label_text_layers={self.top_layers}",
                valid_choice="label_text_layers=0 (labels and text compared as two embeddings)",
            )

    def connect(self, model: nn.Module) -> None:
        enable_label_token_input(_word_embeddings(model.backbone), model)

    def public_output(self, pooled: torch.Tensor) -> torch.Tensor:
        return pooled[:, 1:]

    def calibrate(self, logits: torch.Tensor, inputs: dict[str, Any]) -> torch.Tensor:
        """``logits`` less the seen-label margin of every seen label (``label_text_margin.py``). Read from the config
        at each call, so that an edit or a ``from_pretrained`` override applies."""
        margins = seen_margins_asked(self.model_config, inputs, self.num_labels, logits.device)
        return logits if margins is None else logits - margins.to(logits.dtype)

    # -- forward -------------------------------------------------------------------------------------

    def encode(self, encoder, inputs: dict[str, Any], output_hidden_states: bool):
        inputs = dict(inputs)
        segments = self._segments(
            encoder,
            inputs.pop("label_input_ids", None),
            inputs.pop("label_attention_mask", None),
            inputs["attention_mask"],
        )
        if inputs.get("position_ids") is not None:
            raise ValueError("pooling='label_text' derives position ids itself; do not pass position_ids.")
        if self.top_layers == 0:
            outputs, text, labels = self._encode_apart(encoder, inputs, segments, output_hidden_states)
        else:
            outputs, text, labels = self._encode_joined(encoder, inputs, segments, output_hidden_states)
        text_vector = masked_mean(text, inputs["attention_mask"], dim=1)
        label_vectors = segment_vectors(labels, segments.mask, self.pooling)
        if label_vectors.ndim == 2:  # the labels did not read the text: the same vectors for every text
            label_vectors = label_vectors.unsqueeze(0).expand(text.shape[0], -1, -1)
        return outputs, torch.cat([text_vector.unsqueeze(1), label_vectors], dim=1)

    def _segments(self, encoder, label_ids, label_mask, reference: torch.Tensor) -> LabelSegments:
        """The label segments of this call: those given (the open label set) or the model's own, with the marker id
        (one past the vocabulary) in every first slot."""
        # The inputs' device: under offloading the weights wait on the meta device until their module runs.
        vocabulary, device = _word_embeddings(encoder.backbone).num_embeddings, reference.device
        if label_ids is None:
            if label_mask is not None:
                raise ValueError("label_attention_mask was given without label_input_ids.")
            if not self.has_label_texts:
                logger.warning_once(
                    "pooling='label_text' has no label texts (label_text_ids is unset: the model was built from its "
                    "config alone), so its labels cannot be told apart by their words. Build it with from_backbone(), "
                    "which reads them with the backbone's tokenizer, set label_text_ids, or pass label_input_ids."
                )
            label_ids = torch.tensor(self.label_rows, dtype=torch.long, device=device)
            label_mask = torch.tensor(self.label_row_mask, dtype=torch.long, device=device)
        else:
            label_ids = _as_tensor(label_ids, "label_input_ids", device)
            label_mask = (
                torch.ones_like(label_ids)
                if label_mask is None
                else _as_tensor(label_mask, "label_attention_mask", device)
            )
            _check_call_labels(label_ids, label_mask.to(label_ids.device), vocabulary)
            label_mask = label_mask.to(label_ids.device)
        first = torch.arange(label_ids.shape[1], device=label_ids.device) == 0
        marked = torch.where(first, torch.full_like(label_ids, vocabulary), label_ids)
        return LabelSegments(marked, label_mask, self.per_pass)

    def _encode_apart(self, encoder, inputs, segments: LabelSegments, output_hidden_states):
        """``label_text_layers=0``: the text and the labels each through the whole backbone, alone."""
        outputs = encoder.run_backbone(**inputs, output_hidden_states=output_hidden_states)
        labels = encoder.run_backbone(input_ids=segments.ids, attention_mask=segments.mask)
        return outputs, outputs.last_hidden_state, labels.last_hidden_state

    def _encode_joined(self, encoder, inputs, segments: LabelSegments, output_hidden_states):
        """The text and the labels apart through the lower layers, joined in the top ``label_text_layers``."""
        unsupported = sorted(
            key
            for key, value in inputs.items()
            if key not in _INPUTS and value is not None and value is not False
        )
        if unsupported:
            raise ValueError(
                f"pooling='label_text' with label_text_layers={self.top_layers} runs the backbone's layers itself, "
                f"without {', '.join(unsupported)}; label_text_layers=0 runs the backbone's own forward."
            )
        stack = layer_stack(encoder.backbone, self.top_layers)
        offset = position_offset(encoder.backbone)
        text_mask = inputs["attention_mask"]
        # A text without a real token attends to its first slot, whose state no one reads: no empty attention row.
        text_mask = text_mask.masked_fill(~(text_mask != 0).any(dim=1, keepdim=True) & _first(text_mask), 1)
        text_positions = position_ids_from_mask(text_mask, offset)
        label_positions = position_ids_from_mask(segments.mask, offset)
        text = stack.embed(
            inputs.get("input_ids"),
            inputs.get("inputs_embeds"),
            text_positions,
            inputs.get("token_type_ids"),
            text_mask,
        )
        labels = stack.embed(segments.ids, None, label_positions, None, segments.mask)
        kept = [text] if output_hidden_states else None
        layers = stack.layers
        split = len(layers) - self.top_layers
        text_attention, label_attention = stack.mask(text, text_mask), stack.mask(labels, segments.mask)
        text_extra = stack.layer_inputs(text, text_positions)
        label_extra = stack.layer_inputs(labels, label_positions)
        for index in range(split):
            text = layers[index](text, attention_mask=text_attention, **text_extra)
            labels = layers[index](labels, attention_mask=label_attention, **label_extra)
            if kept is not None:
                kept.append(text)
        batch, text_length = text_mask.shape
        groups = segments.num_groups
        joined = torch.cat(
            [text.repeat_interleave(groups, dim=0), group_segments(labels, segments).repeat(batch, 1, 1)],
            dim=1,
        )
        joined_mask = torch.cat(
            [
                text_mask.repeat_interleave(groups, dim=0),
                group_segments(segments.mask, segments).repeat(batch, 1),
            ],
            dim=1,
        )
        attention = _in_backbone_form(
            stack.mask(joined, joined_mask, materialize=True), joined_attention(text_mask, segments), stack
        )
        positions = torch.cat(
            [
                text_positions.repeat_interleave(groups, dim=0),
                group_segments(label_positions, segments).repeat(batch, 1),
            ],
            dim=1,
        )
        extra = stack.layer_inputs(joined, positions)
        for index in range(split, len(layers)):
            joined = layers[index](joined, attention_mask=attention, **extra)
            if kept is not None and index < len(layers) - 1:
                kept.append(split_joined(joined, text_length, segments, batch)[0])
        joined = stack.finish(joined)
        text, labels = split_joined(joined, text_length, segments, batch)
        hidden_states = (*kept, text) if kept is not None else None
        return BaseModelOutput(last_hidden_state=text, hidden_states=hidden_states), text, labels


# What the model passes every pooler's encode; other keywords (output_attentions...) are the backbone forward's own.
_INPUTS = ("input_ids", "inputs_embeds", "attention_mask", "token_type_ids", "position_ids")


def _first(mask: torch.Tensor) -> torch.Tensor:
    return (torch.arange(mask.shape[1], device=mask.device) == 0).unsqueeze(0)


def _in_backbone_form(backbone_mask, allowed: torch.Tensor, stack) -> torch.Tensor:
    """``allowed`` (``[B, 1, Q, K]`` booleans) in the form the backbone's attention reads its mask: booleans (sdpa) or
    additive floats (eager). The padding the backbone's own mask holds is in ``allowed`` already."""
    if not (isinstance(backbone_mask, torch.Tensor) and backbone_mask.dim() == 4):
        implementation = getattr(stack.backbone.config, "_attn_implementation", None)
        raise ValueError(
            f"pooling='label_text' sets which tokens attend to which, which {type(stack.backbone).__name__}'s "
            f"{implementation!r} attention does not take as a mask tensor. Load the backbone with "
            "attn_implementation='sdpa' or 'eager', or choose label_text_layers=0."
        )
    if backbone_mask.dtype == torch.bool:
        return allowed
    blocked = torch.finfo(backbone_mask.dtype).min
    return torch.zeros(allowed.shape, dtype=backbone_mask.dtype, device=allowed.device).masked_fill(
        ~allowed, blocked
    )


def seen_margins_asked(config, inputs: dict[str, Any], num_labels: int, device) -> torch.Tensor | None:
    """``[L]``: what the seen-label margin takes off each label asked (``label_input_ids``, else the model's own
    labels), or None where the model takes none (``seen_margin``). The forward takes it off; the zero-shot pipeline
    adds it back for a sigmoid's scores."""
    margin = seen_margin(config)
    if margin == 0.0:
        return None
    seen = seen_label_texts(config)
    label_ids = inputs.get("label_input_ids")
    if label_ids is None:
        rows = config.label_text_ids or [[0]] * num_labels
        mask = torch.tensor(seen_mask_of_rows(rows, seen), device=device)
    else:
        label_ids = _as_tensor(label_ids, "label_input_ids", device)
        given = inputs.get("label_attention_mask")
        label_mask = (
            torch.ones_like(label_ids) if given is None else _as_tensor(given, "label_attention_mask", device)
        )
        mask = seen_mask(label_ids, label_mask, seen)
    return margin * mask.float()
