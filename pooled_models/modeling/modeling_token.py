"""PooledForTokenClassification: a Transformers backbone and a head over every token (NER, tagging).

Data flow: ``input_ids, attention_mask`` -> backbone -> last hidden state ``[B, T, H]`` -> the head, applied to
each token -> logits ``[B, T, num_labels]`` -> cross-entropy over the tokens whose label is not -100.

The config is a ``PooledConfig``, as ``BertConfig`` serves every BERT task: the head is any registered head that
works on the last dimension (``linear``, ``dense``), set by ``classifier_head`` and its settings. ``pooling`` is not
read by the token head; it is what ``AutoModel.from_pretrained`` gives as sentence embeddings of the checkpoint.
Everything the task adds to the backbone is under one module named ``classifier``, as in Transformers' own models,
so that PEFT's ``TOKEN_CLS`` task trains and saves it next to the adapter.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import TokenClassifierOutput
from transformers.utils.generic import can_return_tuple

from .configuration_pooled import PooledConfig
from .heads import HEADS, multi_sample_logits
from .modeling_pooled import PooledPreTrainedModel
from .pooling import hidden_states_for_caller
from .problem_types import SINGLE_LABEL
from .targets import IGNORE_INDEX, _checking_values, as_label_tensor
from .text_config import state_width_of

__all__ = ["TokenClassifier", "PooledForTokenClassification", "check_token_labels", "token_loss"]

# Poolings that change the backbone's input (label tokens go into every text): a token head must read the text's
# own tokens, at their own positions.
INPUT_EDITING_POOLINGS = ("label_tokens", "label_text")


class TokenClassifier(nn.Module):
    """The part a token classifier adds to its backbone: a head (chosen by ``classifier_head``) applied to the
    hidden state of every token, ``[B, T, H]`` -> ``[B, T, num_labels]``. Named ``token_head`` rather than ``head``,
    so that a sequence classifier's head never loads into it, nor it into one. In training the logits are averaged
    over ``classifier_dropout_samples`` runs of the head (multi-sample dropout, as a sequence classifier's)."""

    def __init__(self, config: PooledConfig):
        super().__init__()
        self.token_head = HEADS.lookup(config.classifier_head)(config, state_width_of(config))
        self.dropout_samples = config.classifier_dropout_samples

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return multi_sample_logits(self.token_head, hidden_states, self.dropout_samples)


def check_token_config(config: PooledConfig) -> None:
    """A token classifier is single-label per token and reads the text's own tokens."""
    if config.reads_documents:
        raise ValueError(
            f"document_window={config.document_window!r}: document mode pools a document's windows into one vector "
            "for a sequence head; a token classifier labels every token, so it has no document mode. Leave "
            "document_window unset (None) for PooledForTokenClassification."
        )
    if config.pooling in INPUT_EDITING_POOLINGS:
        raise ValueError(
            f"pooling={config.pooling!r} inserts tokens into every input; a token classifier labels the text's own "
            "tokens, so its config needs another pooling (the pooling only matters to AutoModel's embeddings)."
        )
    if config.problem_type not in (None, SINGLE_LABEL):
        raise ValueError(
            f"A token classifier gives each token one label (problem_type={SINGLE_LABEL!r}); got "
            f"problem_type={config.problem_type!r}."
        )
    if config.num_labels < 2:
        raise ValueError(f"A token classifier needs num_labels >= 2, got num_labels={config.num_labels}.")


def check_token_labels(labels: torch.Tensor, num_labels: int, shape: tuple[int, int]) -> torch.Tensor:
    """Token labels shaped like the inputs ``[batch, seq_len]``: class ids, or -100 for tokens without a label
    (padding, special tokens, the sub-tokens after a word's first)."""
    labels = as_label_tensor(labels)
    if tuple(labels.shape) != tuple(shape):
        raise ValueError(
            f"token labels have shape {tuple(labels.shape)} but the inputs are {tuple(shape)} ([batch, seq_len]); "
            f"give one label per token, {IGNORE_INDEX} where a token has none (pad labels with "
            "DataCollatorForTokenClassification)."
        )
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(f"token labels must be integer class ids (torch.long), got dtype {labels.dtype}.")
    if not _checking_values():  # value checks stay off compiled graphs, as for sequence labels
        return labels.long()
    outside = (labels != IGNORE_INDEX) & ((labels < 0) | (labels >= num_labels))
    if outside.any():
        row, column = (int(index) for index in outside.nonzero()[0])
        raise ValueError(
            f"labels[{row}, {column}] = {int(labels[row, column])} is not a class id: with num_labels={num_labels} "
            f"class ids must be in [0, {num_labels - 1}] (or {IGNORE_INDEX} for a token without a label)."
        )
    return labels.long()


def token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the labelled tokens, in float32. A batch without any labelled token gives 0 (with a
    gradient), not the NaN of an empty mean."""
    flat_logits = logits.float().reshape(-1, logits.shape[-1])
    flat_labels = labels.reshape(-1).to(logits.device)
    summed = nn.functional.cross_entropy(flat_logits, flat_labels, ignore_index=IGNORE_INDEX, reduction="sum")
    return summed / (flat_labels != IGNORE_INDEX).sum().clamp(min=1)


class PooledForTokenClassification(PooledPreTrainedModel):
    """Backbone + a head over every token, for NER and tagging; labels -100 are ignored."""

    # A sequence classifier's pooler and head have no place here, nor a PooledModel checkpoint's pooler: from such a
    # checkpoint a token classifier takes the backbone, and its head starts afresh.
    _keys_to_ignore_on_load_unexpected = [r"^classifier\.(pooler|head)\.", r"^pooler\."]
    reads_every_token = True

    def __init__(self, config: PooledConfig, backbone: PreTrainedModel | None = None):
        check_token_config(config)
        super().__init__(config)
        config.problem_type = SINGLE_LABEL
        self.num_labels = config.num_labels
        self._set_backbone(config, backbone)
        self.classifier = TokenClassifier(config)
        self._remember_structure()
        self.post_init()

    @property
    def added_tokens(self) -> int:
        return 0  # the token head adds no token to the input

    def set_input_embeddings(self, value: nn.Module):
        self.backbone.set_input_embeddings(
            value
        )  # no pooler to connect: the token head reads the text's tokens

    def head_parameters(self) -> list[nn.Parameter]:
        """The head's parameters, which start from random weights (trained with the head learning rate)."""
        return list(self.classifier.parameters())

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            A class id per token, -100 for tokens that have no label (padding, special tokens, sub-tokens).
        """
        inputs = self._model_inputs(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions, kwargs
        )
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        outputs = self.run_backbone(**inputs, output_hidden_states=output_hidden_states)
        logits = self.classifier(outputs.last_hidden_state)
        loss = None
        if labels is not None:
            loss = token_loss(logits, check_token_labels(labels, self.num_labels, logits.shape[:2]))
        return TokenClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=hidden_states_for_caller(outputs.hidden_states, output_hidden_states),
            attentions=getattr(outputs, "attentions", None),
        )


PooledForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")
