"""The sweep's two baselines, trained on the same data and backbone as the poolings they are compared with.

* ``vanilla``: Transformers' own ``AutoModelForSequenceClassification`` on the backbone, trained by the same
  train.py run (same data, seed, epochs, learning rates, threshold tuning), so the only difference from a
  pooled model is the head Transformers puts on the backbone (e.g. BERT's pooler over the CLS token).
* ``logistic_regression``: sentence-transformers embeddings of the frozen backbone (the folder's own
  sentence-transformers recipe, or mean pooling when it has none), then scikit-learn's logistic regression
  (one-vs-rest for multi-label, ridge regression for regression) with its regularisation chosen on the
  validation split: what fine-tuning has to beat to be worth it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import transformers
from transformers import AutoModelForSequenceClassification

from ..errors import UsageError
from ..modeling.problem_types import MULTI_LABEL, REGRESSION
from ..thresholds import tune_thresholds
from ..train.arguments import parse_arguments
from ..train.data.sequence import Labels, prepare_splits, text_columns
from ..train.evaluation import BEST_MODEL_METRIC, compute_metrics, plan_thresholds, probabilities
from ..train.plan import needed_splits
from ..train.source import resolve_backbone

__all__ = ["vanilla_model", "logistic_regression_baseline", "REGULARISATION"]

# Inverse regularisation strengths tried on the validation split (C for logistic regression, 1/alpha for ridge).
REGULARISATION = (0.01, 0.1, 1.0, 10.0, 100.0)


def vanilla_model(source, labels: Labels, tokenizer):
    """``AutoModelForSequenceClassification`` on the backbone, a ``run(model_factory=...)`` for train.py's run:
    ``source`` is the run's model source (``path``, ``revision``, ``cache_dir``: train/source.py).

    The parameters ``from_pretrained`` has no weights for (the classification head) are recorded in
    ``newly_initialized_parameters``, so that ``head_learning_rate`` applies to them as to a pooled model's head.
    """
    # Transformers' report of the new head's weights is what this baseline expects (they are recorded below): said in a
    # verbose run (--log_level info) only.
    verbosity = transformers.utils.logging.get_verbosity()
    if verbosity > logging.INFO:
        transformers.utils.logging.set_verbosity(logging.ERROR)
    try:
        model, loading_info = _from_pretrained(source, labels)
    finally:
        transformers.utils.logging.set_verbosity(verbosity)
    model.newly_initialized_parameters = sorted(loading_info["missing_keys"])
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def _from_pretrained(source, labels: Labels):
    return AutoModelForSequenceClassification.from_pretrained(
        source.path,
        num_labels=labels.num_labels,
        id2label=labels.id2label,
        label2id=labels.label2id if labels.names else None,
        problem_type=labels.problem_type,
        revision=source.revision,
        cache_dir=source.cache_dir,
        use_safetensors=True,
        trust_remote_code=False,
        output_loading_info=True,
    )


def _embed(encoder, split, data_args) -> np.ndarray:
    """One vector per row; a sentence pair gives (u, v, |u - v|, u * v), the SBERT classifier's features."""
    columns = [
        encoder.encode(list(split.dataset[column]), batch_size=64, convert_to_numpy=True)
        for column in text_columns(data_args)
    ]
    if len(columns) == 1:
        return columns[0]
    first, second = columns
    return np.concatenate([first, second, np.abs(first - second), first * second], axis=1)


def _fit(problem_type: str, features: np.ndarray, targets: np.ndarray, strength: float, seed: int):
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.multiclass import OneVsRestClassifier

    if problem_type == REGRESSION:
        return Ridge(alpha=1.0 / strength).fit(features, targets)
    classifier = LogisticRegression(C=strength, max_iter=2000, random_state=seed)
    if problem_type == MULTI_LABEL:
        # A label with a single class in training cannot be fitted on its own; sklearn's OneVsRest predicts it
        # constantly, which is what such a label deserves.
        return OneVsRestClassifier(classifier).fit(features, targets.astype(int))
    return classifier.fit(features, targets)


def _scores(model, problem_type: str, features: np.ndarray, num_labels: int) -> np.ndarray:
    """What a classifier head would output: logits (the metrics apply softmax / sigmoid themselves)."""
    if problem_type == REGRESSION:
        return model.predict(features)
    if problem_type == MULTI_LABEL:
        return np.asarray(model.decision_function(features)).reshape(len(features), num_labels)
    log_probabilities = np.full((len(features), num_labels), -1e9)
    log_probabilities[:, model.classes_] = model.predict_log_proba(
        features
    )  # a class absent from training: never
    return log_probabilities


def logistic_regression_baseline(argv: list[str]) -> dict[str, Any]:
    """Fit the frozen-embedding baseline on the data ``argv`` (train.py arguments) describes.

    Returns train.py-style metrics (``eval_*`` on validation, ``test_*`` on a labelled test split), with
    ``train_runtime`` (embedding and fitting), ``train_samples_per_second`` and ``parameters``. Multi-label
    thresholds follow train.py's plan (``--tune_thresholds``, ``--threshold_average``, ``--decision_threshold``).
    """
    from sentence_transformers import SentenceTransformer

    model_args, data_args, training_args = parse_arguments(argv)
    if not training_args.do_train:
        raise UsageError("The logistic-regression baseline trains: set do_train.")
    splits, labels = prepare_splits(data_args, needed_splits(training_args), cache_dir=model_args.cache_dir)
    if "validation" not in splits:
        raise UsageError(
            "The logistic-regression baseline chooses its regularisation on validation data: set "
            "validation_file (or a dataset with a validation split) and do_eval."
        )
    plan = plan_thresholds(
        training_args, labels, splits, given=model_args.decision_threshold is not None, saved=False
    )
    backbone, _ = resolve_backbone(model_args.model_name_or_path)
    problem_type = labels.problem_type
    start = time.perf_counter()
    encoder = SentenceTransformer(
        backbone,
        device="cpu",
        revision=model_args.model_revision,
        cache_folder=model_args.cache_dir,
        trust_remote_code=False,
    )
    features = {name: _embed(encoder, split, data_args) for name, split in splits.items() if split.labelled}
    targets = {name: np.asarray(split.targets) for name, split in splits.items() if split.labelled}

    def scores(fitted, split: str) -> np.ndarray:
        return _scores(fitted, problem_type, features[split], labels.num_labels)

    # The regularisation with the best validation metric (train.py's best-model metric, at the default threshold).
    metric, greater_is_better = BEST_MODEL_METRIC[problem_type]
    sign = 1 if greater_is_better else -1
    fits = [
        _fit(problem_type, features["train"], targets["train"], strength, training_args.seed)
        for strength in REGULARISATION
    ]
    validation_scores = [scores(fitted, "validation") for fitted in fits]
    best = max(
        range(len(fits)),
        key=lambda index: (
            sign * compute_metrics(validation_scores[index], targets["validation"], problem_type)[metric]
        ),
    )
    fitted, validation_scores = fits[best], validation_scores[best]
    threshold = model_args.decision_threshold
    if plan is not None and plan.tunes:
        threshold = tune_thresholds(
            probabilities(validation_scores, problem_type),
            targets["validation"],
            per_label=plan.tuning == "per_label",
            average=plan.average,
        )
    seconds = time.perf_counter() - start

    metrics: dict[str, Any] = {
        "train_runtime": seconds,
        "train_samples_per_second": len(targets["train"]) / seconds,
        "regularisation": REGULARISATION[best],
        "decision_threshold": threshold,
        "parameters": int(sum(np.asarray(array).size for array in _coefficients(fitted))),
    }
    for prefix, name in (("eval", "validation"), ("test", "test")):
        if name in features:
            split_scores = validation_scores if name == "validation" else scores(fitted, name)
            values = compute_metrics(split_scores, targets[name], problem_type, threshold)
            metrics.update({f"{prefix}_{key}": value for key, value in values.items()})
    return metrics


def _coefficients(model) -> list[np.ndarray]:
    estimators = getattr(model, "estimators_", [model])
    return [
        array
        for estimator in estimators
        for array in (
            getattr(estimator, "coef_", np.zeros(0)),
            np.atleast_1d(getattr(estimator, "intercept_", 0.0)),
        )
    ]
