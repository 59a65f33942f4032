"""Metrics of a token-classification task: entity-level precision, recall and F1 (seqeval, as CoNLL's conlleval
counts them: an entity is right only when its type and both its ends are) for BIO-style tags, and token accuracy.
A small shared piece: numpy, with seqeval imported where used."""

from __future__ import annotations

import re

import numpy as np

__all__ = ["ENTITY_TAG", "uses_entity_tags", "tag_sequences", "token_metrics"]

IGNORED = -100
# B-/I- (IOB2, IOB1), E-/S- (IOBES), L-/U- (BILOU) prefixes, or the O of words outside every entity.
ENTITY_TAG = re.compile(r"^([BIESLU][-_].+|O)$")


def uses_entity_tags(names: list[str]) -> bool:
    """Whether the tags name entities (``B-ORG``, ``I-ORG``, ``O``...) rather than word classes (``NOUN``, ``VERB``),
    so that entity-level metrics mean something."""
    return all(ENTITY_TAG.match(name) for name in names) and any(name != "O" for name in names)


def tag_sequences(
    predictions: np.ndarray, labels: np.ndarray, names: list[str]
) -> tuple[list[list[str]], list[list[str]]]:
    """(true tags, predicted tags) of every row, over the positions that carry a label (not -100)."""
    truth, predicted = [], []
    for row_predictions, row_labels in zip(predictions, labels, strict=True):
        kept = row_labels != IGNORED
        truth.append([names[int(label)] for label in row_labels[kept]])
        predicted.append([names[int(label)] for label in row_predictions[kept]])
    return truth, predicted


def token_metrics(logits: np.ndarray, labels: np.ndarray, names: list[str]) -> dict[str, float]:
    """``accuracy`` over the labelled tokens, and for entity tags ``precision``, ``recall`` and ``f1`` of the
    entities (micro-averaged over entity types)."""
    predictions = np.asarray(logits).argmax(axis=-1)
    labels = np.asarray(labels)
    kept = labels != IGNORED
    metrics = {"accuracy": float((predictions[kept] == labels[kept]).mean()) if kept.any() else 0.0}
    if uses_entity_tags(names):
        from seqeval.metrics import f1_score, precision_score, recall_score

        truth, predicted = tag_sequences(predictions, labels, names)
        metrics.update(
            precision=float(precision_score(truth, predicted, zero_division=0)),
            recall=float(recall_score(truth, predicted, zero_division=0)),
            f1=float(f1_score(truth, predicted, zero_division=0)),
        )
    return metrics
