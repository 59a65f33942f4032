"""An empty text is refused on every route the plugin serves (``/classify``, ``/pooling``, ``/v1/embeddings``, the
zero-shot route), with HTTP 400 naming it, as train.py refuses an empty text in its data (a DataError naming the file,
column and row). vLLM itself answers ``""`` with 200 and a label: the tokenizer's ``[CLS] [SEP]`` is a prompt like any
other to it, and a pooled model scores such a row (its pooling reads no real token), so the answer would be a score of
nothing that looks like one of a text.

vLLM 0.32 has no hook for a model to refuse a request, so the plugin wraps the input processor's check of each prompt
(``InputProcessor._validate_model_input``, where vLLM refuses an empty decoder prompt with the same 400) for pooled
architectures only; every other model vLLM serves keeps vLLM's own behaviour. The rule itself (``empty_text_refusal``)
is plain Python, tested where vLLM is not installed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

__all__ = ["EMPTY_TEXT", "empty_text_refusal", "refuse_empty_texts"]

EMPTY_TEXT = (
    "The text is empty{where}: a pooled model's score of an empty text is the score of no token at all, so it is "
    "refused (as train.py refuses empty texts in its data). Send text with at least one word."
)


def empty_text_refusal(prompt: Mapping[str, Any], special_ids: Collection[int]) -> str | None:
    """The message refusing ``prompt`` (a vLLM engine input: ``prompt`` text and/or ``prompt_token_ids``), or None.

    Empty means a text that is empty or only white space, or, for a request sent as token ids, ids that are all the
    tokenizer's special tokens (``[CLS] [SEP]``)."""
    if prompt.get("type") == "embeds":
        return None
    text = prompt.get("prompt")
    if text is not None:
        return EMPTY_TEXT.format(where=f" ({text!r})" if text else "") if not text.strip() else None
    ids = prompt.get("prompt_token_ids") or []
    if ids and all(token in special_ids for token in ids):
        return EMPTY_TEXT.format(where=f" (token ids {list(ids)}, all special tokens)")
    return None


def refuse_empty_texts(architectures: Collection[str], undo=None) -> None:
    """Make vLLM's input processor refuse an empty text sent to a model of ``architectures`` (once per process).
    register() has checked that this vLLM has the method (compatibility.py); ``undo`` keeps what is replaced."""
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.engine.input_processor import InputProcessor

    original = InputProcessor._validate_model_input
    if getattr(original, "refuses_empty_texts", False):
        return

    def validate(self, prompt_input, prompt_type):
        served = getattr(self.model_config.hf_config, "architectures", None) or []
        if any(architecture in architectures for architecture in served):
            tokenizer = getattr(self.renderer, "tokenizer", None)
            special = set(getattr(tokenizer, "all_special_ids", None) or ())
            refusal = empty_text_refusal(prompt_input, special)
            if refusal is not None:
                raise VLLMValidationError(refusal)
        return original(self, prompt_input, prompt_type)

    validate.refuses_empty_texts = True
    if undo is not None:
        undo.keep_attribute(InputProcessor, "_validate_model_input")
    InputProcessor._validate_model_input = validate
