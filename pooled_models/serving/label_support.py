"""Which label settings the vLLM plugin serves, decided on the config alone (plain Python, no vllm import, so that the
package's own tests check every message where vLLM is not installed).

Served: ``pooling="label_text"`` with ``label_text_layers=0`` on a ``PooledForSequenceClassification`` (both scorers,
descriptions, single- and multi-label; ``label_text.py``), and its open label set (``zero_shot.py``). Refused, by name:

* ``label_text_layers >= 1`` (or ``"all"``): in those layers each label's tokens attend to the text and to their own
  segment only, and the text never to the labels: a mask over the tokens of one sequence. vLLM's encoder attention
  takes no mask: its metadata is each prompt's extent, and its encoder-only builder changes one thing of the decoder's,
  ``new_common_attn_metadata.causal = False``
  (vllm/model_executor/layers/attention/encoder_only_attention.py), so every token of a prompt attends to every other.
* ``pooling="label_tokens"``: the label tokens go into the text's own sequence, and the model reads their states. A
  ``/classify`` request's prompt is the tokenizer's tokens, and a model's forward cannot add tokens to a request (vLLM
  schedules each request for its prompt's length); one-way attention and ``label_token_layers < all`` need the token
  mask vLLM's attention does not take (above).
* a ``PooledModel`` with ``label_text``: its output is one vector per label for each text (``[L, H]``), and vLLM's
  ``embed`` returns one vector per text.
"""

from __future__ import annotations

__all__ = ["label_refusal", "SERVED_LABEL_TEXT"]

# What to train instead of a refused label setting: the setting the plugin serves, with what it keeps.
SERVED_LABEL_TEXT = (
    "train pooling='label_text' with label_text_layers=0 (train.py's few-example default; the labels and the text are "
    "then two embeddings, and the plugin serves it, the open label set included)"
)
_ENCODER_ATTENTION = (
    "vLLM's encoder attention takes no token mask: its encoder-only builder sets `new_common_attn_metadata.causal = "
    "False` (vllm/model_executor/layers/attention/encoder_only_attention.py) and every token of a prompt attends to "
    "every other"
)


def label_refusal(config, architecture: str, prefix: str, alternatives: str) -> str | None:
    """Why the plugin cannot serve this label setting exactly (naming the setting, why and what to do instead), or
    None when it serves it; only for the label poolings (``label_text``, ``label_tokens``)."""
    if config.pooling == "label_tokens":
        return (
            f"{prefix} with pooling='label_tokens': the label tokens go into each text's own sequence (after its first "
            "token) and the head reads their final states, but a /classify prompt is the tokenizer's tokens and a "
            "model's forward cannot add tokens to a request (vLLM schedules each request for its prompt's length); "
            f"one-way label_token_attention and label_token_layers below 'all' need a token mask, and "
            f"{_ENCODER_ATTENTION}. Instead, {SERVED_LABEL_TEXT}, or {alternatives}."
        )
    if architecture != "PooledForSequenceClassification":
        return (
            f"{prefix} with pooling='label_text': a {architecture} gives one vector per label for each text, and "
            "vLLM's embed returns one vector per text. Load it as PooledForSequenceClassification (classify, and the "
            f"open label set through the zero-shot route), or {alternatives}."
        )
    layers = config.label_text_layers
    if layers != 0:
        return (
            f"{prefix} with label_text_layers={layers!r}: in those top layers each label's tokens attend to the "
            f"text and to their own segment only, and the text never to the labels, and {_ENCODER_ATTENTION}. "
            f"Instead, {SERVED_LABEL_TEXT}, or {alternatives}."
        )
    return None
