"""The ids vLLM lets into a pooled model's prompts: the backbone's vocabulary, and for a label-text model one more id,
the label marker (transformers' ``LabelTokenInput`` maps the id one past the vocabulary to the learned marker).

vLLM checks every prompt id before it reaches the model (``BaseRenderer.validate_token_ids``: an id above
``max(tokenizer.max_token_id, model_config.get_vocab_size() - 1)`` is "out of vocabulary"), and reads the model's
vocabulary size through the model-architecture convertor registered for the config's ``model_type``
(``vllm.transformers_utils.model_arch_config_convertor.MODEL_ARCH_CONFIG_CONVERTORS``). The plugin registers one for
``"pooled"`` and ``"pooled_multitask"`` that counts the marker in, so that the zero-shot route (``zero_shot.py``) can send each label's text with
the marker in its first slot.
"""

from __future__ import annotations

from vllm.transformers_utils.model_arch_config_convertor import (
    MODEL_ARCH_CONFIG_CONVERTORS,
    ModelArchConfigConvertorBase,
)

from ..modeling.text_config import text_config_of
from .multitask_support import served_config

__all__ = ["PooledArchConfigConvertor", "register_vocabulary", "marker_id"]


def marker_id(config) -> int:
    """The id of the label marker: one past the backbone's vocabulary, read from the text config the model reads
    (``text_config_of``: an encoder-decoder's encoder), as the modeling room's label inputs read it."""
    return int(text_config_of(config).vocab_size)


class PooledArchConfigConvertor(ModelArchConfigConvertorBase):
    """vLLM's view of a pooled config: the backbone's, with the label marker's id counted in for ``label_text`` (a
    multi-task checkpoint's: when the task it serves has it)."""

    def get_vocab_size(self) -> int:
        size = super().get_vocab_size()
        if getattr(served_config(self.hf_config), "pooling", None) == "label_text":
            return max(size, marker_id(self.hf_config) + 1)
        return size


def register_vocabulary(undo=None) -> None:
    """Register the convertor for the pooled model types (``undo``, compatibility.Undo, keeps what was there)."""
    for model_type in ("pooled", "pooled_multitask"):  # PooledConfig's, PooledMultiTaskConfig's
        if undo is not None:
            undo.keep_item(MODEL_ARCH_CONFIG_CONVERTORS, model_type)
        MODEL_ARCH_CONFIG_CONVERTORS.setdefault(model_type, PooledArchConfigConvertor)
