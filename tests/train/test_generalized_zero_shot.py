"""--zero_shot_file in the generalized setting (train/zero_shot_eval.py): every row asked against the trained labels and
the unseen ones together; the accuracies on seen and unseen rows and their harmonic mean match the zero-shot
pipeline's answers (trained model) and the backbone's cosine baseline (before training); the seen-label margin saved
with the model is the one the rule picks; --seen_label_margin's number and its refusals."""

import json
import statistics

import numpy as np
import pytest
import torch
from helpers import leftovers, topic_rows, train, write_rows
from sklearn.metrics import accuracy_score
from test_zero_shot_eval import mean_vectors
from transformers import AutoModel, AutoTokenizer, pipeline

from pooled_models import PooledForSequenceClassification
from pooled_models.errors import UsageError
from pooled_models.modeling.label_text_margin import DEFAULT_SEEN_MARGIN
from pooled_models.train.card.markdown import rounded
from pooled_models.train.zero_shot_eval import KEPT_ACCURACY, MARGIN_GRID, tune_margin, zero_shot_logits

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SEEN, ZERO_SHOT = ("sport", "food"), ("music", "sport")  # the zero-shot file: one unseen label, one trained
TRAINED = ["food", "sport"]  # the model's labels, in its id2label order
CANDIDATES = [*TRAINED, "music"]


@pytest.fixture(scope="module")
def rows():
    """(texts, labels, is a seen row) of the generalized setting: the validation rows, then the zero-shot file's."""
    validation, zero_shot = topic_rows(12, seed=4, topics=SEEN), topic_rows(15, seed=3, topics=ZERO_SHOT)
    every = validation + zero_shot
    return [r["text"] for r in every], [r["label"] for r in every], [r["label"] in SEEN for r in every]


@pytest.fixture(scope="module")
def generalized_run(tiny_backbone_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("generalized")
    return train(
        tiny_backbone_path,
        folder / "out",
        "--train_file", str(write_rows(folder / "train.jsonl", topic_rows(24, topics=SEEN))),
        "--validation_file", str(write_rows(folder / "validation.csv", topic_rows(12, seed=4, topics=SEEN))),
        "--zero_shot_file", str(write_rows(folder / "unseen.csv", topic_rows(15, seed=3, topics=ZERO_SHOT))),
        "--do_train", "--do_eval", "--pooling", "label_text", "--label_text_scorer", "shared",
    )  # fmt: skip


def generalized(picked, labels, is_seen) -> tuple[float, float, float]:
    seen = [i for i, s in enumerate(is_seen) if s]
    unseen = [i for i, s in enumerate(is_seen) if not s]
    assert seen and unseen  # never a score of an empty set
    a = accuracy_score([labels[i] for i in seen], [picked[i] for i in seen])
    b = accuracy_score([labels[i] for i in unseen], [picked[i] for i in unseen])
    return a, b, statistics.harmonic_mean([a, b])


def metrics_of(result, prefix):
    keys = ("seen_accuracy", "unseen_accuracy", "harmonic_mean")
    return tuple(result.metrics[f"{prefix}_generalized_{key}"] for key in keys)


def test_the_generalized_scores_are_the_pipelines_and_the_cosine_baselines(
    generalized_run, rows, tiny_backbone_path
):
    texts, labels, is_seen = rows
    classify = pipeline("zero-shot-classification", model=str(generalized_run.output_dir))
    picked = [answer["labels"][0] for answer in classify(texts, candidate_labels=CANDIDATES)]
    assert metrics_of(generalized_run, "zero_shot") == pytest.approx(generalized(picked, labels, is_seen))
    # Before training: the backbone's cosine of mean-pooled vectors, computed here from the backbone itself.
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    backbone = AutoModel.from_pretrained(tiny_backbone_path).eval()
    cosine = torch.nn.functional.cosine_similarity(
        mean_vectors(backbone, tokenizer, texts)[:, None],
        mean_vectors(backbone, tokenizer, CANDIDATES)[None],
        dim=-1,
    )
    baseline = [CANDIDATES[i] for i in cosine.argmax(-1).tolist()]
    expected = generalized(baseline, labels, is_seen)
    assert metrics_of(generalized_run, "zero_shot_before_training") == pytest.approx(expected)
    saved = json.loads((generalized_run.output_dir / "all_results.json").read_text())
    generalized_keys = [key for key in generalized_run.metrics if "_generalized_" in key]
    assert len(generalized_keys) == 6
    assert {key: saved[key] for key in generalized_keys} == {
        key: generalized_run.metrics[key] for key in generalized_keys
    }


def test_the_saved_margin_is_the_largest_that_keeps_most_of_the_validation_accuracy(generalized_run, rows):
    texts, labels, is_seen = rows
    config = json.loads((generalized_run.output_dir / "config.json").read_text())
    raw = PooledForSequenceClassification.from_pretrained(
        generalized_run.output_dir, label_text_seen_margin=0.0
    )
    tokenizer = AutoTokenizer.from_pretrained(generalized_run.output_dir)
    # the validation rows only (the first 12), never the zero-shot file's
    seen_texts, truth = texts[:12], [CANDIDATES.index(label) for label in labels[:12]]
    logits = zero_shot_logits(raw, tokenizer, seen_texts, CANDIDATES, 64)

    def accuracy(margin):
        shifted = [[v - margin * (j < len(TRAINED)) for j, v in enumerate(row)] for row in logits.tolist()]
        return accuracy_score(truth, [max(range(len(row)), key=row.__getitem__) for row in shifted])

    expected = max(m for m in MARGIN_GRID if accuracy(m) >= KEPT_ACCURACY * accuracy(0.0))
    assert config["label_text_seen_margin"] == pytest.approx(expected)
    # the margins are taken off the trained labels, which it names
    assert config["label_text_seen_ids"] == (config["label_text_ids"] if expected else None)


def test_the_card_shows_the_generalized_setting(generalized_run):
    card = (generalized_run.output_dir / "README.md").read_text()
    section = card.split("## Zero-shot evaluation", 1)[1].split("\n## ", 1)[0]
    assert "| Model | seen rows | unseen rows | harmonic mean |" in section
    seen, unseen, harmonic = (rounded(value) for value in metrics_of(generalized_run, "zero_shot"))
    assert f"| trained model | {seen} | {unseen} | {harmonic} |" in section
    assert "| before training |" in section.split("| Model | seen rows", 1)[1]
    assert (
        "Seen rows: those of validation file" in section and "of `unseen.csv` of a trained label" in section
    )


def test_a_margin_given_is_saved_and_bad_ones_are_refused_by_name(tiny_backbone_path, tmp_path):
    train_file = write_rows(tmp_path / "train.jsonl", topic_rows(12, topics=SEEN))
    zero_shot_file = write_rows(tmp_path / "unseen.jsonl", topic_rows(6, seed=3, topics=ZERO_SHOT))
    common = [
        "--train_file",
        str(train_file),
        "--do_train",
        "--pooling",
        "label_text",
        "--num_train_epochs",
        "1",
    ]
    result = train(tiny_backbone_path, tmp_path / "a", *common, "--zero_shot_file", str(zero_shot_file),
                   "--seen_label_margin", "2.5")  # fmt: skip
    assert json.loads((result.output_dir / "config.json").read_text())["label_text_seen_margin"] == 2.5
    # no validation file: no seen rows, so no generalized setting (the log says why)
    assert not [key for key in result.metrics if "generalized" in key]
    with pytest.raises(UsageError, match="--seen_label_margin must be 'auto' or a number"):
        train(tiny_backbone_path, tmp_path / "b", *common, "--zero_shot_file", str(zero_shot_file),
              "--seen_label_margin", "high")  # fmt: skip
    with pytest.raises(
        UsageError, match="seen_label_margin is set, but it takes effect only with --zero_shot_file"
    ):
        train(tiny_backbone_path, tmp_path / "c", *common, "--seen_label_margin", "1")
    assert leftovers(tmp_path / "b") == [] and leftovers(tmp_path / "c") == []


def test_a_run_that_cannot_tune_the_margin_saves_the_default(tiny_backbone_path, tmp_path):
    """Without a zero-shot file, or with one but no validation rows to tune on, the model keeps label_text_seen_margin's
    default (label_text_margin.py): a label-text model trained without a zero-shot file still gives a new label a
    chance among its trained ones (issue 54)."""
    common = ["--train_file", str(write_rows(tmp_path / "train.jsonl", topic_rows(12, topics=SEEN))), "--do_train",
              "--pooling", "label_text", "--num_train_epochs", "1"]  # fmt: skip
    zero_shot_file = write_rows(tmp_path / "unseen.jsonl", topic_rows(6, seed=3, topics=ZERO_SHOT))
    runs = {
        "no zero-shot file": train(tiny_backbone_path, tmp_path / "a", *common),
        "nothing to tune on": train(tiny_backbone_path, tmp_path / "b", *common, "--zero_shot_file", str(zero_shot_file)),
    }  # fmt: skip
    for result in runs.values():
        config = json.loads((result.output_dir / "config.json").read_text())
        assert config["label_text_seen_margin"] == DEFAULT_SEEN_MARGIN
        assert "| `label_text_seen_margin` | `1.5` |" in (result.output_dir / "README.md").read_text()


def test_the_margin_rule_on_known_gaps():
    """Ten seen rows, each right by a known gap over the one unseen label: a margin above a gap costs that row. 90% of
    the accuracy at no margin (10 of 10) allows losing one row: the largest grid margin below the second gap."""
    gaps = [0.3, 0.8, 1.3, 2.6, 5.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    logits = np.array(
        [[gap, 0.0, 0.0] for gap in gaps]
    )  # two trained labels (the first is right), one unseen
    assert tune_margin(logits, np.zeros(len(gaps), dtype=int), num_trained=2) == (0.75, 1.0, 0.9)
    # the control: with every gap wide, the largest margin of the grid
    assert tune_margin(logits + [[20.0, 0, 0]], np.zeros(len(gaps), dtype=int), 2)[0] == MARGIN_GRID[-1]
