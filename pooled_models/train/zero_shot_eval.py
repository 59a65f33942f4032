"""Zero-shot evaluation (``--zero_shot_file``): how well a label-text model with the shared scorer picks labels it
need not have been trained on, and what this run's training added to that.

Every row of the file is scored against every label the file holds (its label column; the candidates of
``pipeline("zero-shot-classification")``, read as the pipeline reads them: the label's text with the tokenizer's
special tokens, the text truncated to the run's length), by the model twice: before this run trains it and after. For
a new model, "before training" is the backbone with an untrained scorer, whose ranking is the cosine similarity of the
text's mean-pooled vector and each label's (the untrained scorer is a scaled cosine): the cosine baseline. The run
reports accuracy and macro-F1 of both, and the model card shows them.

The generalized setting (a new label among the old ones): a user adds labels to the ones the model was trained on, so
every row is also asked against the trained labels and the file's unseen ones together. The seen rows are the
validation file's (they carry trained labels; with the zero-shot file's rows of a trained label, if it has any), the
unseen rows the zero-shot file's rows of an unseen label; the run reports the accuracy on each and their harmonic mean,
before and after training. Training teaches a model to prefer the labels it saw, which the unseen-only figure hides.
Without a validation file, or without an unseen label in the zero-shot file, the generalized setting is left out and
the log says why.

The seen-label margin (``--seen_label_margin``, the model's ``label_text_seen_margin``, calibrated stacking): after
training, a number taken off the score of every trained label, saved with the model. Every label-text model has one
(the config's default, ``label_text_margin.py``); "auto" tunes it on the validation rows asked against the trained
labels and the zero-shot file's unseen label names (never its rows): the largest margin of ``MARGIN_GRID`` that keeps
``KEPT_ACCURACY`` of their accuracy (bench/generalized_zero_shot.py measured it); where it cannot, the model keeps its
own. A new model is scored "before training" without it: none of its labels is trained yet.

Only a model that scores labels given as text can do this: ``pooling="label_text"`` with ``label_text_scorer="shared"``.
Any other is refused by name before anything is written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..errors import DataError, UsageError
from ..modeling.label_text import label_text_token_ids, label_texts, pad_label_ids
from ..modeling.label_text_margin import seen_margin
from ..modeling.problem_types import SINGLE_LABEL
from .data.files import Split, read_file
from .data.labels import Labels
from .data.sequence import check_texts, report_truncated
from .evaluation import compute_metrics

__all__ = [
    "ZERO_SHOT",
    "BEFORE_TRAINING",
    "ZeroShotRows",
    "SeenRows",
    "GENERALIZED",
    "read_seen_rows",
    "generalized_metrics",
    "harmonic_mean",
    "tune_margin",
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


@dataclass(frozen=True)
class SeenRows:
    """Rows of labels the model was trained on (the validation file's), for the generalized setting: their texts and
    each row's label name."""

    source: str
    texts: list[str]
    labels: list[str]


# The generalized setting's metrics (each model's scores carry them next to accuracy and macro-F1).
GENERALIZED = ("generalized_seen_accuracy", "generalized_unseen_accuracy", "generalized_harmonic_mean")


@dataclass
class ZeroShotResult:
    """What the summary and the model card report: the rows, and ``{"trained model" | "before training": {metric:
    value}}``."""

    rows: ZeroShotRows
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    seen_source: str | None = None  # where the generalized setting's seen rows come from (None: not scored)
    margin: float = 0.0  # the seen-label margin this run set (set_margin)

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
    parse_margin(data_args.seen_label_margin)
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


def read_seen_rows(task) -> SeenRows | None:
    """The rows of a run's task that carry trained labels, for the generalized setting: its validation split (None
    without one). A single-label task's targets index its label names."""
    split = task.splits.get("validation")
    if split is None or split.targets is None:
        return None
    names = [str(name) for name in task.labels.names]
    texts = list(split.dataset[task.spec.data.text_column])
    return SeenRows(split.source, texts, [names[int(target)] for target in split.targets])


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


def harmonic_mean(seen: float, unseen: float) -> float:
    """The harmonic mean of the seen and unseen rows' accuracies (0 where either is 0), generalized zero-shot
    learning's usual summary: high only when both are."""
    return 0.0 if seen + unseen == 0 else 2 * seen * unseen / (seen + unseen)


def generalized_rows(
    rows: ZeroShotRows, seen: SeenRows, trained: list[str]
) -> tuple[list[str], list[str], list[bool]]:
    """The generalized setting's rows: ``(texts, label names, is a seen row)``, the seen rows first (``seen``'s and
    the zero-shot file's rows of a trained label), then the zero-shot file's rows of an unseen label."""
    known = set(trained)
    names = [rows.labels[target] for target in rows.targets]
    of_trained = [index for index, name in enumerate(names) if name in known]
    of_unseen = [index for index, name in enumerate(names) if name not in known]
    texts = [*seen.texts, *(rows.texts[i] for i in of_trained), *(rows.texts[i] for i in of_unseen)]
    labels = [*seen.labels, *(names[i] for i in of_trained), *(names[i] for i in of_unseen)]
    is_seen = [True] * (len(seen.texts) + len(of_trained)) + [False] * len(of_unseen)
    return texts, labels, is_seen


def generalized_metrics(
    model, tokenizer, rows: ZeroShotRows, seen: SeenRows, trained: list[str], max_length: int
) -> dict[str, float]:
    """Every row asked against the ``trained`` labels (read as the model reads them: their descriptions where it has
    some) and the zero-shot file's unseen ones together: the accuracy on the seen rows, on the unseen rows, and their
    harmonic mean."""
    candidates = [*trained, *rows.unseen]
    texts, labels, is_seen = generalized_rows(rows, seen, trained)
    label_text = label_texts(trained, getattr(model.config, "label_descriptions", None)) + list(rows.unseen)
    logits = zero_shot_logits(model, tokenizer, texts, label_text, max_length)
    correct = logits.argmax(-1) == np.asarray([candidates.index(name) for name in labels])
    is_seen = np.asarray(is_seen)
    seen_accuracy, unseen_accuracy = float(correct[is_seen].mean()), float(correct[~is_seen].mean())
    return {
        "generalized_seen_accuracy": seen_accuracy,
        "generalized_unseen_accuracy": unseen_accuracy,
        "generalized_harmonic_mean": harmonic_mean(seen_accuracy, unseen_accuracy),
    }


class ZeroShotEvaluation:
    """The zero-shot evaluation of one run: scored before training (when the run trains) and after; in the
    generalized setting too where the run has ``seen`` rows and the file an unseen label."""

    def __init__(
        self,
        rows: ZeroShotRows,
        tokenizer,
        max_length: int,
        seen: SeenRows | None = None,
        trained: list[str] | None = None,
        margin: str = "auto",
    ):
        self.margin = parse_margin(margin)
        self.result = ZeroShotResult(rows)
        self.tokenizer = tokenizer
        self.max_length = max_length
        lengths = [len(ids) for ids in tokenizer(rows.texts, truncation=False, verbose=False)["input_ids"]]
        report_truncated(
            rows.source, sum(length > max_length for length in lengths), len(lengths), max_length
        )
        self.trained = list(trained or [])
        self.seen = seen if seen is not None and seen.texts and rows.unseen and self.trained else None
        if self.seen is None:
            logger.info("Zero-shot, generalized setting: left out: %s.", _why_not_generalized(rows, seen))
        else:
            self.result.seen_source = f"{self.seen.source} ({len(self.seen.texts)} rows)"

    def set_margin(self, model) -> None:
        """After training: the seen-label margin (``--seen_label_margin``) set on ``model``'s config, tuned where
        "auto" and the run can (module docstring), and the line that says what was chosen and why."""
        margin, config = self.margin, model.config
        if margin is None and self.seen is None:
            self.result.margin = seen_margin(config)
            logger.info(
                "Seen-label margin: not tuned: %s; the model's own stays: %s (label_text_seen_margin).",
                _why_not_generalized(self.result.rows, None),
                self.result.margin,
            )
            return
        if margin is None:
            rows, trained = self.result.rows, self.trained
            # The validation rows only: none of the zero-shot file's rows, which the run reports on.
            config.label_text_seen_margin = 0.0
            candidates = label_texts(trained, config.label_descriptions) + list(rows.unseen)
            logits = zero_shot_logits(model, self.tokenizer, self.seen.texts, candidates, self.max_length)
            targets = np.asarray([trained.index(name) for name in self.seen.labels])
            margin, start, kept = tune_margin(logits, targets, len(trained))
            logger.info(
                "Seen-label margin: %.2f, tuned on %s asked against the %d trained labels and the %d unseen ones of "
                "%s (their names only): accuracy %.4f at no margin, %.4f at this one (the largest margin that keeps "
                "%d%% of it).",
                margin,
                self.seen.source,
                len(trained),
                len(rows.unseen),
                rows.source,
                start,
                kept,
                round(KEPT_ACCURACY * 100),
            )
        else:
            logger.info("Seen-label margin: %s (--seen_label_margin).", margin)
        self.result.margin = margin
        config.label_text_seen_margin = margin
        config.label_text_seen_ids = [list(row) for row in config.label_text_ids] if margin else None

    def score(self, model, which: str, new_model: bool = False) -> None:
        """Score ``model`` as ``which`` ("before training" or "trained model") and log the lines; a ``new_model``
        without its seen-label margin, since none of its labels is trained yet (the cosine baseline)."""
        with _margin_off(model.config) if new_model else nullcontext():
            self._score(model, which)

    def _score(self, model, which: str) -> None:
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
        if self.seen is None:
            return
        general = generalized_metrics(model, self.tokenizer, rows, self.seen, self.trained, self.max_length)
        scores.update(general)
        logger.info(
            "Zero-shot, generalized, %s: seen rows %.4f, unseen rows %.4f, harmonic mean %.4f (every row asked "
            "against the %d trained labels and the %d unseen ones together; seen rows: %s, %d rows, and the "
            "zero-shot file's rows of a trained label).",
            which,
            general["generalized_seen_accuracy"],
            general["generalized_unseen_accuracy"],
            general["generalized_harmonic_mean"],
            len(self.trained),
            len(rows.unseen),
            self.seen.source,
            len(self.seen.texts),
        )


# The seen-label margins tried by --seen_label_margin auto (logit units; the shared scorer starts at 20 per unit of
# cosine), and the share of the validation rows' accuracy the chosen one keeps (bench/generalized_zero_shot.py).
MARGIN_GRID = tuple(step / 4 for step in range(41))
KEPT_ACCURACY = 0.9


def parse_margin(value: str) -> float | None:
    """``--seen_label_margin``: None for "auto", else the number (finite)."""
    if str(value).strip().lower() == "auto":
        return None
    try:
        margin = float(value)
    except ValueError:
        margin = float("nan")
    if not np.isfinite(margin):
        raise UsageError(f"--seen_label_margin must be 'auto' or a number (0: none), got {value!r}.")
    return margin


def tune_margin(logits: np.ndarray, targets: np.ndarray, num_trained: int) -> tuple[float, float, float]:
    """The largest margin of ``MARGIN_GRID`` that, taken off the first ``num_trained`` columns of ``logits`` (rows of
    trained labels asked against the trained labels and other ones), keeps ``KEPT_ACCURACY`` of their accuracy at no
    margin: ``(margin, accuracy at 0, accuracy at margin)``."""

    def accuracy(margin: float) -> float:
        shifted = logits.copy()
        shifted[:, :num_trained] -= margin
        return float((shifted.argmax(-1) == targets).mean())

    start = accuracy(0.0)
    chosen, kept = 0.0, start
    for margin in MARGIN_GRID:
        value = accuracy(margin)
        if value >= KEPT_ACCURACY * start:
            chosen, kept = margin, value
    return chosen, start, kept


@contextmanager
def _margin_off(config) -> Iterator[None]:
    """``config``'s seen-label margin set to none while inside, then put back."""
    margin = config.label_text_seen_margin
    config.label_text_seen_margin = 0.0
    try:
        yield
    finally:
        config.label_text_seen_margin = margin


def _why_not_generalized(rows: ZeroShotRows, seen: SeenRows | None) -> str:
    if not rows.unseen:
        return f"every label of {rows.source} is one the model was trained on"
    return (
        "it asks rows of the trained labels too, which the validation file gives, and this run has none "
        "(--validation_file)"
    )
