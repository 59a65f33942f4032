"""Zero-shot evaluation (``--zero_shot_file``): how well a label-text model with the shared scorer picks labels it
need not have been trained on, and what this run's training added to that.

Every row of the file is scored against every label the file holds (its label column; the candidates of
``pipeline("zero-shot-classification")``, read as the pipeline reads them: the label's text with the tokenizer's
special tokens, the text truncated to the run's length), by the model twice: before this run trains it and after. For
a new model, "before training" is the backbone with an untrained scorer, whose ranking is the cosine similarity of the
text's mean-pooled vector and each label's (the untrained scorer is a scaled cosine): the cosine baseline. The run
reports accuracy and macro-F1 of both, and the model card shows them.

Only a model that scores labels given as text can do this: ``pooling="label_text"`` with ``label_text_scorer="shared"``.
Any other is refused by name before anything is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..errors import DataError, UsageError
from ..modeling.label_text import label_text_token_ids, pad_label_ids
from ..modeling.problem_types import SINGLE_LABEL
from .data.files import Split, read_file
from .data.labels import Labels
from .data.sequence import check_texts, report_truncated
from .evaluation import compute_metrics

__all__ = [
    "ZERO_SHOT",
    "BEFORE_TRAINING",
    "ZeroShotRows",
    "ZeroShotResult",
    "read_zero_shot_rows",
    "check_zero_shot_model",
    "scores_any_labels",
    "zero_shot_logits",
    "zero_shot_metrics",
    "ZeroShotEvaluation",
]

logger = logging.getLogger("pooled_models.train")

# The metrics' prefixes in the run's results (all_results.json): the trained model's, and the model's before training.
ZERO_SHOT = "zero_shot"
BEFORE_TRAINING = "zero_shot_before_training"

# Texts scored per forward pass.
BATCH_SIZE = 32


@dataclass(frozen=True)
class ZeroShotRows:
    """The zero-shot file read and checked: its texts, the candidate labels (the file's own, sorted), each row's
    label as an index into them, and the candidates the model was not trained on."""

    source: str  # as messages name it: "zero_shot file data/unseen.csv"
    file_name: str  # as the model card names it: "unseen.csv"
    texts: list[str]
    labels: list[str]
    targets: list[int]
    unseen: list[str]


@dataclass
class ZeroShotResult:
    """What the summary and the model card report: the rows, and ``{"trained model" | "before training": {metric:
    value}}``."""

    rows: ZeroShotRows
    scores: dict[str, dict[str, float]] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """The scores as the run's metrics: ``zero_shot_accuracy``, ``zero_shot_before_training_f1_macro``..."""
        prefixes = {"trained model": ZERO_SHOT, "before training": BEFORE_TRAINING}
        return {
            f"{prefixes[model]}_{metric}": value
            for model, scores in self.scores.items()
            for metric, value in scores.items()
        }


def read_zero_shot_rows(data_args, model_labels: list[str], cache_dir: str | None) -> ZeroShotRows | None:
    """The rows of ``data_args.zero_shot_file`` (None without one), checked as a validation file is: its text and
    label columns, every text, one label per row; the candidates are every label it holds."""
    path = data_args.zero_shot_file
    if not path:
        return None
    if data_args.text_pair_column:
        raise UsageError(
            "zero_shot_file scores one text against each label; this run's texts are pairs (text_pair_column)."
        )
    split = Split("zero_shot", f"zero_shot file {path}", read_file(Path(path), cache_dir))
    split.require_columns([data_args.text_column, data_args.label_column])
    check_texts(split, data_args.text_column)
    column = data_args.label_column
    values, feature = split.dataset[column], split.dataset.features[column]
    labels = Labels.from_training(values, feature, split.source, column, problem_type="auto")
    if labels.problem_type != SINGLE_LABEL:
        raise DataError(
            f"{split.source}, column {column!r}: zero-shot evaluation scores one label per row, as "
            f"pipeline('zero-shot-classification') picks one; these labels read as {labels.problem_type}."
        )
    targets, _ = labels.encode(values, feature, split.source, column)
    known = set(model_labels)
    return ZeroShotRows(
        source=split.source,
        file_name=Path(path).name,
        texts=list(split.dataset[data_args.text_column]),
        labels=[str(name) for name in labels.names],
        targets=targets,
        unseen=[str(name) for name in labels.names if str(name) not in known],
    )


def scores_any_labels(config) -> bool:
    """Whether a model of ``config`` scores labels given as text, its own or not: label text with the shared scorer."""
    return getattr(config, "pooling", None) == "label_text" and config.label_text_scorer == "shared"


def check_zero_shot_model(config) -> None:
    """Refuse a model that cannot score labels given as text, by name, with the one that can."""
    if scores_any_labels(config):
        return
    pooling = getattr(config, "pooling", None)
    scorer = getattr(config, "label_text_scorer", None)
    what = f"pooling={pooling!r}" + (f" with label_text_scorer={scorer!r}" if pooling == "label_text" else "")
    raise UsageError(
        f"zero_shot_file scores labels given as text, which only pooling 'label_text' with label_text_scorer "
        f"'shared' can (one scorer for every label); this run's model has {what}, which scores its own labels only. "
        "Train one with --pooling label_text --label_text_scorer shared."
    )


@torch.no_grad()
def zero_shot_logits(model, tokenizer, texts: list[str], labels: list[str], max_length: int) -> np.ndarray:
    """``[texts, labels]``: ``model``'s score of each text for each label given as text, as
    ``pipeline("zero-shot-classification")`` reads them (label texts with the tokenizer's special tokens, tokenised
    once; texts truncated to ``max_length`` tokens)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    label_ids, label_mask = pad_label_ids(label_text_token_ids(labels, tokenizer), device=device)
    logits = []
    try:
        for start in range(0, len(texts), BATCH_SIZE):
            batch = tokenizer(
                texts[start : start + BATCH_SIZE],
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="pt",
            )
            inputs = {name: batch[name].to(device) for name in tokenizer.model_input_names if name in batch}
            output = model(**inputs, label_input_ids=label_ids, label_attention_mask=label_mask)
            logits.append(output.logits.float().cpu().numpy())
    finally:
        model.train(was_training)
    return np.concatenate(logits)


def zero_shot_metrics(model, tokenizer, rows: ZeroShotRows, max_length: int) -> dict[str, float]:
    """Accuracy and macro-F1 of ``model`` picking each row's label among ``rows.labels``."""
    logits = zero_shot_logits(model, tokenizer, rows.texts, rows.labels, max_length)
    return compute_metrics(logits, np.asarray(rows.targets), SINGLE_LABEL)


class ZeroShotEvaluation:
    """The zero-shot evaluation of one run: scored before training (when the run trains) and after."""

    def __init__(self, rows: ZeroShotRows, tokenizer, max_length: int):
        self.result = ZeroShotResult(rows)
        self.tokenizer = tokenizer
        self.max_length = max_length
        lengths = [len(ids) for ids in tokenizer(rows.texts, truncation=False, verbose=False)["input_ids"]]
        report_truncated(
            rows.source, sum(length > max_length for length in lengths), len(lengths), max_length
        )

    def score(self, model, which: str) -> None:
        """Score ``model`` as ``which`` ("before training" or "trained model") and log the line."""
        scores = zero_shot_metrics(model, self.tokenizer, self.result.rows, self.max_length)
        self.result.scores[which] = scores
        rows = self.result.rows
        logger.info(
            "Zero-shot, %s: accuracy %.4f, macro-F1 %.4f (%s: %d rows, %d labels, %d of them not trained on).",
            which,
            scores["accuracy"],
            scores["f1_macro"],
            rows.source,
            len(rows.texts),
            len(rows.labels),
            len(rows.unseen),
        )
