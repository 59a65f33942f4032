"""A zero-shot request's ``data``, checked: what the caller may send to the ``pooled_models_zero_shot`` route, and the
refusal (a ``ValueError`` naming the field, which vLLM's server answers with HTTP 400) of everything else.

``texts`` (a string or a list of strings), ``candidate_labels`` (a list, or one comma-separated string, as
``pipeline("zero-shot-classification")`` takes them), ``multi_label`` (a boolean, default false) and
``hypothesis_template`` (a string with exactly one ``{}``, default ``"{}"``; ``zero_shot_pipeline.template_refusal``,
the rule the pipeline applies too). Strings must be valid Unicode: JSON lets a lone surrogate through (``"\\ud800"``),
which no tokenizer can encode.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..modeling.zero_shot_pipeline import DEFAULT_TEMPLATE, template_refusal
from .empty_texts import EMPTY_TEXT

__all__ = ["ZeroShotRequest", "parse_request", "FIELDS", "MAX_CANDIDATE_LABELS", "MAX_TEXTS"]

# The most candidate labels and texts one request may carry (every label's prompt and every text's run in the request).
MAX_CANDIDATE_LABELS = 256
MAX_TEXTS = 256
FIELDS = ("texts", "candidate_labels", "multi_label", "hypothesis_template")


@dataclass(frozen=True)
class ZeroShotRequest:
    texts: tuple[str, ...]
    labels: tuple[str, ...]  # as the caller gave them (the answer's names)
    label_texts: tuple[str, ...]  # as the model reads them (the template filled in)
    multi_label: bool


def parse_request(data: object, own_labels: dict[str, int] | None) -> ZeroShotRequest:
    """``data`` checked; ``own_labels`` (name -> index) for a model that scores its own labels only (``per_label``),
    None for one that scores any label (``shared``)."""
    if not isinstance(data, dict):
        raise ValueError(
            f"data must be an object with {FIELDS[0]}, {FIELDS[1]} and optionally {FIELDS[2]} and {FIELDS[3]}; got "
            f"{type(data).__name__}."
        )
    unknown = sorted(map(str, set(data) - set(FIELDS)))
    if unknown:
        raise ValueError(f"data has unknown fields {unknown}; valid: {', '.join(FIELDS)}.")
    texts = _texts(data.get("texts"))
    labels = _candidate_labels(data.get("candidate_labels"))
    multi_label = data.get("multi_label", False)
    if not isinstance(multi_label, bool):
        raise ValueError(f"multi_label must be true or false, got {multi_label!r}.")
    template = data.get("hypothesis_template", DEFAULT_TEMPLATE)
    reason = template_refusal(template)
    if reason is not None:
        raise ValueError(reason)
    _check_unicode("hypothesis_template", [template], indexed=False)
    label_texts = tuple(template.format(label) for label in labels)
    if own_labels is not None:
        unknown_labels = [text for text in label_texts if text not in own_labels]
        if unknown_labels:
            raise ValueError(
                f"candidate_labels: this model scores its own labels only (label_text_scorer='per_label'): "
                f"{', '.join(map(repr, unknown_labels))} {'is' if len(unknown_labels) == 1 else 'are'} not one of "
                f"them ({', '.join(own_labels)}). A model trained "
                "with label_text_scorer='shared' scores any labels."
            )
    return ZeroShotRequest(texts, labels, label_texts, multi_label)


def _texts(value) -> tuple[str, ...]:
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(text, str) for text in texts):
        raise ValueError("texts must be a string or a non-empty list of strings.")
    if len(texts) > MAX_TEXTS:
        raise ValueError(f"texts holds {len(texts)} texts; one request takes at most {MAX_TEXTS}.")
    _check_unicode("texts", texts)
    empty = [index for index, text in enumerate(texts) if not text.strip()]
    if empty:
        raise ValueError(EMPTY_TEXT.format(where=f" (texts[{empty[0]}])"))
    return tuple(texts)


def _candidate_labels(value) -> tuple[str, ...]:
    """The candidate labels as the pipeline reads them (a list, or one comma-separated string), checked."""
    if isinstance(value, str):
        value = [label.strip() for label in value.split(",") if label.strip()]
    if not isinstance(value, list) or not value:
        raise ValueError(
            "candidate_labels must be a non-empty list of label names (or one comma-separated string)."
        )
    if not all(isinstance(label, str) and label.strip() for label in value):
        raise ValueError("candidate_labels must hold non-empty strings.")
    if len(value) > MAX_CANDIDATE_LABELS:
        raise ValueError(
            f"candidate_labels holds {len(value)} labels; one request takes at most {MAX_CANDIDATE_LABELS}."
        )
    repeated = sorted({label for label in value if value.count(label) > 1})
    if repeated:
        raise ValueError(f"candidate_labels names {', '.join(map(repr, repeated))} more than once.")
    _check_unicode("candidate_labels", value)
    return tuple(value)


def _check_unicode(field: str, strings: list[str], indexed: bool = True) -> None:
    for index, text in enumerate(strings):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"{field}{f'[{index}]' if indexed else ''} is not valid Unicode text: {error.reason} at character {error.start} "
                f"({text[error.start : error.end]!r})."
            ) from None
