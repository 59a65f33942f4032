"""Label tokens that join only the backbone's top k layers (``label_token_layers=k``).

The text runs alone through the backbone's embeddings and lower layers; then each label's vector is inserted into the
hidden states, where full insertion puts its token (``[CLS] <l1>...<lL> text [SEP]``), and runs through the top k
layers with the text. With L labels and a T-token text, the lower layers cost T tokens instead of T + L, and they run
once per text however many label groups (``label_tokens_per_pass``) the top layers run.

What enters the top layers at a label's slot: the label's learned vector passed through the backbone's own embedding
module, at the position it has under full insertion (right after the tokens before the slot), i.e. exactly what full
insertion feeds the first layer. One set of label embeddings (with one initialisation) thus serves every k, and the
vector arrives on the scale of the backbone's embedding output (its LayerNorm), which the pretrained layers read,
rather than as a raw row of the word-embedding table.

The text keeps its own positions, counted over its real tokens as if it were alone (padding-invariant): the lower
layers see the text exactly as they would without labels.

Running the layers one by one means doing what the backbone's forward does around them (embeddings, attention mask,
rotary positions, final norm), so it is written per family in :class:`LayerStack` subclasses that mirror each
family's forward in transformers 5. A backbone of another family is refused with a ``ValueError``; full insertion
(``label_token_layers="all"``) works with every backbone.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import BaseModelOutput

__all__ = [
    "ALL_LAYERS",
    "LABEL_TOKEN_ATTENTION",
    "ONE_WAY",
    "TWO_WAY",
    "text_not_attending_labels",
    "LayerStack",
    "LAYER_STACKS",
    "layer_stack",
    "supports_top_layers",
    "run_with_late_labels",
]

# label_token_layers' value for full insertion: the label tokens are in the input and join every layer.
ALL_LAYERS = "all"


class LayerStack:
    """A backbone's forward split in parts: ``embed``, then its ``layers`` one by one (each given ``mask`` and
    ``layer_inputs``), then ``finish``. Subclasses mirror their family's forward."""

    model_types: ClassVar[tuple[str, ...]] = ()

    def __init__(self, backbone: nn.Module):
        self.backbone = backbone

    @property
    def layers(self) -> nn.ModuleList:
        raise NotImplementedError

    def embed(
        self,
        input_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        position_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        attention_mask: torch.Tensor,
    ) -> torch.Tensor:
        raise NotImplementedError

    def mask(self, hidden: torch.Tensor, attention_mask: torch.Tensor, materialize: bool = False):
        """The backbone's own helper: the mask form its attention implementation (eager, sdpa, flash...) reads.
        ``materialize``: a mask tensor even where no token is padding (sdpa would take None)."""
        return create_bidirectional_mask(
            config=self.backbone.config,
            inputs_embeds=hidden,
            attention_mask=attention_mask,
            allow_is_bidirectional_skip=not materialize,
        )

    def layer_inputs(self, hidden: torch.Tensor, position_ids: torch.Tensor) -> dict[str, Any]:
        """Keyword arguments every layer takes besides the hidden states and the mask. Position ids are not passed
        on as the backbones' encoders pass them: flash attention reads them as sequence boundaries, and the label
        tokens' positions repeat those of the text."""
        return {}

    def finish(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden


class BertStack(LayerStack):
    """BERT (MiniLM), RoBERTa and their copies: ``embeddings`` -> ``encoder.layer[i]``."""

    model_types = ("bert", "roberta", "xlm-roberta", "camembert")

    @property
    def layers(self):
        return self.backbone.encoder.layer

    def embed(self, input_ids, inputs_embeds, position_ids, token_type_ids, attention_mask):
        return self.backbone.embeddings(
            input_ids=input_ids,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
        )


class EsmStack(LayerStack):
    """ESM: ``embeddings`` (given embeddings skip it, as in EsmModel) -> ``encoder.layer[i]`` with rotary
    positions where the model uses them -> ``encoder.emb_layer_norm_after``."""

    model_types = ("esm",)

    @property
    def layers(self):
        return self.backbone.encoder.layer

    def embed(self, input_ids, inputs_embeds, position_ids, token_type_ids, attention_mask):
        if inputs_embeds is not None:
            return inputs_embeds
        # The mask matters: ESM zeroes padding and scales its token dropout by the real tokens.
        return self.backbone.embeddings(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
        )

    def layer_inputs(self, hidden, position_ids):
        rotary = self.backbone.rotary_embeddings
        return {} if rotary is None else {"position_embeddings": rotary(hidden, position_ids)}

    def finish(self, hidden):
        norm = self.backbone.encoder.emb_layer_norm_after
        return hidden if norm is None else norm(hidden)


class DistilBertStack(LayerStack):
    """DistilBERT: ``embeddings`` -> ``transformer.layer[i]``."""

    model_types = ("distilbert",)

    @property
    def layers(self):
        return self.backbone.transformer.layer

    def embed(self, input_ids, inputs_embeds, position_ids, token_type_ids, attention_mask):
        return self.backbone.embeddings(input_ids, inputs_embeds, position_ids)


LAYER_STACKS: dict[str, type[LayerStack]] = {
    model_type: stack for stack in (BertStack, EsmStack, DistilBertStack) for model_type in stack.model_types
}


def supports_top_layers(backbone_config) -> bool:
    """Whether a backbone of this config can run label tokens in its top layers only (``layer_stack`` accepts it,
    for a backbone built by its family's own class)."""
    return getattr(backbone_config, "model_type", None) in LAYER_STACKS and not getattr(
        backbone_config, "is_decoder", False
    )


def layer_stack(
    backbone: nn.Module, top_layers: int, needed_by: str | None = None, valid_choice: str | None = None
) -> LayerStack:
    """The :class:`LayerStack` of ``backbone``; a ``ValueError`` naming the choices when it has none. ``needed_by``
    and ``valid_choice``: the setting that needs the stack and the one to choose instead, as the refusal names them
    (by default label_token_layers=k, and full insertion)."""
    config = backbone.config
    is_decoder = getattr(config, "is_decoder", False)
    stack = LAYER_STACKS[config.model_type](backbone) if supports_top_layers(config) else None
    # A backbone of a known type built otherwise (without the modules its family's forward reads) is refused too.
    if not isinstance(getattr(stack, "layers", None), nn.ModuleList):
        needed_by = needed_by or f"label_token_layers={top_layers!r}"
        valid_choice = valid_choice or f"label_token_layers={ALL_LAYERS!r} (label tokens in every layer)"
        raise ValueError(
            f"{needed_by} runs the backbone's layers one by one, which pooled_models does for encoders of model type "
            f"{', '.join(sorted(LAYER_STACKS))}; {type(backbone).__name__} (model type "
            f"{getattr(config, 'model_type', None)!r}{', as a decoder' if is_decoder else ''}) is not one of them. "
            f"Valid choice for this backbone: {valid_choice}."
        )
    if not 1 <= top_layers <= len(stack.layers):
        raise ValueError(
            f"label_token_layers must be {ALL_LAYERS!r} or an integer in [1, {len(stack.layers)}] (the backbone's "
            f"layers), got {top_layers!r}."
        )
    return stack


# label_token_attention's choices: text and labels attend to each other, or only the labels to the text.
TWO_WAY = "two_way"
ONE_WAY = "one_way"
LABEL_TOKEN_ATTENTION = (TWO_WAY, ONE_WAY)


def text_not_attending_labels(
    mask, text: torch.Tensor, labels: torch.Tensor, backbone: nn.Module
) -> torch.Tensor:
    """``mask`` (a 4D mask as eager or sdpa attention reads it: booleans, True where a query may attend, or additive
    floats) with the attention of the text's tokens (``text``, ``[B, T]``) to the label tokens (``labels``) removed.
    Padding queries keep theirs, so that no row of the mask is empty."""
    if not (isinstance(mask, torch.Tensor) and mask.dim() == 4):
        implementation = getattr(backbone.config, "_attn_implementation", None)
        raise ValueError(
            f"label_token_attention={ONE_WAY!r} edits the attention mask, which {type(backbone).__name__}'s "
            f"{implementation!r} attention does not take as a tensor. Load the backbone with "
            f"attn_implementation='sdpa' or 'eager', or choose label_token_attention={TWO_WAY!r}."
        )
    blocked = (text.unsqueeze(-1) & labels.unsqueeze(-2)).unsqueeze(1)  # [B, 1, query, key]
    if mask.dtype == torch.bool:
        return mask & ~blocked
    return mask.masked_fill(blocked, torch.finfo(mask.dtype).min)


def run_with_late_labels(
    stack: LayerStack,
    layout,
    text: dict[str, Any],
    labels: dict[str, Any],
    top_layers: int,
    keep_hidden_states: bool,
    one_way: bool = False,
) -> BaseModelOutput:
    """Run ``text`` (the embedding inputs of the texts alone, one row per text) through the embeddings and lower
    layers, insert the embedded ``labels`` (one row per text and label group) where ``layout`` puts them, and run the
    top ``top_layers`` layers over the joined rows (``one_way``: the text's tokens do not attend to the label tokens).

    ``hidden_states`` (when kept) are in the joined rows' layout, as with full insertion: the label slots are zero
    before the layer the labels join, and hold the inserted vectors from the input of the first top layer on.
    """
    layers = stack.layers
    split = len(layers) - top_layers
    states = []  # every layer's input, in the joined rows' layout, when kept
    hidden = stack.embed(**text)
    mask = stack.mask(hidden, text["attention_mask"])
    extra = stack.layer_inputs(hidden, text["position_ids"])
    for index in range(split):
        if keep_hidden_states:
            states.append(layout.insert(hidden, None))
        hidden = layers[index](hidden, attention_mask=mask, **extra)

    hidden = layout.insert(hidden, stack.embed(**labels))
    mask = stack.mask(hidden, layout.attention_mask, materialize=one_way)
    if one_way:  # the text's tokens do not see the label tokens: its states stay those of the text alone
        mask = text_not_attending_labels(mask, layout.keep, layout.label_index >= 0, stack.backbone)
    extra = stack.layer_inputs(hidden, layout.insert(text["position_ids"], labels["position_ids"]))
    for index in range(split, len(layers)):
        if keep_hidden_states:
            states.append(hidden)
        hidden = layers[index](hidden, attention_mask=mask, **extra)
    hidden = stack.finish(hidden)
    # The last entry is the final output (after a final norm), as transformers gives it.
    hidden_states = (*states, hidden) if keep_hidden_states else None
    return BaseModelOutput(last_hidden_state=hidden, hidden_states=hidden_states)
