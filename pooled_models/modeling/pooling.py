"""Pooling strategies: one vector per sequence from a backbone's hidden states.

Every strategy is a small ``nn.Module`` registered by name with ``@register_pooler``. A pooler:

* reads its settings from a :class:`~.configuration_pooled.PooledConfig` (``config_options`` lists
  the settings it reads and their defaults, so the config can reject settings that do not apply);
* reports ``output_dim`` so the head sizes itself;
* says whether it needs every layer's hidden states (``needs_all_hidden_states``), so the backbone
  is asked for them only when they are used;
* never writes into the tensors it is given: masks are applied with ``masked_fill`` on new tensors.

Two families live here:

* token reductions (``cls``, ``mean``, ``max``, ``attention``, ...): ``[B, T, H]`` and the attention
  mask to ``[B, D]``;
* layer strategies (``concat_layers``, ``weighted_layer``, ``lstm``): a *layer selection* (every
  hidden state from ``layer_start`` on) reduced by any token reduction (``layer_token_pooling``) and
  combined by concatenation, learned weights or an LSTM.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn
from transformers import initialization as init

if TYPE_CHECKING:
    from .configuration_pooled import PooledConfig

__all__ = [
    "POOLERS",
    "Pooler",
    "TokenPooler",
    "LayerPooler",
    "register_pooler",
    "get_pooler_class",
    "build_pooler",
    "token_pooling_names",
]

POOLERS: dict[str, type[Pooler]] = {}


def register_pooler(name: str) -> Callable[[type[Pooler]], type[Pooler]]:
    """Class decorator that makes a pooler available as ``PooledConfig(pooling=name)``."""

    def register(cls: type[Pooler]) -> type[Pooler]:
        if name in POOLERS:
            raise ValueError(f"pooling {name!r} is already registered by {POOLERS[name].__qualname__}")
        cls.name = name
        POOLERS[name] = cls
        return cls

    return register


def get_pooler_class(name: str) -> type[Pooler]:
    if name not in POOLERS:
        raise ValueError(f"Unknown pooling {name!r}. Valid choices: {', '.join(sorted(POOLERS))}.")
    return POOLERS[name]


def build_pooler(config: PooledConfig) -> Pooler:
    return get_pooler_class(config.pooling)(config)


def token_pooling_names() -> list[str]:
    """Names of the token reductions, i.e. the valid values of ``layer_token_pooling``."""
    return sorted(name for name, cls in POOLERS.items() if issubclass(cls, TokenPooler))


# A default is a constant, or a function of the config for defaults that depend on the backbone.
OptionDefault = Any | Callable[["PooledConfig"], Any]


class Pooler(nn.Module):
    """Base class of all poolers. Subclasses set ``output_dim`` in ``__init__`` and implement ``forward``.

    A pooler that also edits the backbone's input (label tokens) overrides :meth:`encode` and may name
    its own ``head_class``; every other pooler gets the head chosen by ``config.classifier_head``.
    """

    name: ClassVar[str] = ""
    config_options: ClassVar[dict[str, OptionDefault]] = {}
    head_class: ClassVar[type[nn.Module] | None] = None
    output_dim: int
    needs_all_hidden_states: bool = False

    @classmethod
    def options_for(cls, config: PooledConfig) -> dict[str, OptionDefault]:
        """The config settings this pooling reads (for this config), with their defaults."""
        return dict(cls.config_options)

    @classmethod
    def check_config(cls, config: PooledConfig) -> None:
        """Raise ``ValueError`` for settings out of range; called once the defaults are filled in."""

    def init_parameters(self, config: PooledConfig, input_embeddings: nn.Module) -> None:
        """Initialise the parameters ``PreTrainedModel._init_weights`` does not know (plain ``nn.Parameter``s)."""

    @classmethod
    def tokenizer_settings(
        cls, config_kwargs: dict[str, Any], load_tokenizer: Callable[[], Any]
    ) -> dict[str, Any]:
        """Config settings only the backbone's tokenizer knows (``from_backbone`` calls this); none by default."""
        return {}

    def check_backbone(self, backbone: nn.Module, position_budget: int | None) -> None:
        """Raise ``ValueError`` if this pooler cannot work with ``backbone``."""

    def encode(self, encoder, inputs: dict[str, Any], output_hidden_states: bool):
        """Run the backbone through ``encoder.run_backbone(**inputs)`` and pool: ``(backbone outputs, pooled)``."""
        outputs = encoder.run_backbone(
            **inputs, output_hidden_states=output_hidden_states or self.needs_all_hidden_states
        )
        return outputs, self(outputs.last_hidden_state, inputs["attention_mask"], outputs.hidden_states)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        all_hidden_states: Sequence[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``hidden_states [B, T, H]`` (last layer), ``attention_mask [B, T]`` (1 = real token) -> ``[B, output_dim]``.

        ``all_hidden_states`` (embeddings output first, last layer last) is only read by poolers with
        ``needs_all_hidden_states``.
        """
        raise NotImplementedError


def _hidden_size(config: PooledConfig) -> int:
    return config.backbone_config.hidden_size


def _require_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")


# ----------------------------------------------------------------------------------------------------
# Masking helpers. The mask is boolean [B, T]; a row may have no real token at all (an empty text
# after truncation), and every reduction must still give finite values for it.
# ----------------------------------------------------------------------------------------------------


def real_token_mask(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    if attention_mask is None:
        return torch.ones(hidden_states.shape[:2], dtype=torch.bool, device=hidden_states.device)
    if attention_mask.shape != hidden_states.shape[:2]:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but the hidden states are "
            f"{tuple(hidden_states.shape)}; expected [batch, seq_len] = {tuple(hidden_states.shape[:2])}."
        )
    return attention_mask != 0


def first_token_index(mask: torch.Tensor) -> torch.Tensor:
    # argmax returns the first maximal index, so this is the first real token under any padding side.
    return mask.int().argmax(dim=1)


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    return mask.shape[1] - 1 - mask.int().flip(1).argmax(dim=1)


def gather_tokens(hidden_states: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    rows = torch.arange(hidden_states.shape[0], device=hidden_states.device)
    return hidden_states[rows, index]


def zero_padding(hidden_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # masked_fill rather than a multiplication: 0 * inf or 0 * nan in a padding position stays nan.
    return hidden_states.masked_fill(~mask.unsqueeze(-1), 0.0)


def token_counts(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # Clamped so that a row without real tokens divides by 1, not 0.
    return mask.sum(dim=1, keepdim=True).clamp(min=1).to(dtype)


def masked_extreme(hidden_states: torch.Tensor, mask: torch.Tensor, largest: bool) -> torch.Tensor:
    finfo = torch.finfo(hidden_states.dtype)
    fill = finfo.min if largest else finfo.max
    filled = hidden_states.masked_fill(~mask.unsqueeze(-1), fill)
    extreme = filled.amax(dim=1) if largest else filled.amin(dim=1)
    # A row with no real token would otherwise report the fill value, which overflows the head in fp16.
    return extreme.masked_fill(~mask.any(dim=1, keepdim=True), 0.0)


# ----------------------------------------------------------------------------------------------------
# Token reductions
# ----------------------------------------------------------------------------------------------------


class TokenPooler(Pooler):
    """A reduction over the tokens of one layer; its output is ``width_factor`` hidden sizes wide."""

    width_factor: ClassVar[int] = 1

    def __init__(self, config: PooledConfig):
        super().__init__()
        self.hidden_size = _hidden_size(config)
        self.output_dim = self.hidden_size * self.width_factor

    def forward(self, hidden_states, attention_mask=None, all_hidden_states=None):
        return self.reduce(hidden_states, real_token_mask(hidden_states, attention_mask))

    def reduce(self, hidden_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


def reduce_cls(hidden_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return gather_tokens(hidden_states, first_token_index(mask))


def reduce_mean(hidden_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    summed = zero_padding(hidden_states, mask).sum(dim=1)
    return summed / token_counts(mask, summed.dtype)


def reduce_max(hidden_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return masked_extreme(hidden_states, mask, largest=True)


@register_pooler("cls")
class CLSPooler(TokenPooler):
    """The first real token (the ``[CLS]``/``<s>`` position), found from the mask so left padding works."""

    def reduce(self, hidden_states, mask):
        return reduce_cls(hidden_states, mask)


@register_pooler("last_token")
class LastTokenPooler(TokenPooler):
    """The last real token: the one that has seen the whole text in a decoder (GPT-2, Llama, ...)."""

    def reduce(self, hidden_states, mask):
        return gather_tokens(hidden_states, last_token_index(mask))


@register_pooler("mean")
class MeanPooler(TokenPooler):
    """Average of the real tokens (the sentence-transformers default)."""

    def reduce(self, hidden_states, mask):
        return reduce_mean(hidden_states, mask)


@register_pooler("max")
class MaxPooler(TokenPooler):
    """Element-wise maximum over the real tokens; padding never wins, even when all real values are negative."""

    def reduce(self, hidden_states, mask):
        return reduce_max(hidden_states, mask)


@register_pooler("min")
class MinPooler(TokenPooler):
    """Element-wise minimum over the real tokens."""

    def reduce(self, hidden_states, mask):
        return masked_extreme(hidden_states, mask, largest=False)


@register_pooler("mean_max")
class MeanMaxPooler(TokenPooler):
    """``[mean; max]``."""

    width_factor = 2

    def reduce(self, hidden_states, mask):
        return torch.cat([reduce_mean(hidden_states, mask), reduce_max(hidden_states, mask)], dim=-1)


@register_pooler("cls_mean_max")
class CLSMeanMaxPooler(TokenPooler):
    """``[CLS; max; mean]``, the concatenation used by ESM-style protein classification heads."""

    width_factor = 3

    def reduce(self, hidden_states, mask):
        parts = [
            reduce_cls(hidden_states, mask),
            reduce_max(hidden_states, mask),
            reduce_mean(hidden_states, mask),
        ]
        return torch.cat(parts, dim=-1)


@register_pooler("mean_sqrt_len")
class MeanSqrtLenPooler(TokenPooler):
    """Sum of the real tokens divided by sqrt(length): keeps some of the length signal a mean removes."""

    def reduce(self, hidden_states, mask):
        summed = zero_padding(hidden_states, mask).sum(dim=1)
        return summed / token_counts(mask, summed.dtype).sqrt()


@register_pooler("weighted_mean")
class WeightedMeanPooler(TokenPooler):
    """Position-weighted mean (SGPT): the i-th real token has weight i, so later tokens count more.

    Positions are counted over real tokens only, so the result does not depend on the padding side.
    """

    def reduce(self, hidden_states, mask):
        weights = (mask.cumsum(dim=1) * mask).to(hidden_states.dtype).unsqueeze(-1)
        summed = (zero_padding(hidden_states, mask) * weights).sum(dim=1)
        return summed / weights.sum(dim=1).clamp(min=1)


@register_pooler("gem")
class GeMPooler(TokenPooler):
    """Generalised mean ``(mean(x^p))^(1/p)`` with a learnable exponent ``p`` (``gem_p`` sets its start).

    p = 1 is the mean of the clamped values and large p approaches the max. As in image retrieval,
    values are clamped to ``eps`` first (x^p needs x > 0), and p is kept >= 1.
    """

    config_options = {"gem_p": 3.0}
    eps: ClassVar[float] = 1e-6

    def __init__(self, config):
        super().__init__(config)
        self.p = nn.Parameter(torch.tensor(float(config.gem_p)))

    @classmethod
    def check_config(cls, config):
        if not isinstance(config.gem_p, (int, float)) or isinstance(config.gem_p, bool) or config.gem_p < 1:
            raise ValueError(f"gem_p must be a number >= 1, got {config.gem_p!r}.")

    def init_parameters(self, config, input_embeddings):
        init.constant_(self.p, float(config.gem_p))

    def reduce(self, hidden_states, mask):
        # float32: x^p overflows bf16/fp16 for moderate x and p.
        p = self.p.float().clamp(min=1.0)
        powered = zero_padding(hidden_states.float().clamp(min=self.eps).pow(p), mask)
        mean = powered.sum(dim=1) / token_counts(mask, torch.float32)
        # The clamp keeps the gradient of x^(1/p) finite for a row without real tokens (mean = 0).
        return mean.clamp(min=self.eps).pow(1.0 / p).to(hidden_states.dtype)


@register_pooler("attention")
class AttentionPooler(TokenPooler):
    """Learned attention pooling: scores from ``Linear -> Tanh -> Linear``, softmax over the real tokens.

    With ``attention_heads = k > 1`` the last layer gives k scores per token: each head is a learned query
    over the tanh features with its own softmax, and the k weighted sums are concatenated (k * H outputs).
    """

    config_options = {"attention_heads": 1, "attention_hidden_size": _hidden_size}

    def __init__(self, config):
        super().__init__(config)
        self.num_heads = config.attention_heads
        self.output_dim = self.hidden_size * self.num_heads
        self.score = nn.Sequential(
            nn.Linear(self.hidden_size, config.attention_hidden_size),
            nn.Tanh(),
            nn.Linear(config.attention_hidden_size, self.num_heads),
        )

    @classmethod
    def check_config(cls, config):
        _require_int("attention_heads", config.attention_heads, 1)
        _require_int("attention_hidden_size", config.attention_hidden_size, 1)

    def reduce(self, hidden_states, mask):
        scores = self.score(hidden_states)  # [B, T, heads]
        scores = scores.float().masked_fill(~mask.unsqueeze(-1), torch.finfo(torch.float32).min)
        weights = scores.softmax(dim=1).to(hidden_states.dtype)
        pooled = torch.einsum("bth,btd->bhd", weights, hidden_states)
        return pooled.reshape(hidden_states.shape[0], self.output_dim)


# ----------------------------------------------------------------------------------------------------
# Layer strategies: layer selection x token reduction x layer combination
# ----------------------------------------------------------------------------------------------------


def _num_hidden_states(config: PooledConfig) -> int:
    # hidden_states holds the embedding output followed by one entry per layer.
    return config.backbone_config.num_hidden_layers + 1


def selected_layers(config: PooledConfig) -> list[int]:
    """Indices into ``hidden_states`` (0 = embeddings, L = last layer) chosen by ``layer_start``."""
    return list(range(_num_hidden_states(config)))[config.layer_start :]


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
        if token_name in POOLERS and issubclass(POOLERS[token_name], TokenPooler):
            options.update(POOLERS[token_name].options_for(config))
        return options

    @classmethod
    def check_config(cls, config):
        valid = token_pooling_names()
        if config.layer_token_pooling not in valid:
            raise ValueError(
                f"layer_token_pooling must be a token pooling, got {config.layer_token_pooling!r}. "
                f"Valid choices: {', '.join(valid)}."
            )
        POOLERS[config.layer_token_pooling].check_config(config)
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
        self.needs_all_hidden_states = self.layer_indices != [last]
        self.token_pooler = POOLERS[config.layer_token_pooling](config)

    def select(self, hidden_states, all_hidden_states) -> list[torch.Tensor]:
        if not self.needs_all_hidden_states:
            return [hidden_states]
        if all_hidden_states is None:
            raise ValueError(
                f"pooling={self.name!r} reads hidden states {self.layer_indices}: call the backbone with "
                "output_hidden_states=True and pass them as all_hidden_states."
            )
        return [all_hidden_states[i] for i in self.layer_indices]


def _last_k_layers(k: int) -> Callable[[PooledConfig], int]:
    # "The last k layers", or every layer for backbones with fewer (tiny test models).
    return lambda config: -min(k, config.backbone_config.num_hidden_layers)


@register_pooler("concat_layers")
class ConcatLayersPooler(LayerPooler):
    """Concatenation of the token pooling of each selected layer (default: CLS of the last 4 layers)."""

    default_layer_start = staticmethod(_last_k_layers(4))

    def __init__(self, config):
        super().__init__(config)
        self.output_dim = len(self.layer_indices) * self.token_pooler.output_dim

    def forward(self, hidden_states, attention_mask=None, all_hidden_states=None):
        layers = self.select(hidden_states, all_hidden_states)
        return torch.cat([self.token_pooler(layer, attention_mask) for layer in layers], dim=-1)


@register_pooler("weighted_layer")
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


@register_pooler("lstm")
class LSTMLayerPooler(LayerPooler):
    """An LSTM over one vector per selected layer (the token pooling of that layer); its last output."""

    config_options = {"lstm_hidden_size": _hidden_size}

    def __init__(self, config):
        super().__init__(config)
        self.lstm = nn.LSTM(self.token_pooler.output_dim, config.lstm_hidden_size, batch_first=True)
        self.output_dim = config.lstm_hidden_size

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        _require_int("lstm_hidden_size", config.lstm_hidden_size, 1)

    def forward(self, hidden_states, attention_mask=None, all_hidden_states=None):
        layers = self.select(hidden_states, all_hidden_states)
        per_layer = torch.stack([self.token_pooler(layer, attention_mask) for layer in layers], dim=1)
        output, _ = self.lstm(per_layer)
        return output[:, -1]
