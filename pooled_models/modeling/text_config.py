"""What a pooled model reads of its backbone's config: the text model's sizes, from ``get_text_config()``.

A composite backbone (Gemma 3, ModernVBERT, a vision-language or encoder-decoder model) keeps ``hidden_size``,
``vocab_size``... in a nested text config, not at its top level; transformers' own task models read them through
``get_text_config()``, and so does everything here. ``TextConfigSizes`` gives a pooled config the same sizes at its
top level, read from (and written to) the backbone's text config, so that code written for a built-in config
(``config.vocab_size``, ``config.num_hidden_layers``) reads the backbone's.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from transformers import PreTrainedConfig

__all__ = ["TextConfigSizes", "text_config_of", "max_positions_of", "state_width_of"]


def text_config_of(config: PreTrainedConfig) -> PreTrainedConfig:
    """The config holding the text model's sizes: the backbone's text config for a pooled config, else the config's
    own (``get_text_config()``, as transformers' task models read it)."""
    backbone = getattr(config, "backbone_config", None)
    config = backbone if backbone is not None else config
    if getattr(config, "is_encoder_decoder", False):
        # A pooled model reads an encoder-decoder's encoder (backbone.token_states_module).
        encoder = getattr(config, "encoder", None)
        if isinstance(encoder, PreTrainedConfig):
            return encoder.get_text_config()  # T5Gemma 2 nests the text config in its encoder's
        return config.get_text_config(encoder=True)
    return config.get_text_config()


# Backbones whose hidden states are wider than their hidden_size: Reformer's reversible layers return both residual
# streams side by side (its own classification head reads 2 * hidden_size).
STATE_WIDTH_FACTOR = {"reformer": 2}


def state_width_of(config: PreTrainedConfig) -> int:
    """The width of the backbone's hidden states, which poolers and token heads read."""
    text = text_config_of(config)
    return text.hidden_size * STATE_WIDTH_FACTOR.get(getattr(text, "model_type", None), 1)


def max_positions_of(config: PreTrainedConfig) -> int | None:
    """How many positions the text model has; None where it has no limit (XLNet, Funnel's relative positions...:
    some of their configs answer -1)."""
    value = getattr(text_config_of(config), "max_position_embeddings", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _size_property(name: str) -> property:
    def read(self):
        text = self.get_text_config()
        if not hasattr(text, name):
            raise AttributeError(f"{type(self).__name__}'s backbone ({text.model_type}) has no {name}")
        return getattr(text, name)

    def write(self, value):
        setattr(self.get_text_config(), name, value)

    return property(
        read, write, doc=f"The backbone text config's ``{name}`` (read from and written to it: one value)."
    )


class TextConfigSizes:
    """Mixed into a config with a ``backbone_config``: ``config.vocab_size`` etc. are its text config's."""

    vocab_size = _size_property("vocab_size")
    hidden_size = _size_property("hidden_size")
    num_hidden_layers = _size_property("num_hidden_layers")
    num_attention_heads = _size_property("num_attention_heads")
    max_position_embeddings = _size_property("max_position_embeddings")
