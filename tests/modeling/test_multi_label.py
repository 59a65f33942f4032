"""Multi-label decisions and losses: pos_weight, tuned thresholds, focal and asymmetric losses."""

import itertools

import numpy as np
import pytest
import torch
from helpers import random_batch, tiny_backbone_config, tiny_model
from sklearn.metrics import f1_score

from pooled_models import PooledConfig, PooledForSequenceClassification
from pooled_models.thresholds import positive_weights, predict_label_sets, tune_thresholds

TARGETS = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 0]])
SCORES = np.array([[0.9, 0.2, 0.1], [0.4, 0.35, 0.2], [0.3, 0.1, 0.05], [0.45, 0.3, 0.3], [0.2, 0.32, 0.1]])


def brute_force_f1(scores, targets, thresholds, average):
    # scikit-learn's F1 as the reference; a label with no positive and no prediction scores 0, as in the tuning.
    return f1_score(targets, scores >= np.asarray(thresholds), average=average, zero_division=0)


def test_positive_weights_are_negatives_over_positives():
    # label 0: 3 positives, 2 negatives; label 1: 2 and 3; label 2: no positive -> its 5 negatives
    assert positive_weights(TARGETS) == pytest.approx([2 / 3, 3 / 2, 5.0])


@pytest.mark.parametrize("average", ["micro", "macro"])
def test_global_threshold_maximises_f1(average):
    threshold = tune_thresholds(SCORES, TARGETS, average=average)
    grid = np.linspace(0.001, 0.999, 999)
    best = max(brute_force_f1(SCORES, TARGETS, t, average) for t in grid)
    assert brute_force_f1(SCORES, TARGETS, threshold, average) == pytest.approx(best)
    assert brute_force_f1(SCORES, TARGETS, threshold, average) > brute_force_f1(SCORES, TARGETS, 0.5, average)


@pytest.mark.parametrize("average", ["micro", "macro"])
def test_per_label_thresholds_maximise_f1(average):
    thresholds = tune_thresholds(SCORES, TARGETS, per_label=True, average=average)
    assert len(thresholds) == 3
    assert thresholds[2] == tune_thresholds(SCORES, TARGETS, average=average)  # no positives: the global one
    grid = [np.unique(np.concatenate([[0.001, 0.999], SCORES[:, label] + 1e-3])) for label in range(2)]
    best = max(
        brute_force_f1(SCORES, TARGETS, [a, b, thresholds[2]], average) for a, b in itertools.product(*grid)
    )
    assert brute_force_f1(SCORES, TARGETS, thresholds, average) == pytest.approx(best)


def test_tuning_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match=r"scores have shape \(5, 3\) but targets \(5, 2\)"):
        tune_thresholds(SCORES, TARGETS[:, :2])
    with pytest.raises(ValueError, match=r"Unknown average 'weighted'\. Valid choices: micro, macro"):
        tune_thresholds(SCORES, TARGETS, average="weighted")


def test_saved_thresholds_reload_and_change_predictions(tmp_path):
    model = tiny_model("mean", num_labels=3, problem_type="multi_label_classification")
    batch = random_batch([4, 6, 3])
    logits = model(**batch).logits.detach()
    scores = torch.sigmoid(logits)
    at_one_half = predict_label_sets(logits, model.config)
    # Label 0 flips for at least one row whatever the scores: its threshold is moved past all of them.
    flip = 0.999 if bool((scores[:, 0] >= 0.5).all()) else 0.001
    lowest_two = scores[:, 2].sort().values[:2]
    thresholds = [flip, 0.3, float(lowest_two.mean())]  # between two scores, away from rounding differences

    model.config.decision_threshold = thresholds
    model.save_pretrained(tmp_path)
    reloaded = PooledForSequenceClassification.from_pretrained(tmp_path)
    assert reloaded.config.decision_threshold == thresholds
    names = reloaded.config.id2label
    expected = [[names[i] for i in range(3) if scores[row, i] >= thresholds[i]] for row in range(3)]
    assert predict_label_sets(logits, reloaded.config) == expected != at_one_half
    assert (
        predict_label_sets(scores, reloaded.config) == expected
    )  # scores in [0, 1] are read as probabilities
    pipeline_rows = [
        [{"label": names[i], "score": float(scores[row, i])} for i in (2, 0, 1)] for row in range(3)
    ]
    assert predict_label_sets(pipeline_rows, reloaded.config) == expected
    assert predict_label_sets(pipeline_rows[0], reloaded.config) == expected[:1]


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"multi_label_loss": "focal"},
        {"multi_label_loss": "asymmetric"},
        {"pos_weight": [1.0, 5.0, 20.0]},
        {"multi_label_loss": "focal", "focal_gamma": 0.5, "pos_weight": [2.0, 2.0, 2.0]},
        {"multi_label_loss": "asymmetric", "asymmetric_gamma_pos": 1.0},
    ],
)
def test_every_loss_is_finite_with_gradients_also_for_a_label_without_positives(settings):
    model = tiny_model("mean", num_labels=3, problem_type="multi_label_classification", **settings).train()
    labels = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])  # label 2 has no positive in the batch
    out = model(**random_batch([5, 3]), labels=labels)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert model.classifier.head.out_proj.weight.grad[2].abs().sum() > 0


def loss_of(logits, targets, **settings):
    config = PooledConfig(
        backbone_config=tiny_backbone_config("bert"),
        num_labels=logits.shape[1],
        problem_type="multi_label_classification",
        **settings,
    )
    from pooled_models.modeling.losses import classification_loss

    return classification_loss(logits, targets, config)


def test_loss_formulas():
    torch.manual_seed(0)
    logits, targets = torch.randn(6, 4) * 3, (torch.rand(6, 4) > 0.6).float()
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets)
    torch.testing.assert_close(loss_of(logits, targets), bce)
    torch.testing.assert_close(loss_of(logits, targets, multi_label_loss="focal", focal_gamma=0.0), bce)
    torch.testing.assert_close(
        loss_of(
            logits, targets, multi_label_loss="asymmetric", asymmetric_gamma_neg=0.0, asymmetric_clip=0.0
        ),
        bce,
    )
    weights = [1.0, 2.0, 3.0, 4.0]
    torch.testing.assert_close(
        loss_of(logits, targets, pos_weight=weights),
        torch.nn.functional.binary_cross_entropy_with_logits(
            logits, targets, pos_weight=torch.tensor(weights)
        ),
    )
    # Focusing lowers the loss of easy, confident cases more than that of hard ones.
    assert loss_of(logits, targets, multi_label_loss="focal") < bce
    p = torch.sigmoid(logits)
    shifted = (p - 0.05).clamp(min=0)
    expected = -(targets * torch.log(p) + (1 - targets) * shifted**4 * torch.log(1 - shifted)).mean()
    torch.testing.assert_close(loss_of(logits, targets, multi_label_loss="asymmetric"), expected)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"focal_gamma": 2.0}, r"focal_gamma=2.0 does not apply to multi_label_loss='bce'"),
        (
            {"multi_label_loss": "focal", "asymmetric_clip": 0.1},
            r"asymmetric_clip=0.1 does not apply to multi_label_loss='focal'",
        ),
        ({"multi_label_loss": "focal", "focal_gamma": -1.0}, r"focal_gamma must be a number in \[0, 100\)"),
        ({"pos_weight": [1.0, 2.0]}, r"pos_weight must be a list of one number per label \(3 labels\)"),
        ({"pos_weight": [1.0, 0.0, 2.0]}, r"pos_weight\[1\] = 0.0 must be a number in \(0, inf\)"),
        ({"decision_threshold": 1.5}, r"decision_threshold = 1.5 must be a number in \(0, 1\)"),
        (
            {"decision_threshold": [0.5, 0.5]},
            r"decision_threshold must be a number or a list of one number per label",
        ),
        (
            {"problem_type": "single_label_classification", "pos_weight": [1.0] * 3},
            r"pos_weight=\[1.0, 1.0, 1.0\] applies to problem_type='multi_label_classification' only",
        ),
        ({"problem_type": "regression", "multi_label_loss": "focal"}, r"multi_label_loss='focal' applies to"),
    ],
)
def test_bad_multi_label_settings(settings, message):
    with pytest.raises(ValueError, match=message):
        PooledConfig(backbone_config=tiny_backbone_config("bert"), num_labels=3, **settings)
