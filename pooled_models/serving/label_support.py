"""Which label settings the vLLM plugin serves, decided on the config alone (plain Python, no vllm import, so that the
package's own tests check every message where vLLM is not installed).

Served on a ``PooledForSequenceClassification``: ``pooling="label_text"`` with ``label_text_layers=0`` (both scorers,
descriptions, single- and multi-label; ``label_text.py``) and its open label set (``zero_shot.py``); ``label_tokens``
with its defaults (``label_tokens.py``). Refused, by name:

* ``label_text_layers >= 1`` (or ``"all"``): in those layers each label's tokens attend to the text and to their own
  segment only, and the text never to the labels: a mask over the tokens of one sequence. vLLM's encoder attention
  takes no mask: its metadata is each prompt's extent, and its encoder-only builder changes one thing of the decoder's,
  ``new_common_attn_metadata.causal = False``
  (vllm/model_executor/layers/attention/encoder_only_attention.py), so every token of a prompt attends to every other.
* ``pooling="label_tokens"`` except full insertion with two-way attention and every label in one pass (served with
  the serving tokenizer, ``label_tokens.py``, which also checks where the label tokens go): one-way attention needs a
  token mask (above); ``label_token_layers`` below ``"all"`` runs two sequences per request (the text alone, then with
  the labels); several passes run the text once per group of labels, and vLLM runs one prompt per request.
* a ``PooledModel`` with ``label_text``: its output is one vector per label for each text (``[L, H]``), and vLLM's
  ``embed`` returns one vector per text.

What is served, is served on every backbone the plugin serves (vLLM's own models and the transformers route), and in
a task of a multi-task checkpoint: the label vectors go where transformers' ``LabelTokenInput`` puts them, in place of
the token embedding table's output (``backbone_base.Backbone.run_marked``).
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
        return _label_token_refusal(config, architecture, prefix, alternatives)
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


def _label_token_refusal(config, architecture: str, prefix: str, alternatives: str) -> str | None:
    """Label tokens are served as one prompt per text, ``[CLS] <labels> text [SEP]``, from the serving tokenizer
    (``label_tokens.py``): full insertion, two-way attention, every label in one pass. Where the labels go
    (``label_token_position``) is the serving tokenizer's to check: it needs the tokenizer."""
    instead = f"Instead, {SERVED_LABEL_TEXT}, or {alternatives}."
    setting = f"{prefix} with pooling='label_tokens'"
    if architecture != "PooledForSequenceClassification":
        return f"{setting}: a {architecture} gives one vector per label token, and vLLM's embed one per text. {instead}"
    if config.label_token_attention != "two_way":
        return (
            f"{setting} and label_token_attention={config.label_token_attention!r}: the text must not attend to the "
            f"label tokens in its own sequence, a token mask, and {_ENCODER_ATTENTION}. {instead}"
        )
    layers = config.label_token_layers
    if layers not in ("all", getattr(config.backbone_config.get_text_config(), "num_hidden_layers", None)):
        return (
            f"{setting} and label_token_layers={layers!r}: the text runs alone through the lower layers and the label "
            "tokens join it in the top ones, two sequences of different lengths for one request, while vLLM runs each "
            f"request's prompt through every layer. Use label_token_layers='all'. {instead}"
        )
    if config.label_tokens_per_pass < config.num_labels:
        return (
            f"{setting} and label_tokens_per_pass={config.label_tokens_per_pass} < num_labels={config.num_labels}: "
            "each text is read once per group of labels (several sequences for one request), while vLLM runs one "
            f"prompt per request. Use label_tokens_per_pass >= num_labels (every label in one pass). {instead}"
        )
    return None
