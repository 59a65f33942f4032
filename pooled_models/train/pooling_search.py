"""``--pooling auto``: before the real run, a short search on the training data chooses the pooling.

Each candidate of ``--auto_poolings`` trains for ``--auto_pooling_budget`` of the run's training steps: the run in
miniature (the same data, seed, learning rates, options and schedule shape, over fewer steps), built and trained by
the same code as the run itself (``run.py`` hands :func:`search_pooling` a function that builds a candidate's
Trainer). Two of the run's options stay out of the trials, because they span more steps than a trial has: the weight
average (``--ema_decay``) and the linear probe (``--linear_probe_epochs``). Each trial is scored on the validation
split by the metric that picks the best model (``--metric_for_best_model``, else the problem type's: macro-F1,
micro-F1, MSE), a multi-label trial at the thresholds the run would tune; the best candidate wins, the earlier one on a
tie. The run then trains the winner exactly as ``--pooling <winner>`` would: the random state is put back as it was
before the search, so even the new head's initial weights are the same.

Nothing of a trial is kept: it trains in this process, saves nothing (no checkpoint, no model) and its Trainer's
output folder is a temporary directory, removed when the trial ends, never in or beside ``output_dir``. What the
search found (every score, the choice, the budget) is logged, and the run records it in all_results.json and the model
card.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import math
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoConfig, set_seed

from ..modeling.configuration_pooled import PooledConfig
from ..modeling.problem_types import MULTI_LABEL
from ..thresholds import tune_thresholds
from .arguments import (
    AUTO_POOLING,
    AUTO_POOLING_BUDGET,
    AUTO_POOLING_CANDIDATES,
    given_label_embedding_options,
    pooled_config_kwargs,
)
from .data import Split
from .errors import UsageError
from .label_space import Labels
from .metrics import BEST_MODEL_METRIC, compute_metrics, logits_of, probabilities
from .task_specs import is_task_run
from .threshold_tuning import ThresholdPlan

__all__ = [
    "PoolingSearch",
    "SEARCH_RESULTS_KEY",
    "is_auto",
    "check_pooling_search",
    "check_candidates",
    "refuse_searching_a_trained_model",
    "refuse_resuming_a_search",
    "search_metric",
    "trial_arguments",
    "validation_metrics",
    "choose_pooling",
    "search_pooling",
]

logger = logging.getLogger("pooled_models.train")

# The results key of a run that searched (all_results.json).
SEARCH_RESULTS_KEY = "auto_pooling"

# (pooling, the trial's TrainingArguments) -> a Trainer ready to train that candidate, as the run builds its own.
TrialTrainer = Callable[[str, Any], Any]


@dataclasses.dataclass
class PoolingSearch:
    """What ``--pooling auto`` found."""

    chosen: str
    metric: str  # e.g. "eval_f1_macro"
    greater_is_better: bool
    scores: dict[str, float]  # candidate -> its validation score, in the order they were tried
    budget: float  # each candidate's share of the run's training steps
    steps: int  # the training steps each candidate took
    validation_rows: int
    seed: int
    train_seconds: float  # the trials' optimisation loops (Trainer's train_runtime), all candidates
    seconds: float  # the whole search: building, training and scoring every candidate

    def describe(self) -> str:
        """The log line: the choice, why (every score) and what it cost."""
        scores = ", ".join(
            f"{name} {score:.4f}{' (chosen)' if name == self.chosen else ''}"
            for name, score in self.scores.items()
        )
        direction = "highest" if self.greater_is_better else "lowest"
        return (
            f"--pooling auto chose {self.chosen}: the {direction} {self.metric} on the validation split "
            f"({self.validation_rows} rows) after {_steps(self.steps)} per candidate "
            f"(--auto_pooling_budget {self.budget} of the run's steps, seed {self.seed}; {self.seconds:.0f} s in all): "
            f"{scores}. The run now trains pooling={self.chosen}, as --pooling {self.chosen} would."
        )

    def results(self) -> dict[str, Any]:
        """The search, as all_results.json records it."""
        return {
            "chosen": self.chosen,
            "metric": self.metric,
            "greater_is_better": self.greater_is_better,
            "scores": {
                name: None if math.isnan(score) else score for name, score in self.scores.items()
            },  # JSON
            "budget": self.budget,
            "steps_per_candidate": self.steps,
            "validation_rows": self.validation_rows,
            "train_seconds": round(self.train_seconds, 3),
            "seconds": round(self.seconds, 3),
        }

    def card_settings(self) -> dict[str, str]:
        """The model card's training-settings rows."""
        scores = ", ".join(
            f"**{name} {score:.4f}**" if name == self.chosen else f"{name} {score:.4f}"
            for name, score in self.scores.items()
        )
        return {
            "pooling": f"`{self.chosen}`, chosen by `--pooling auto`",
            f"pooling search (validation {self.metric.removeprefix('eval_')} after {_steps(self.steps)} each)": scores,
        }


def _steps(count: int) -> str:
    return f"{count} training step{'' if count == 1 else 's'}"


def is_auto(model_args) -> bool:
    return model_args.pooling == AUTO_POOLING


# ----------------------------------------------------------------------------------------------------
# Checks, all before the run writes anything
# ----------------------------------------------------------------------------------------------------


def check_pooling_search(model_args, data_args, training_args) -> None:
    """Refuse what ``--pooling auto`` cannot do, and its settings without it."""
    if not is_auto(model_args):
        changed = [
            name
            for name, value, default in (
                ("auto_poolings", training_args.auto_poolings, list(AUTO_POOLING_CANDIDATES)),
                ("auto_pooling_budget", training_args.auto_pooling_budget, AUTO_POOLING_BUDGET),
            )
            if value != default
        ]
        if changed:
            raise UsageError(
                f"{' and '.join(changed)} {'are settings' if len(changed) > 1 else 'is a setting'} of --pooling "
                f"{AUTO_POOLING}; this run's pooling is {model_args.pooling!r}. Add --pooling {AUTO_POOLING}, or leave "
                f"{' and '.join(changed)} out."
            )
        return
    if is_task_run(data_args):
        raise UsageError(
            f"--pooling {AUTO_POOLING} chooses the pooling of a sequence classifier; a token-classification or "
            "multi-task run (tags_column, tasks) has none to choose, or one per task: give each sequence task its "
            "pooling."
        )
    if not training_args.do_train:
        raise UsageError(
            f"--pooling {AUTO_POOLING} trains each candidate briefly to choose one: it needs --do_train (a run that "
            "only evaluates a saved model keeps that model's pooling)."
        )
    if not training_args.do_eval:
        raise UsageError(
            f"--pooling {AUTO_POOLING} chooses by the score on the validation split: give validation data "
            "(--validation_file, or a dataset with a validation split) and --do_eval."
        )
    label_settings = given_label_embedding_options(training_args)
    if label_settings:
        raise UsageError(
            f"{' and '.join(label_settings)} set how label-token embeddings train, and --pooling {AUTO_POOLING} "
            "does not choose among label tokens: leave them out, or choose --pooling label_tokens."
        )


def refuse_searching_a_trained_model(model_args, saved_config) -> None:
    """A model train.py saved keeps its pooling: there is nothing to choose."""
    if saved_config is not None:
        raise UsageError(
            f"{model_args.model_name_or_path} is a trained pooled model, with pooling={saved_config.pooling!r}: "
            f"--pooling {AUTO_POOLING} chooses the pooling of a new head. Start from its backbone instead."
        )


def check_candidates(model_args, candidates: list[str], labels: Labels) -> None:
    """Every candidate takes the run's model settings: checked by building each candidate's config (the backbone's
    config only: no weights are loaded), so a setting that fits one pooling and not another is refused before the
    first trial."""
    backbone_config = AutoConfig.from_pretrained(
        model_args.model_name_or_path,
        revision=model_args.model_revision,
        cache_dir=model_args.cache_dir,
        trust_remote_code=False,
    )
    settings = {name: value for name, value in pooled_config_kwargs(model_args).items() if name != "pooling"}
    for candidate in candidates:
        try:
            PooledConfig(
                backbone_config=backbone_config,
                pooling=candidate,
                num_labels=labels.num_labels,
                problem_type=labels.problem_type,
                **settings,
            )
        except ValueError as error:
            raise UsageError(
                f"--pooling {AUTO_POOLING} tries {', '.join(candidates)}, and {candidate!r} does not "
                f"take this run's settings: {error} Leave that setting out, or {candidate!r} out of --auto_poolings."
            ) from error


def refuse_resuming_a_search(checkpoint: str) -> None:
    """A resumed run continues the pooling its checkpoint holds: a new search could choose another one."""
    try:
        pooling = json.loads((Path(checkpoint) / "config.json").read_text(encoding="utf-8")).get("pooling")
    except (OSError, ValueError):
        pooling = None
    chose = f" (it chose {pooling!r}, which {checkpoint} holds)" if pooling else ""
    hint = (
        f" with --pooling {pooling}"
        if pooling
        else " with the pooling it chose (its log, or the checkpoint's config.json)"
    )
    raise UsageError(
        f"--pooling {AUTO_POOLING} with --resume_from_checkpoint would search again and could choose another "
        f"pooling than the interrupted run{chose}: resume it{hint}."
    )


# ----------------------------------------------------------------------------------------------------
# The trials
# ----------------------------------------------------------------------------------------------------


def search_metric(training_args, problem_type: str) -> tuple[str, bool]:
    """``(eval_<metric>, greater_is_better)``: what picks the best model, ``--metric_for_best_model`` if given."""
    if training_args.best_metric_chosen:
        # TrainingArguments sets greater_is_better with the metric: False for a loss, True for anything else.
        name, greater = training_args.metric_for_best_model, bool(training_args.greater_is_better)
    else:
        name, greater = BEST_MODEL_METRIC[problem_type]
    return (name if name.startswith("eval_") else f"eval_{name}"), greater


def trial_arguments(training_args, budget: float, output_dir: str):
    """The run's TrainingArguments for one trial: ``budget`` of its training steps, nothing saved, evaluated or
    reported while training, and without the options that span more steps than a trial has."""
    changes: dict[str, Any] = {
        "output_dir": output_dir,
        "eval_strategy": "no",
        "save_strategy": "no",
        "load_best_model_at_end": False,
        "early_stopping_patience": None,
        "report_to": "none",
        "push_to_hub": False,
        "resume_from_checkpoint": None,
        "ema_decay": None,
        "linear_probe_epochs": 0.0,
    }
    if training_args.max_steps > 0:
        changes["max_steps"] = max(1, math.ceil(training_args.max_steps * budget))
    else:
        # Trainer counts a fractional epoch's started step, as it counts the run's: ceil(epochs x steps per epoch).
        changes["num_train_epochs"] = training_args.num_train_epochs * budget
    if training_args.warmup_steps >= 1:  # a number of steps, not a share: scaled like the run
        changes["warmup_steps"] = math.ceil(training_args.warmup_steps * budget)
    return dataclasses.replace(training_args, **changes)


def validation_metrics(
    trainer, validation: Split, problem_type: str, threshold_plan: ThresholdPlan | None
) -> dict[str, float]:
    """A trained candidate's validation metrics (``eval_``...), multi-label ones at the thresholds the run would tune
    on these scores (else at the model's ``decision_threshold``)."""
    prediction = trainer.predict(validation.encoded, metric_key_prefix="eval")
    logits, targets = logits_of(prediction.predictions), prediction.label_ids
    threshold = getattr(trainer.model.config, "decision_threshold", None)
    if problem_type == MULTI_LABEL and threshold_plan is not None and threshold_plan.tunes:
        threshold = tune_thresholds(
            probabilities(logits, MULTI_LABEL),
            targets,
            per_label=threshold_plan.tuning == "per_label",
            average=threshold_plan.average,
        )
    computed = compute_metrics(logits, targets, problem_type, threshold)
    return {**prediction.metrics, **{f"eval_{name}": value for name, value in computed.items()}}


def choose_pooling(scores: dict[str, float], greater_is_better: bool) -> str:
    """The best-scoring candidate, the earliest on a tie; a NaN score (an undefined metric) never wins."""
    scored = {name: score for name, score in scores.items() if not math.isnan(score)}
    if not scored:
        raise UsageError(
            f"--pooling {AUTO_POOLING}: no candidate got a validation score ({', '.join(scores)} all scored NaN), so "
            "there is nothing to choose by; give --pooling yourself, or a --metric_for_best_model that is defined."
        )
    best = max if greater_is_better else min
    return best(scored, key=scored.get)  # max and min keep the first of equal keys: the earlier candidate


@contextlib.contextmanager
def random_state_kept() -> Iterator[None]:
    """Python's, NumPy's and torch's random states as they were before the block (on the CPU and the current CUDA
    device): what the block draws leaves no trace on what follows."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        yield
    random.setstate(python_state)
    np.random.set_state(numpy_state)


def search_pooling(
    candidates: list[str],
    budget: float,
    training_args,
    validation: Split,
    problem_type: str,
    threshold_plan: ThresholdPlan | None,
    trial_trainer: TrialTrainer,
) -> PoolingSearch:
    """Train each candidate for ``budget`` of the run with the run's seed, score it on ``validation`` and choose."""
    metric, greater_is_better = search_metric(training_args, problem_type)
    scores: dict[str, float] = {}
    steps, train_seconds, start = 0, 0.0, time.perf_counter()
    with random_state_kept():
        for number, candidate in enumerate(candidates, start=1):
            trial_start = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="pooled_models-pooling-trial-") as scratch:
                set_seed(training_args.seed)  # every candidate starts from the same random state
                trainer = trial_trainer(candidate, trial_arguments(training_args, budget, scratch))
                logger.info(
                    "--pooling auto: training candidate %d of %d, %s.", number, len(candidates), candidate
                )
                trained = trainer.train()
                metrics = validation_metrics(trainer, validation, problem_type, threshold_plan)
                steps = trainer.state.global_step
                train_seconds += float(trained.metrics.get("train_runtime", 0.0))
                del trainer  # one candidate's model in memory at a time
                gc.collect()
            if metric not in metrics:
                raise UsageError(
                    f"--pooling {AUTO_POOLING} chooses by {metric}, which the validation metrics lack; they are: "
                    f"{', '.join(sorted(metrics))}. Set --metric_for_best_model to one of them."
                )
            scores[candidate] = float(metrics[metric])
            logger.info(
                "--pooling auto: %s scored %s %.4f after %s (%.0f s).",
                candidate,
                metric,
                scores[candidate],
                _steps(steps),
                time.perf_counter() - trial_start,
            )
    search = PoolingSearch(
        chosen=choose_pooling(scores, greater_is_better),
        metric=metric,
        greater_is_better=greater_is_better,
        scores=scores,
        budget=budget,
        steps=steps,
        validation_rows=len(validation.encoded),
        seed=training_args.seed,
        train_seconds=train_seconds,
        seconds=time.perf_counter() - start,
    )
    logger.info("%s", search.describe())
    return search
