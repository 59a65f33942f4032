"""--zero_shot_file (train/zero_shot_eval.py): a label-text model with the shared scorer scored on labels it was not
trained on, next to the same model before training; the scores match the zero-shot pipeline's and the cosine
baseline's, they reach the summary, the results and the model card, and models that cannot score unseen labels are
refused by name before anything is written."""

import json

import numpy as np
import pytest
import torch
from helpers import leftovers, multi_label_rows, topic_rows, train, write_rows
from sklearn.metrics import accuracy_score, f1_score
from transformers import AutoModel, AutoTokenizer, pipeline

from pooled_models import PooledForSequenceClassification
from pooled_models.errors import DataError, UsageError
from pooled_models.train.card.markdown import rounded
from pooled_models.train.zero_shot_eval import zero_shot_logits

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SEEN, UNSEEN = ("sport", "food"), ("music", "sport")


def mean_vectors(backbone, tokenizer, texts):
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = backbone(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return (states * mask).sum(1) / mask.sum(1)


def test_an_untrained_shared_scorer_ranks_labels_as_the_cosine_of_mean_pooled_vectors(
    minilm_path, minilm_tokenizer
):
    """The cosine baseline, computed independently: the backbone's mean-pooled vectors of the texts and of the label
    names (each encoded alone, with its special tokens), compared by cosine."""
    rows = topic_rows(12, seed=5, topics=("music", "food", "sport"))
    texts, labels = [row["text"] for row in rows], ["music", "food", "sport"]
    model = PooledForSequenceClassification.from_backbone(
        minilm_path, pooling="label_text", label_text_scorer="shared", id2label={0: "cinema", 1: "travel"}
    )
    logits = zero_shot_logits(model, minilm_tokenizer, texts, labels, max_length=128)
    backbone = AutoModel.from_pretrained(minilm_path).eval()
    cosine = torch.nn.functional.cosine_similarity(
        mean_vectors(backbone, minilm_tokenizer, texts)[:, None],
        mean_vectors(backbone, minilm_tokenizer, labels)[None],
        dim=-1,
    )
    head = model.classifier.head
    from_logits = logits / head.log_scale.exp().item() + head.offset.item()
    np.testing.assert_allclose(from_logits, cosine.numpy(), atol=1e-5)
    truth = [labels.index(row["label"]) for row in rows]
    assert accuracy_score(truth, cosine.argmax(-1)) > 0.5  # a real baseline: the keywords name their topic


@pytest.fixture(scope="module")
def zero_shot_run(tiny_backbone_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("zero_shot")
    train_file = write_rows(folder / "train.jsonl", topic_rows(24, topics=SEEN))
    zero_shot_file = write_rows(folder / "unseen.csv", topic_rows(15, seed=3, topics=UNSEEN))
    result = train(
        tiny_backbone_path,
        folder / "out",
        "--train_file",
        str(train_file),
        "--do_train",
        "--pooling",
        "label_text",
        "--label_text_scorer",
        "shared",
        "--zero_shot_file",
        str(zero_shot_file),
    )
    return result, zero_shot_file


def test_the_trained_models_zero_shot_scores_are_the_zero_shot_pipelines(zero_shot_run, tiny_backbone_path):
    result, zero_shot_file = zero_shot_run
    rows = topic_rows(15, seed=3, topics=UNSEEN)
    labels = sorted(set(UNSEEN))
    classify = pipeline("zero-shot-classification", model=str(result.output_dir))
    picked = [
        answer["labels"][0] for answer in classify([row["text"] for row in rows], candidate_labels=labels)
    ]
    truth = [row["label"] for row in rows]
    assert result.metrics["zero_shot_accuracy"] == pytest.approx(accuracy_score(truth, picked))
    assert result.metrics["zero_shot_f1_macro"] == pytest.approx(
        f1_score(truth, picked, average="macro", zero_division=0)
    )
    # Before training: the backbone's cosine baseline, from the backbone itself.
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    backbone = AutoModel.from_pretrained(tiny_backbone_path).eval()
    cosine = torch.nn.functional.cosine_similarity(
        mean_vectors(backbone, tokenizer, [row["text"] for row in rows])[:, None],
        mean_vectors(backbone, tokenizer, labels)[None],
        dim=-1,
    )
    baseline = [labels[index] for index in cosine.argmax(-1).tolist()]
    assert result.metrics["zero_shot_before_training_accuracy"] == pytest.approx(
        accuracy_score(truth, baseline)
    )
    saved = json.loads((result.output_dir / "all_results.json").read_text())
    assert {key: saved[key] for key in result.metrics if key.startswith("zero_shot")} == {
        key: value for key, value in result.metrics.items() if key.startswith("zero_shot")
    }


def test_the_card_shows_the_zero_shot_scores_and_the_pipeline(zero_shot_run):
    result, zero_shot_file = zero_shot_run
    card = (result.output_dir / "README.md").read_text()
    section = card.split("## Zero-shot evaluation", 1)[1].split("\n## ", 1)[0]
    assert "Every row of `unseen.csv` (15 rows) scored against each of its 2 labels" in section
    # only the label it never saw is named as new (`sport` was trained on)
    assert "1 of which the model was not trained on: `music`." in section
    metrics = result.metrics
    trained = f"| trained model | {rounded(metrics['zero_shot_accuracy'])} | {rounded(metrics['zero_shot_f1_macro'])} |"
    assert trained in section
    assert "| before training |" in section
    assert 'pipeline("zero-shot-classification"' in card
    assert "with **label_text pooling** and a `shared scorer` head" in card


def test_the_summary_names_the_zero_shot_pipeline_and_the_scores(tiny_backbone_path, tmp_path, capsys):
    train_file = write_rows(tmp_path / "train.jsonl", topic_rows(12, topics=SEEN))
    zero_shot_file = write_rows(tmp_path / "unseen.jsonl", topic_rows(6, seed=3, topics=UNSEEN))
    common = [
        "--train_file",
        str(train_file),
        "--do_train",
        "--pooling",
        "label_text",
        "--num_train_epochs",
        "1",
    ]
    train(tiny_backbone_path, tmp_path / "a", *common, "--zero_shot_file", str(zero_shot_file))
    printed = capsys.readouterr().out
    assert "zero_shot_before_training_accuracy" in printed and "zero_shot_accuracy" in printed
    assert 'zero_shot = pipeline("zero-shot-classification", model=' in printed
    # A per-label scorer scores its own labels only: the hint shows text classification alone.
    train(tiny_backbone_path, tmp_path / "b", *common, "--label_text_scorer", "per_label")
    printed = capsys.readouterr().out
    assert "zero-shot-classification" not in printed and 'pipeline("text-classification"' in printed


@pytest.mark.parametrize(
    "flags, refused",
    [
        (["--pooling", "mean"], "this run's model has pooling='mean', which scores its own labels only"),
        (
            ["--pooling", "label_text", "--label_text_scorer", "per_label"],
            "pooling='label_text' with label_text_scorer='per_label'",
        ),
        (["--pooling", "label_text", "--text_pair_column", "text"], "this run's texts are pairs"),
    ],
)
def test_a_model_that_cannot_score_unseen_labels_is_refused_by_name(
    tiny_backbone_path, tmp_path, flags, refused
):
    train_file = write_rows(tmp_path / "train.jsonl", topic_rows(12, topics=SEEN))
    zero_shot_file = write_rows(tmp_path / "unseen.jsonl", topic_rows(6, seed=3, topics=UNSEEN))
    with pytest.raises(UsageError, match="zero_shot_file") as error:
        train(tiny_backbone_path, tmp_path / "out", "--train_file", str(train_file), "--do_train", *flags,
              "--zero_shot_file", str(zero_shot_file))  # fmt: skip
    assert refused in str(error.value)
    assert leftovers(tmp_path / "out") == []


def test_a_zero_shot_file_of_several_labels_per_row_is_refused(tiny_backbone_path, tmp_path):
    train_file = write_rows(tmp_path / "train.jsonl", topic_rows(12, topics=SEEN))
    zero_shot_file = write_rows(tmp_path / "unseen.jsonl", multi_label_rows(6))
    with pytest.raises(DataError, match="zero-shot evaluation scores one label per row"):
        train(tiny_backbone_path, tmp_path / "out", "--train_file", str(train_file), "--do_train",
              "--pooling", "label_text", "--zero_shot_file", str(zero_shot_file))  # fmt: skip
    assert leftovers(tmp_path / "out") == []


def test_a_saved_model_evaluated_without_training_gets_one_zero_shot_score(zero_shot_run, tmp_path):
    """No training in the run: the model is scored once, and nothing is called "before training"."""
    result, zero_shot_file = zero_shot_run
    validation = write_rows(tmp_path / "validation.jsonl", topic_rows(6, seed=4, topics=SEEN))
    again = train(str(result.output_dir), tmp_path / "again", "--validation_file", str(validation),
                  "--zero_shot_file", str(zero_shot_file))  # fmt: skip
    assert again.metrics["zero_shot_accuracy"] == pytest.approx(result.metrics["zero_shot_accuracy"])
    assert not [key for key in again.metrics if key.startswith("zero_shot_before_training")]
    # Only evaluated: no copy of the model (nor its card) is published; the scores are in all_results.json.
    assert json.loads((again.output_dir / "all_results.json").read_text())[
        "zero_shot_accuracy"
    ] == pytest.approx(again.metrics["zero_shot_accuracy"])
