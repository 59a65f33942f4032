"""Classification heads: pooled vectors (or per-label vectors) to logits.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import PreTrainedConfig
from transformers import initialization as init
from transformers.activations import ACT2FN

from .registry import HEADS, Component
from .text_config import state_width_of

__all__ = [
    "Head",
    "LinearHead",
    "DenseHead",
    "LabelTokenHead",
    "HEADS",
    "register_head",
    "LABEL_TOKEN_SCORERS",
    "LABEL_TEXT_SCORERS",
    "LabelTextHead",
    "multi_sample_logits",
]

register_head = HEADS.register


def _hidden_size(config: PreTrainedConfig) -> int:
    return state_width_of(config)


class Head(nn.Module, Component):
    """Base class of the classification heads chosen by ``classifier_head``: ``(config, input_dim)`` ->
    a module from pooled vectors ``[B, input_dim]`` to logits ``[B, num_labels]``. Every head reads
    ``classifier_dropout``; ``config_options`` lists the settings a head reads besides."""

    def __init__(self, config: PreTrainedConfig, input_dim: int):
        super().__init__()


def multi_sample_logits(head: nn.Module, features: torch.Tensor, samples: int) -> torch.Tensor:
    """Multi-sample dropout (Inoue 2019, ``classifier_dropout_samples``): in training, the mean of the logits of
    ``samples`` runs of ``head`` over the same ``features``, each run drawing its own dropout masks (for every dropout
    of the head: a dense head's inner one too), so one step learns from several thinned heads at the cost of the head
    alone, not of the backbone. In evaluation dropout is off and every run would give the same logits: one run.

    The runs are a Python loop, not one run over ``samples`` stacked copies: the same graph for any batch size
    (torch.compile, export), and run ``k`` draws the masks that ``head(features)`` would draw ``k``-th in a row.
    """
    if samples == 1 or not head.training:
        return head(features)
    runs = [head(features) for _ in range(samples)]
    # Averaged in float32, returned in the head's dtype (half-precision logits lose the small differences).
    return torch.stack(runs).mean(dim=0, dtype=torch.float32).to(runs[0].dtype)


@HEADS.register("linear")
class LinearHead(Head):
    """Dropout and a linear layer (BERT style)."""

    def __init__(self, config: PreTrainedConfig, input_dim: int):
        super().__init__(config, input_dim)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.out_proj = nn.Linear(input_dim, config.num_labels)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.dropout(pooled))


@HEADS.register("dense")
class DenseHead(Head):
    """Dropout, dense, activation, dropout and an output projection (RoBERTa/ESM style)."""

    config_options = {"classifier_hidden_size": _hidden_size, "classifier_activation": "tanh"}

    @classmethod
    def check_config(cls, config):
        size = config.classifier_hidden_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"classifier_hidden_size must be an integer >= 1, got {size!r}.")
        if config.classifier_activation not in ACT2FN:
            raise ValueError(
                f"Unknown classifier_activation {config.classifier_activation!r}. "
                f"Valid choices: {', '.join(sorted(ACT2FN))}."
            )

    def __init__(self, config: PreTrainedConfig, input_dim: int):
        super().__init__(config, input_dim)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.dense = nn.Linear(input_dim, config.classifier_hidden_size)
        self.activation = ACT2FN[config.classifier_activation]
        self.out_proj = nn.Linear(config.classifier_hidden_size, config.num_labels)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        hidden = self.activation(self.dense(self.dropout(pooled)))
        return self.out_proj(self.dropout(hidden))


LABEL_TOKEN_SCORERS = ("per_label", "shared")


class LabelTokenHead(nn.Module):
    """Scores each label from its own token: ``[B, L, H]`` label states -> ``[B, L]`` logits.

    ``label_token_scorer="per_label"`` gives every label its own weight vector and bias (as many
    parameters as a linear head); ``"shared"`` scores every label with one vector, so the label token
    itself must carry what distinguishes the label. With ``classifier_head="dense"`` a shared
    dense + activation layer comes first.
    """

    def __init__(self, config: PreTrainedConfig, input_dim: int):
        super().__init__()
        self.dropout = nn.Dropout(config.classifier_dropout)
        if config.classifier_head == "dense":
            self.dense = nn.Linear(input_dim, config.classifier_hidden_size)
            self.activation = ACT2FN[config.classifier_activation]
            input_dim = config.classifier_hidden_size
        else:
            self.dense = None
        self.per_label = config.label_token_scorer == "per_label"
        scorers = config.num_labels if self.per_label else 1
        self.weight = nn.Parameter(torch.empty(scorers, input_dim))
        self.bias = nn.Parameter(torch.zeros(scorers))
        self.initializer_range = config.initializer_range

    def init_parameters(self, config: PreTrainedConfig, input_embeddings: nn.Module) -> None:
        init.normal_(self.weight, std=self.initializer_range)
        init.zeros_(self.bias)

    def forward(self, label_states: torch.Tensor) -> torch.Tensor:
        hidden = self.dropout(label_states)
        if self.dense is not None:
            hidden = self.dropout(self.activation(self.dense(hidden)))
        # per_label: one weight row per label; shared: the single row broadcasts over the labels.
        return (hidden * self.weight).sum(dim=-1) + self.bias


LABEL_TEXT_SCORERS = ("shared", "per_label")
# The shared scorer's start: logits = 20 * (cos - 0.3). 20 is sentence-transformers' scale for cosine similarities in
# its ranking loss; 0.3 puts the decision between the similarity of a text to an unrelated label name and to a fitting
# one, as all-MiniLM-L6-v2 gives them. Both are learned, in those units (a step of the head's learning rate moves them
# as much at any size).
SHARED_SCALE = 20.0
SHARED_OFFSET = 0.3


class LabelTextHead(nn.Module):
    """Scores labels read as text (``pooling="label_text"``): ``[B, 1 + L, H]`` (the text's vector, then each
    label's) -> ``[B, L]`` logits.

    Both scorers start from the similarity of the text and the label, ``exp(log_scale) * (cos(text, label) - offset)``
    (two learned numbers). ``label_text_scorer="shared"`` is that alone: it scores any label given as text, one never
    seen in training included. ``"per_label"`` adds each label's own linear term on the text's vector, ``w_l . text +
    b_l``, starting at zero (a linear head, as mean pooling's, on top of what the label's words say), for the labels the
    model was built with.
    """

    def __init__(self, config: PreTrainedConfig, input_dim: int):
        super().__init__()
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.log_scale = nn.Parameter(torch.empty(()))
        self.offset = nn.Parameter(torch.empty(()))
        self.per_label = config.label_text_scorer == "per_label"
        if self.per_label:
            self.weight = nn.Parameter(torch.empty(config.num_labels, input_dim))
            self.bias = nn.Parameter(torch.empty(config.num_labels))

    def init_parameters(self, config: PreTrainedConfig, input_embeddings: nn.Module) -> None:
        init.constant_(self.log_scale, math.log(SHARED_SCALE))
        init.constant_(self.offset, SHARED_OFFSET)
        if self.per_label:  # zero: the model starts as the shared scorer, the labels' words its only prior
            init.zeros_(self.weight)
            init.zeros_(self.bias)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        text, labels = self.dropout(pooled[:, :1]), self.dropout(pooled[:, 1:])
        # In float32: half-precision vectors lose the small differences between similar labels.
        cosine = nn.functional.cosine_similarity(text.float(), labels.float(), dim=-1, eps=1e-6)
        logits = self.log_scale.float().exp() * (cosine - self.offset.float())
        if self.per_label:
            if labels.shape[1] != self.weight.shape[0]:
                raise ValueError(
                    f"label_text_scorer='per_label' scores the {self.weight.shape[0]} labels the model was built "
                    f"with, not {labels.shape[1]} labels given at call time; a model with label_text_scorer='shared' "
                    "scores any labels."
                )
            logits = logits + text[:, 0].float() @ self.weight.float().T + self.bias.float()
        return logits.to(pooled.dtype)
