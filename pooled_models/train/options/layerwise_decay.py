"""Layer-wise learning-rate decay (``--layerwise_lr_decay``): backbone layer i of L trains at
``learning_rate x decay^(L-1-i)``, the embeddings at ``learning_rate x decay^L``; the layers are found by the numbers
in the backbone's parameter names (a backbone without them is refused before anything is written)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import nn

from ...errors import UsageError
from . import TrainingOption, backbone_of, register_option, require_number

__all__ = ["LAYER_NUMBER", "layer_numbers", "embedding_parameters", "layerwise_learning_rates"]

# The number of a backbone layer in a parameter's name: BERT, RoBERTa, MiniLM, DeBERTa, ESM ``encoder.layer.3.``,
# DistilBERT ``transformer.layer.3.``, ModernBERT and Llama ``layers.3.``, GPT-2 ``h.3.``, T5 ``block.3.``. The first
# number counts: a layer's own numbered parts (T5's ``block.3.layer.0.``) belong to it.
LAYER_NUMBER = re.compile(r"(?:^|\.)(?:layer|layers|h|block|blocks)\.(\d+)\.")


def layer_numbers(backbone: nn.Module) -> dict[int, int]:
    """id of a parameter -> the number of the backbone layer it belongs to (parameters of no layer are left out)."""
    numbers = {}
    for name, parameter in backbone.named_parameters():
        match = LAYER_NUMBER.search(name)
        if match:
            numbers[id(parameter)] = int(match.group(1))
    return numbers


def embedding_parameters(backbone: nn.Module) -> set[int]:
    """ids of the backbone's input embeddings: every ``nn.Embedding`` outside the numbered layers (GPT-2's ``wte`` and
    ``wpe``, Llama's ``embed_tokens``), and everything under a top-level module named for embeddings (BERT's
    ``embeddings``, with its LayerNorm)."""
    found = set()
    for name, module in backbone.named_modules():
        outside_layers = not LAYER_NUMBER.search(name + ".")
        if (isinstance(module, nn.Embedding) and outside_layers) or "embed" in name.split(".")[0]:
            found.update(id(parameter) for parameter in module.parameters(recurse=False))
    return found


def layerwise_learning_rates(backbone: nn.Module, learning_rate: float, decay: float) -> dict[int, float]:
    """id of every backbone parameter -> its learning rate: layer i of L at ``learning_rate x decay^(L-1-i)``, the
    embeddings at ``decay^L``, and parameters of neither (a final norm, BERT's pooler), which sit above the last
    layer, at ``learning_rate``.

    Raises a UsageError for a backbone whose parameter names number no layer.
    """
    numbers = layer_numbers(backbone)
    if not numbers:
        raise UsageError(
            f"layerwise_lr_decay={decay} needs the backbone's layers numbered in its parameter names (layer.N, "
            f"layers.N, h.N or block.N); {type(backbone).__name__}'s are not. Leave layerwise_lr_decay at 1.0."
        )
    layers = max(numbers.values()) + 1
    embeddings = embedding_parameters(backbone)
    rates = {}
    for parameter in backbone.parameters():
        key = id(parameter)
        if key in numbers:
            steps_below_top = layers - 1 - numbers[key]
        elif key in embeddings:
            steps_below_top = layers
        else:
            steps_below_top = 0
        rates[key] = learning_rate * decay**steps_below_top
    return rates


@register_option
class LayerwiseDecay(TrainingOption):
    """``--layerwise_lr_decay``: the backbone's layers train at rates that fall towards the input."""

    name = "layerwise_lr_decay"
    card_label = "layer-wise learning-rate decay"

    def is_on(self, args) -> bool:
        return getattr(args, self.name, 1.0) != 1.0

    def check_arguments(self, args) -> None:
        require_number(self.name, getattr(args, self.name), lambda value: 0 < value <= 1, "in (0, 1]")

    def check_model(self, model, args) -> None:
        self.learning_rates(model, args, {})  # a backbone whose layers cannot be found raises a UsageError

    def learning_rates(self, model, args, head_rates: Mapping[int, float]) -> dict[int, float]:
        if not self.is_on(args):
            return {}
        rates = layerwise_learning_rates(backbone_of(model), args.learning_rate, getattr(args, self.name))
        # a head's parameter keeps its head's rate (a model factory's new pooler may sit in its backbone)
        return {key: rate for key, rate in rates.items() if key not in head_rates}
