"""Pooling strategies: one vector per sequence from a backbone's hidden states. This module holds the base class,
the masking helpers and the token reductions; the layer strategies are in ``layer_pooling.py`` and the label-token
pooling in ``label_tokens.py``.

Every strategy is a small ``nn.Module`` registered by name with ``@POOLINGS.register(name)``. A pooler:

* reads its settings from a :class:`~.configuration_pooled.PooledConfig` (``config_options`` lists
  the settings it reads and their defaults, so the config can reject settings that do not apply);
* reports ``output_dim`` so the head sizes itself;
* says which layers' hidden states it reads besides the last (``hidden_states_read``), so the backbone
  is asked for them only when they are used;
* never writes into the tensors it is given: masks are applied with ``masked_fill`` on new tensors.

Token reductions (``cls``, ``mean``, ``max``, ``attention``, ...) take ``[B, T, H]`` and the attention mask to
``[B, D]``; their maths is in plain functions (``reduce_mean``, ``masked_extreme``...) tested on tensors.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch import nn
from transformers import PreTrainedConfig
from transformers import initialization as init

from .compat import SELECTS_HIDDEN_STATES
from .registry import POOLINGS, Component
from .text_config import state_width_of

__all__ = [
    "hidden_states_request",
    "hidden_states_for_caller",
    "POOLINGS",
    "POOLERS",
    "Pooler",
    "TokenPooler",
    "register_pooler",
    "get_pooler_class",
    "build_pooler",
    "token_pooling_names",
    "poolings_that_work",
]

# The pooling registry, under the names of the public API since 0.1 (pooled_models.POOLERS, register_pooler).
POOLERS = POOLINGS
register_pooler = POOLINGS.register
get_pooler_class = POOLINGS.lookup


def build_pooler(config: PreTrainedConfig) -> Pooler:
    return POOLINGS.lookup(config.pooling)(config)


def poolings_that_work(backbone: nn.Module) -> list[str]:
    """The registered poolings that can read ``backbone``."""
    return sorted(name for name, part in POOLINGS.items() if part.backbone_refusal(backbone) is None)


def token_pooling_names() -> list[str]:
    """Names of the token reductions, i.e. the valid values of ``layer_token_pooling``."""
    return sorted(name for name, cls in POOLINGS.items() if issubclass(cls, TokenPooler))


class Pooler(nn.Module, Component):
    """Base class of all poolers. Subclasses set ``output_dim`` in ``__init__`` and implement ``forward``.

    A pooler that also edits the backbone's input (label tokens) overrides :meth:`encode` and may name
    its own ``head_class``; every other pooler gets the head chosen by ``config.classifier_head``.
    """

    head_class: ClassVar[type[nn.Module] | None] = None
    output_dim: int
    # Indices into the backbone's hidden_states (0 = embeddings) the pooler reads; None: the last layer only.
    hidden_states_read: list[int] | None = None
    # Tokens the pooler adds to every input (label tokens), which the text's length limit must leave room for.
    added_tokens: int = 0

    def init_parameters(self, config: PreTrainedConfig, input_embeddings: nn.Module) -> None:
        """Initialise the parameters ``PreTrainedModel._init_weights`` does not know (plain ``nn.Parameter``s)."""

    @classmethod
    def tokenizer_settings(
        cls, config_kwargs: dict[str, Any], load_tokenizer: Callable[[], Any]
    ) -> dict[str, Any]:
        """Config settings only the backbone's tokenizer knows (``from_backbone`` calls this); none by default."""
        return {}

    def connect(self, model: nn.Module) -> None:
        """Called by the model that holds the pooler once its modules are built (and when its input embeddings are
        replaced): a pooler that edits the backbone's input hooks into it here. Nothing to do by default."""

    @classmethod
    def backbone_refusal(cls, backbone: nn.Module) -> str | None:
        """Why this pooling cannot read ``backbone`` (None: it can); ``check_backbone`` raises with it."""
        return None

    def check_backbone(self, backbone: nn.Module, position_budget: int | None) -> None:
        """Raise ``ValueError`` if this pooler cannot work with ``backbone``, naming the poolings that can."""
        reason = type(self).backbone_refusal(backbone)
        if reason is not None:
            raise ValueError(
                f"pooling={self.name!r} {reason}. Poolings that work with {type(backbone).__name__}: "
                f"{', '.join(poolings_that_work(backbone)) or 'none'}."
            )

    def public_output(self, pooled: torch.Tensor) -> torch.Tensor:
        """What ``PooledModel`` returns as ``pooler_output`` of what :meth:`encode` pooled (the head may read more, as
        label text's reads the text's vector besides the labels'): all of it by default."""
        return pooled

    def encode(self, encoder, inputs: dict[str, Any], output_hidden_states: bool):
        """Run the backbone through ``encoder.run_backbone(**inputs)`` and pool: ``(backbone outputs, pooled)``."""
        request = hidden_states_request(output_hidden_states, self.hidden_states_read)
        outputs = encoder.run_backbone(**inputs, output_hidden_states=request)
        states = outputs.last_hidden_state
        return outputs, self(
            states, encoder.states_mask(inputs["attention_mask"], states), outputs.hidden_states
        )

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        all_hidden_states: Sequence[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``hidden_states [B, T, H]`` (last layer), ``attention_mask [B, T]`` (1 = real token) -> ``[B, output_dim]``.

        ``all_hidden_states`` (embeddings output first, last layer last) is only read by poolers with
        ``hidden_states_read``.
        """
        raise NotImplementedError


def hidden_states_request(caller: bool | int | list[int] | None, read: list[int] | None):
    """What to ask the backbone for: the hidden states the caller asked for (``True``, or a selection: an index or
    a list of them, as transformers 5 takes), and those the pooler reads. A selection keeps the other layers'
    states from being kept at all."""
    request = _combined_request(caller, read)
    if not SELECTS_HIDDEN_STATES and request is not None and not isinstance(request, bool):
        # transformers before 5.23 takes a flag only: every hidden state, from which the pooler reads its layers and
        # hidden_states_for_caller gives the caller its selection (the same states, kept a little longer).
        return True
    return request


def _combined_request(caller: bool | int | list[int] | None, read: list[int] | None):
    if read is None or caller is True:
        return caller
    if caller is None or caller is False:
        return list(read)
    selected = [caller] if isinstance(caller, int) else list(caller)
    return (
        sorted(set(selected) | set(read), key=selected.__contains__, reverse=True) if selected else list(read)
    )


def hidden_states_for_caller(hidden_states, caller: bool | int | list[int] | None):
    """The backbone's hidden states as the caller asked for them: all, none, or its selection (other entries
    None, as transformers returns a selection), whatever the pooler also read."""
    if not caller or hidden_states is None:
        return None
    if caller is True:
        return hidden_states
    count = len(hidden_states)
    selected = {
        index % count
        for index in ([caller] if isinstance(caller, int) else caller)
        if -count <= index < count
    }
    return tuple(state if index in selected else None for index, state in enumerate(hidden_states))


def hidden_size_of(config: PreTrainedConfig) -> int:
    return state_width_of(config)


def require_int(name: str, value: Any, minimum: int) -> None:
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


def gather_tokens(hidden_states: torch.Tensor, index: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The state at ``index`` of each row; zeros for a row without real tokens, as every other pooling gives."""
    rows = torch.arange(hidden_states.shape[0], device=hidden_states.device)
    return hidden_states[rows, index].masked_fill(~mask.any(dim=1, keepdim=True), 0.0)


def masked_sum(
    hidden_states: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """The (weighted) sum of the real tokens' states, accumulated in float32: in fp16, 512 tokens of 300 already
    sum past its largest number (65504)."""
    values = zero_padding(
        hidden_states, mask
    ).float()  # masked_fill first: 0 * nan in a padding position is nan
    return (values if weights is None else values * weights.unsqueeze(-1)).sum(dim=1)


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

    def __init__(self, config: PreTrainedConfig):
        super().__init__()
        self.hidden_size = hidden_size_of(config)
        self.output_dim = self.hidden_size * self.width_factor

    def forward(self, hidden_states, attention_mask=None, all_hidden_states=None):
        return self.reduce(hidden_states, real_token_mask(hidden_states, attention_mask))

    def reduce(self, hidden_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


def reduce_cls(hidden_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return gather_tokens(hidden_states, first_token_index(mask), mask)


def reduce_mean(hidden_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (masked_sum(hidden_states, mask) / token_counts(mask, torch.float32)).to(hidden_states.dtype)


def reduce_max(hidden_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return masked_extreme(hidden_states, mask, largest=True)


@POOLINGS.register("cls")
class CLSPooler(TokenPooler):
    """The first real token (the ``[CLS]``/``<s>`` position), found from the mask so left padding works."""

    def reduce(self, hidden_states, mask):
        return reduce_cls(hidden_states, mask)


@POOLINGS.register("last_token")
class LastTokenPooler(TokenPooler):
    """The last real token: the one that has seen the whole text in a decoder (GPT-2, Llama, ...)."""

    def reduce(self, hidden_states, mask):
        return gather_tokens(hidden_states, last_token_index(mask), mask)


@POOLINGS.register("mean")
class MeanPooler(TokenPooler):
    """Average of the real tokens (the sentence-transformers default)."""

    def reduce(self, hidden_states, mask):
        return reduce_mean(hidden_states, mask)


@POOLINGS.register("max")
class MaxPooler(TokenPooler):
    """Element-wise maximum over the real tokens; padding never wins, even when all real values are negative."""

    def reduce(self, hidden_states, mask):
        return reduce_max(hidden_states, mask)


@POOLINGS.register("min")
class MinPooler(TokenPooler):
    """Element-wise minimum over the real tokens."""

    def reduce(self, hidden_states, mask):
        return masked_extreme(hidden_states, mask, largest=False)


@POOLINGS.register("mean_max")
class MeanMaxPooler(TokenPooler):
    """``[mean; max]``."""

    width_factor = 2

    def reduce(self, hidden_states, mask):
        return torch.cat([reduce_mean(hidden_states, mask), reduce_max(hidden_states, mask)], dim=-1)


@POOLINGS.register("cls_mean_max")
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


@POOLINGS.register("mean_sqrt_len")
class MeanSqrtLenPooler(TokenPooler):
    """Sum of the real tokens divided by sqrt(length): keeps some of the length signal a mean removes."""

    def reduce(self, hidden_states, mask):
        summed = masked_sum(hidden_states, mask)
        return (summed / token_counts(mask, torch.float32).sqrt()).to(hidden_states.dtype)


@POOLINGS.register("weighted_mean")
class WeightedMeanPooler(TokenPooler):
    """Position-weighted mean (SGPT): the i-th real token has weight i, so later tokens count more.

    Positions are counted over real tokens only, so the result does not depend on the padding side.
    """

    def reduce(self, hidden_states, mask):
        # float32: past ~360 tokens the weights alone sum beyond fp16's largest number.
        weights = (mask.cumsum(dim=1) * mask).float()
        summed = masked_sum(hidden_states, mask, weights)
        return (summed / weights.sum(dim=1, keepdim=True).clamp(min=1)).to(hidden_states.dtype)


@POOLINGS.register("gem")
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


@POOLINGS.register("attention")
class AttentionPooler(TokenPooler):
    """Learned attention pooling: scores from ``Linear -> Tanh -> Linear``, softmax over the real tokens.

    With ``attention_heads = k > 1`` the last layer gives k scores per token: each head is a learned query
    over the tanh features with its own softmax, and the k weighted sums are concatenated (k * H outputs).
    """

    config_options = {"attention_heads": 1, "attention_hidden_size": hidden_size_of}

    def __init__(self, config):
        super().__init__(config)
        self.num_heads = config.attention_heads
        self.output_dim = self.hidden_size * self.num_heads
        # Not named "score": PEFT trains and saves every module whose name ends in "score" or "classifier" on its
        # own, which would copy this one twice (it is already part of the classifier).
        self.scorer = nn.Sequential(
            nn.Linear(self.hidden_size, config.attention_hidden_size),
            nn.Tanh(),
            nn.Linear(config.attention_hidden_size, self.num_heads),
        )

    @classmethod
    def check_config(cls, config):
        require_int("attention_heads", config.attention_heads, 1)
        require_int("attention_hidden_size", config.attention_hidden_size, 1)

    def reduce(self, hidden_states, mask):
        pooled = attention_pool(self.scorer(hidden_states), hidden_states, mask)
        return pooled.reshape(hidden_states.shape[0], self.output_dim)


def attention_pool(scores: torch.Tensor, hidden_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``scores [B, T, heads]`` -> each head's softmax over the real positions of ``mask [B, T]``, and the weighted
    sums of ``hidden_states [B, T, D]``: ``[B, heads, D]`` (in float32, returned in the states' dtype)."""
    scores = scores.float().masked_fill(~mask.unsqueeze(-1), torch.finfo(torch.float32).min)
    weights = scores.softmax(dim=1)
    values = zero_padding(hidden_states, mask).float()  # float32: no fp16 overflow; masked: no 0 * nan
    return torch.einsum("bth,btd->bhd", weights, values).to(hidden_states.dtype)
