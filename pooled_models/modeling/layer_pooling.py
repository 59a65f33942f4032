"""Layer strategies: a *layer selection* (every hidden state from ``layer_start`` on), each layer reduced by a token
pooling (``layer_token_pooling``), and a *layer combination*: concatenation, learned weights or an LSTM.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
from torch import nn
from transformers import PreTrainedConfig
from transformers import initialization as init

from .pooling import POOLINGS, Pooler, TokenPooler, hidden_size_of, require_int, token_pooling_names
from .registry import OptionDefault
from .text_config import text_config_of

__all__ = ["LayerPooler", "ConcatLayersPooler", "WeightedLayerPooler", "LSTMLayerPooler", "selected_layers"]


def _num_layers(config: PreTrainedConfig) -> int:
    layers = getattr(text_config_of(config), "num_hidden_layers", None)
    if not isinstance(layers, int):
        raise ValueError(
            f"pooling={config.pooling!r} reads the backbone's layers, but its config "
            f"({type(text_config_of(config)).__name__}) has no num_hidden_layers. The token poolings "
            f"({', '.join(token_pooling_names())}) read the last layer only."
        )
    return layers


def _num_hidden_states(config: PreTrainedConfig) -> int:
    # hidden_states holds the embedding output followed by one entry per layer.
    return _num_layers(config) + 1


def selected_layers(config: PreTrainedConfig) -> list[int]:
    """Indices into ``hidden_states`` (0 = embeddings, L = last layer) chosen by ``layer_start``."""
    return list(range(_num_hidden_states(config)))[config.layer_start :]


# Backbones whose layers' hidden states are not one state per input token of the output's width: a layer strategy
# combines such states under the input's mask.
LAYER_STATES_UNLIKE_OUTPUT = {
    "canine": "downsamples the characters between its shallow and its deep layers, so its layers' states have "
    "different lengths",
    "funnel": "pools its states to a shorter sequence from block to block, so its layers' states have different "
    "lengths",
    "reformer": "gives its layers' states one residual stream wide (hidden_size) and its output both streams side "
    "by side (2 x hidden_size)",
}


class LayerPooler(Pooler):
    """Reduces each selected layer with the token pooler ``layer_token_pooling`` and combines the layers.

    ``layer_start`` indexes ``hidden_states`` like a Python list: 0 is the embedding output, 1 the first
    layer, -1 the last layer, -4 the last four.
    """

    default_layer_start: ClassVar[OptionDefault] = 1

    @classmethod
    def options_for(cls, config):
        token_name = config.layer_token_pooling or "cls"
        options = {"layer_start": cls.default_layer_start, "layer_token_pooling": "cls", **cls.config_options}
        if token_name in POOLINGS and issubclass(POOLINGS[token_name], TokenPooler):
            options.update(POOLINGS[token_name].options_for(config))
        return options

    @classmethod
    def every_option(cls):
        token_options = (part.every_option() for part in POOLINGS.values() if issubclass(part, TokenPooler))
        return {"layer_start", "layer_token_pooling", *cls.config_options}.union(*token_options)

    @classmethod
    def backbone_refusal(cls, backbone):
        reason = LAYER_STATES_UNLIKE_OUTPUT.get(getattr(backbone.config, "model_type", None))
        if reason is None:
            return None
        return f"combines several layers' states, one per input token, but {type(backbone).__name__} {reason}"

    @classmethod
    def check_config(cls, config):
        valid = token_pooling_names()
        if config.layer_token_pooling not in valid:
            raise ValueError(
                f"layer_token_pooling must be a token pooling, got {config.layer_token_pooling!r}. "
                f"Valid choices: {', '.join(valid)}."
            )
        POOLINGS[config.layer_token_pooling].check_config(config)
        count = _num_hidden_states(config)
        start = config.layer_start
        if isinstance(start, bool) or not isinstance(start, int) or not -count <= start < count:
            raise ValueError(
                f"layer_start={start!r} is not a layer of this backbone: it has {count - 1} layers, so "
                f"hidden_states has {count} entries (0 = embeddings, {count - 1} = last layer). "
                f"Valid choices: {-count} to {count - 1}."
            )

    def __init__(self, config):
        super().__init__()
        self.layer_indices = selected_layers(config)
        last = _num_hidden_states(config) - 1
        # Only the layers it combines are asked of the backbone (all of them, or the last ones).
        self.hidden_states_read = None if self.layer_indices == [last] else list(self.layer_indices)
        self.token_pooler = POOLINGS[config.layer_token_pooling](config)

    def select(self, hidden_states, all_hidden_states) -> list[torch.Tensor]:
        if self.hidden_states_read is None:
            return [hidden_states]
        if all_hidden_states is None or any(all_hidden_states[i] is None for i in self.layer_indices):
            raise ValueError(
                f"pooling={self.name!r} reads hidden states {self.layer_indices}: call the backbone with "
                "output_hidden_states=True (or those indices) and pass them as all_hidden_states."
            )
        return [all_hidden_states[i] for i in self.layer_indices]


def _last_k_layers(k: int) -> Callable[[PreTrainedConfig], int]:
    # "The last k layers", or every layer for backbones with fewer (tiny test models).
    return lambda config: -min(k, _num_layers(config))


@POOLINGS.register("concat_layers")
class ConcatLayersPooler(LayerPooler):
    """Concatenation of the token pooling of each selected layer (default: CLS of the last 4 layers)."""

    default_layer_start = staticmethod(_last_k_layers(4))

    def __init__(self, config):
        super().__init__(config)
        self.output_dim = len(self.layer_indices) * self.token_pooler.output_dim

    def forward(self, hidden_states, attention_mask=None, all_hidden_states=None):
        layers = self.select(hidden_states, all_hidden_states)
        return torch.cat([self.token_pooler(layer, attention_mask) for layer in layers], dim=-1)


@POOLINGS.register("weighted_layer")
class WeightedLayerPooler(LayerPooler):
    """Learned softmax weights over the selected layers (a scalar mix), then the token pooling.

    Mixing before reducing runs the token pooling once; for linear reductions (cls, mean) it is the
    same as mixing the reduced vectors.
    """

    def __init__(self, config):
        super().__init__(config)
        self.layer_logits = nn.Parameter(torch.zeros(len(self.layer_indices)))
        self.output_dim = self.token_pooler.output_dim

    def init_parameters(self, config, input_embeddings):
        init.zeros_(self.layer_logits)  # uniform weights at the start

    def forward(self, hidden_states, attention_mask=None, all_hidden_states=None):
        layers = self.select(hidden_states, all_hidden_states)
        weights = self.layer_logits.softmax(dim=0).to(hidden_states.dtype)
        mixed = sum(weight * layer for weight, layer in zip(weights, layers, strict=True))
        return self.token_pooler(mixed, attention_mask)


@POOLINGS.register("lstm")
class LSTMLayerPooler(LayerPooler):
    """An LSTM over one vector per selected layer (the token pooling of that layer); its last output."""

    config_options = {"lstm_hidden_size": hidden_size_of}

    def __init__(self, config):
        super().__init__(config)
        self.lstm = nn.LSTM(self.token_pooler.output_dim, config.lstm_hidden_size, batch_first=True)
        self.output_dim = config.lstm_hidden_size

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        require_int("lstm_hidden_size", config.lstm_hidden_size, 1)

    def forward(self, hidden_states, attention_mask=None, all_hidden_states=None):
        layers = self.select(hidden_states, all_hidden_states)
        per_layer = torch.stack([self.token_pooler(layer, attention_mask) for layer in layers], dim=1)
        output, _ = self.lstm(per_layer)
        return output[:, -1]
