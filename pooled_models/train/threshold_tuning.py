"""train.py's multi-label decision thresholds: whether a run tunes them, tuning them on the validation split after
training, and what the model card says about where they came from.

Tuning maximises micro- or macro-F1 on the validation split's sigmoid scores
(:func:`pooled_models.thresholds.tune_thresholds`) and stores the result in ``config.decision_threshold`` before the
model is saved, so config.json, the metrics, predictions.jsonl and ``predict_label_sets`` all use it. The validation
metrics measured afterwards are optimistic, since the thresholds were fitted on those very rows; the test metrics are
the honest estimate. The validation metrics at 0.5 are reported as well (``eval_f1_micro_at_0.5``...), to show what
tuning bought.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..modeling.problem_types import MULTI_LABEL
from ..thresholds import DEFAULT_THRESHOLD, tune_thresholds
from .data import Split
from .errors import UsageError
from .label_space import Labels
from .metrics import compute_metrics, logits_of, probabilities

__all__ = ["ThresholdPlan", "plan_thresholds", "tune_on_validation", "at_default_name"]

logger = logging.getLogger(__name__)


@dataclass
class ThresholdPlan:
    """How a multi-label run's decision threshold(s) are chosen."""

    tuning: str  # "global", "per_label" or "none"
    average: str  # the F1 that tuning maximises: "micro" or "macro"
    origin: str  # where config.json's threshold comes from: "tuned", "given", "saved" or "default"

    @property
    def tunes(self) -> bool:
        return self.tuning != "none"

    def describe(self, validation_rows: int | None = None) -> str:
        """How the threshold was chosen, as the model card says it (completes "The threshold was ...")."""
        if self.origin == "tuned":
            rows = f" ({validation_rows} rows)" if validation_rows else ""
            return f"tuned on the validation split{rows} to maximise {self.average}-F1"
        return {
            "given": "set with `--decision_threshold`",
            "saved": "kept from the model this run started from",
            "default": "the default (no threshold was set or tuned)",
        }[self.origin]


def plan_thresholds(
    training_args, labels: Labels, splits: dict[str, Split], given: bool, saved: bool
) -> ThresholdPlan | None:
    """The run's threshold plan (None unless the problem is multi-label), from ``--tune_thresholds``.

    ``given``: the user set ``decision_threshold``; ``saved``: the model the run starts from carries one. An explicit
    ``global``/``per_label`` that cannot be honoured is a UsageError (raised before anything is written); ``auto``
    tunes one global threshold whenever it can and says why when it does not.
    """
    requested = training_args.tune_thresholds
    multi_label = labels.problem_type == MULTI_LABEL
    if requested in ("global", "per_label"):
        if not multi_label:
            raise UsageError(
                f"tune_thresholds={requested} chooses the decision thresholds of a multi-label classifier; this run's "
                f"labels are {labels.problem_type}. Leave tune_thresholds out."
            )
        if "validation" not in splits:
            raise UsageError(
                f"tune_thresholds={requested} tunes on the validation split: give validation data and --do_eval."
            )
        if given:
            raise UsageError(
                f"decision_threshold is set and tune_thresholds={requested} would replace it: choose one "
                "(tune_thresholds none keeps the threshold you set)."
            )
        tuning = requested
    elif requested == "auto":
        reason = _why_auto_does_not_tune(training_args, labels, splits, given)
        tuning = "none" if reason else "global"
        if reason:
            logger.info("Decision thresholds are not tuned (tune_thresholds=auto): %s.", reason)
    else:
        tuning = "none"
    if not multi_label:
        return None
    origin = "tuned" if tuning != "none" else "given" if given else "saved" if saved else "default"
    return ThresholdPlan(tuning=tuning, average=training_args.threshold_average, origin=origin)


def _why_auto_does_not_tune(
    training_args, labels: Labels, splits: dict[str, Split], given: bool
) -> str | None:
    if labels.problem_type != MULTI_LABEL:
        return f"the labels are {labels.problem_type}"
    if not training_args.do_train:
        return "the run does not train"
    if "validation" not in splits:
        return "there is no validation split (--do_eval)"
    if given:
        return "decision_threshold is set"
    return None


def at_default_name(metric: str) -> str:
    """The name under which a validation metric at the default threshold is reported: ``eval_f1_micro_at_0.5``."""
    return f"eval_{metric}_at_{DEFAULT_THRESHOLD}"


def tune_on_validation(
    trainer, validation: Split, plan: ThresholdPlan
) -> tuple[float | list[float], dict[str, float]]:
    """The thresholds tuned on the validation split's predictions, and the validation metrics at 0.5.

    ``trainer.predict`` gathers the predictions of every process onto every process, so under ``accelerate launch``
    each process tunes on the same scores and ends with the same thresholds.
    """
    prediction = trainer.predict(validation.encoded, metric_key_prefix="eval")
    logits = logits_of(prediction.predictions)
    targets = prediction.label_ids
    thresholds = tune_thresholds(
        probabilities(logits, MULTI_LABEL),
        targets,
        per_label=plan.tuning == "per_label",
        average=plan.average,
    )
    at_default = compute_metrics(logits, targets, MULTI_LABEL, DEFAULT_THRESHOLD)
    tuned = compute_metrics(logits, targets, MULTI_LABEL, thresholds)
    metric = f"f1_{plan.average}"
    logger.info(
        "Decision threshold%s tuned on %d validation rows for %s-F1: %s. Validation %s: %.4f at %s, %.4f tuned "
        "(optimistic: tuned on these rows; the test metrics are the honest ones).",
        "s" if plan.tuning == "per_label" else "",
        len(targets),
        plan.average,
        _shown(thresholds),
        metric,
        at_default[metric],
        DEFAULT_THRESHOLD,
        tuned[metric],
    )
    return thresholds, {at_default_name(name): value for name, value in at_default.items()}


def _shown(thresholds: float | list[float]) -> str:
    if isinstance(thresholds, list):
        return "[" + ", ".join(f"{value:.4f}" for value in thresholds) + "]"
    return f"{thresholds:.4f}"
