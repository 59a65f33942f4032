"""Metrics, probabilities, head parameters, the demo data and the fortunes builder, without training."""

import math

import numpy as np
import pytest
from helpers import REPO

from pooled_models.train.demo import demo_rows
from pooled_models.train.evaluation import compute_metrics, probabilities
from pooled_models.train.options import head_parameters


def f1_by_hand(truth, predicted, label):
    true_positive = sum(t == label and p == label for t, p in zip(truth, predicted, strict=True))
    false_positive = sum(t != label and p == label for t, p in zip(truth, predicted, strict=True))
    false_negative = sum(t == label and p != label for t, p in zip(truth, predicted, strict=True))
    denominator = 2 * true_positive + false_positive + false_negative
    return 2 * true_positive / denominator if denominator else 0.0


def test_single_label_metrics():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(50, 4))
    labels = rng.integers(0, 4, size=50)
    predicted = logits.argmax(-1)
    metrics = compute_metrics(logits, labels, "single_label_classification")
    assert metrics["accuracy"] == pytest.approx(np.mean(predicted == labels))
    expected_macro = np.mean([f1_by_hand(labels, predicted, label) for label in range(4)])
    assert metrics["f1_macro"] == pytest.approx(expected_macro)


def test_multi_label_metrics_use_the_threshold_on_sigmoid_scores():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(40, 3))
    labels = rng.integers(0, 2, size=(40, 3)).astype(np.float32)
    for threshold in (0.3, 0.5, 0.7):
        predicted = (1 / (1 + np.exp(-logits)) >= threshold).astype(int)
        metrics = compute_metrics(logits, labels, "multi_label_classification", threshold)
        true_positive = np.sum((predicted == 1) & (labels == 1))
        wrong = np.sum(predicted != labels)
        assert metrics["f1_micro"] == pytest.approx(2 * true_positive / (2 * true_positive + wrong))
        per_label = [f1_by_hand(labels[:, j], predicted[:, j], 1) for j in range(3)]
        assert metrics["f1_macro"] == pytest.approx(np.mean(per_label))
        assert metrics["exact_match"] == pytest.approx(np.mean((predicted == labels).all(axis=1)))


def test_multi_label_metrics_take_one_threshold_per_label():
    logits = np.log(
        np.array([[0.4, 0.6], [0.2, 0.9]]) / (1 - np.array([[0.4, 0.6], [0.2, 0.9]]))
    )  # these sigmoids
    labels = np.array([[1.0, 0.0], [0.0, 1.0]])
    # label 0 at 0.3: predicted for row 0 only (right); label 1 at 0.7: predicted for row 1 only (right)
    assert compute_metrics(logits, labels, "multi_label_classification", [0.3, 0.7])["exact_match"] == 1.0
    assert (
        compute_metrics(logits, labels, "multi_label_classification")["exact_match"] == 0.5
    )  # 0.5: row 0 misses label 0


def test_regression_metrics():
    rng = np.random.default_rng(2)
    truth = rng.permutation(30).astype(float)  # no ties, so ranks are argsort positions
    predictions = truth + rng.normal(scale=5, size=30)
    metrics = compute_metrics(predictions[:, None], truth, "regression")
    assert metrics["mse"] == pytest.approx(np.mean((predictions - truth) ** 2))
    assert metrics["pearson"] == pytest.approx(np.corrcoef(predictions, truth)[0, 1])
    ranks = np.argsort(np.argsort(predictions)), np.argsort(np.argsort(truth))
    assert metrics["spearman"] == pytest.approx(np.corrcoef(*ranks)[0, 1])


def test_correlations_of_a_constant_prediction_are_undefined():
    metrics = compute_metrics(np.zeros((5, 1)), np.arange(5.0), "regression")
    assert math.isnan(metrics["pearson"]) and math.isnan(metrics["spearman"])
    assert metrics["mse"] == pytest.approx(np.mean(np.arange(5.0) ** 2))


def test_probabilities_match_the_pipeline_functions():
    logits = np.array([[2.0, -1.0, 0.5]])
    softmax = np.exp(logits) / np.exp(logits).sum()
    assert probabilities(logits, "single_label_classification") == pytest.approx(softmax)
    assert probabilities(logits, "multi_label_classification") == pytest.approx(1 / (1 + np.exp(-logits)))
    assert probabilities(np.array([[0.7], [-2.0]]), "regression") == pytest.approx([0.7, -2.0])


def test_head_parameters_are_the_pooler_and_classifier():
    from helpers import tiny_model

    model = tiny_model("attention")
    head = head_parameters(model)
    expected = {id(p) for name, p in model.named_parameters() if name.startswith("classifier.")}
    assert head == expected and head
    assert not head & {id(p) for p in model.backbone.parameters()}


# ----------------------------------------------------------------------------------------------------
# Datasets the project builds itself
# ----------------------------------------------------------------------------------------------------


def test_the_committed_demo_data_is_what_the_generator_writes():
    import csv

    for split, rows in demo_rows().items():
        with open(REPO / "data" / "demo" / f"{split}.csv", newline="", encoding="utf-8") as handle:
            assert list(csv.DictReader(handle)) == rows, (
                "regenerate with: python -m pooled_models.train.demo data"
            )


def test_demo_splits_are_balanced_and_disjoint():
    splits = demo_rows()
    texts = [row["text"] for rows in splits.values() for row in rows]
    assert len(texts) == len(set(texts))
    for rows in splits.values():
        counts = {
            label: sum(row["label"] == label for row in rows) for label in {row["label"] for row in rows}
        }
        assert len(counts) == 4 and len(set(counts.values())) == 1


def test_model_card_for_a_hub_dataset_and_a_hub_backbone(tmp_path):
    from helpers import tiny_backbone_config
    from huggingface_hub import ModelCard

    from pooled_models import PooledConfig
    from pooled_models.modeling.heads import LinearHead
    from pooled_models.train.arguments import DataArguments
    from pooled_models.train.card import CardData, TaskCard, render_model_card

    config = PooledConfig(
        backbone_config=tiny_backbone_config("bert"),
        pooling="gem",
        num_labels=3,
        id2label={0: "anger", 1: "joy", 2: "fear"},
        problem_type="multi_label_classification",
    )
    data = DataArguments(
        dataset_name="google-research-datasets/go_emotions", dataset_config_name="simplified"
    )
    task = TaskCard(
        name="sequence",
        kind="sequence",
        config=config,
        head_class=LinearHead,
        data=data,
        splits=[{"name": "train", "rows": 10, "truncated": 1, "source": data.dataset_name}],
        max_seq_length=128,
    )
    facts = CardData(
        model_name="emotions",
        repo_id="someone/emotions",
        base_model="FacebookAI/roberta-base",
        base_model_on_hub=True,
        publishes="sequence",
        tasks=[task],
        training_settings={"seed": 3},
        metrics={"eval_f1_micro": 0.61234, "eval_f1_macro": float("nan")},
        example_text="I'm so happy for you!",
    )
    path = tmp_path / "README.md"
    render_model_card(facts).save(path)
    card = ModelCard.load(path)
    assert card.data.base_model == "FacebookAI/roberta-base"
    assert card.data.datasets == ["google-research-datasets/go_emotions"]
    assert card.data.tags == ["pooled_models", "pooling-gem", "multi-label-classification"]
    (result,) = card.data.eval_results  # the NaN macro-F1 is not claimed as a result
    assert (result.metric_type, result.metric_value, result.metric_args) == (
        "f1",
        0.6123,
        {"average": "micro"},
    )
    assert (result.dataset_type, result.dataset_config, result.dataset_split) == (
        "google-research-datasets/go_emotions",
        "simplified",
        "validation",
    )
    assert (
        '"someone/emotions", top_k=None)' in card.text
        and 'print(classify("I\'m so happy for you!"))' in card.text
    )
    assert "The head is `linear`: Dropout and a linear layer (BERT style) (dropout 0.1)." in card.text
    assert "| `gem_p` | `3.0` |" in card.text and "| validation | n/a | 0.6123 |" in card.text


def test_multi_label_heads_default_to_the_asymmetric_loss_and_others_keep_theirs():
    from pooled_models.train.arguments.defaults import MULTI_LABEL_DEFAULT_LOSS
    from pooled_models.train.plan import default_multi_label_loss

    def resolved(problem_type, given=None):
        settings = {} if given is None else {"multi_label_loss": given}
        default_multi_label_loss(settings, problem_type)
        return settings.get("multi_label_loss")

    assert resolved("multi_label_classification") == MULTI_LABEL_DEFAULT_LOSS == "asymmetric"
    assert resolved("multi_label_classification", given="bce") == "bce"
    # single-label: left out, so the head keeps PooledConfig's own default (the setting does not apply)
    assert resolved("single_label_classification") is None
    # (a run that continues a saved model keeps its loss: the plan leaves a saved model's settings alone)
