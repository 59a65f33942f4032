"""The seen-label margin by default (label_text_margin.py, DEFAULT_SEEN_MARGIN): every new label-text model takes it,
a request that asks only trained labels scores as without it, a new label among trained ones gains, sigmoid scores
(multi-label models, the zero-shot pipeline's multi_label=True or one candidate) read the logits without it, and a
checkpoint saved before the margin existed loads with none."""

import json

import pytest
import torch
from transformers import AutoTokenizer, pipeline

from pooled_models import PooledConfig, PooledForSequenceClassification
from pooled_models.modeling.label_text import label_text_token_ids, pad_label_ids
from pooled_models.modeling.label_text_margin import DEFAULT_SEEN_MARGIN

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OWN = {0: "sport", 1: "food", 2: "music"}
TEXTS = ["the match ended two to one", "a pizza with extra cheese"]
MIXED = ["weather", "music", "sport"]  # a new label first, then two trained ones


@pytest.fixture(scope="module")
def folders(tiny_backbone_path, tmp_path_factory):
    """The same weights saved twice: with the default margin, and with none."""
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        tiny_backbone_path, pooling="label_text", label_text_scorer="shared", id2label=OWN
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    paths = {}
    for name, margin in (("default", None), ("none", 0.0)):
        if margin is not None:
            model.config.label_text_seen_margin = margin
        paths[name] = tmp_path_factory.mktemp(name)
        model.save_pretrained(paths[name])
        tokenizer.save_pretrained(paths[name])
    return paths


def zero_shot(folder, labels, **kwargs) -> list[dict[str, float]]:
    answers = pipeline("zero-shot-classification", model=str(folder))(
        TEXTS, candidate_labels=labels, **kwargs
    )
    return [dict(zip(answer["labels"], answer["scores"], strict=True)) for answer in answers]


def test_a_new_label_text_model_takes_the_default_margin(folders):
    assert DEFAULT_SEEN_MARGIN == 1.5  # bench/results/zero_shot/generalized.md: beat no margin on both tasks
    config = json.loads((folders["default"] / "config.json").read_text())
    assert config["label_text_seen_margin"] == DEFAULT_SEEN_MARGIN
    assert PooledConfig(pooling="label_text", num_labels=2).label_text_seen_margin == DEFAULT_SEEN_MARGIN


def test_a_request_of_trained_labels_only_scores_as_without_the_margin(folders):
    # every candidate trained, in another order than the model's: the same ranking and the same softmax
    asked = ["music", "sport", "food"]
    with_margin, without = zero_shot(folders["default"], asked), zero_shot(folders["none"], asked)
    for got, expected in zip(with_margin, without, strict=True):
        assert list(got) == list(expected)
        assert list(got.values()) == pytest.approx(list(expected.values()), abs=1e-6)
    # the model's own labels (text-classification)
    classify = [
        pipeline("text-classification", model=str(folders[name]), top_k=None) for name in ("default", "none")
    ]
    for got, expected in zip(*(run(TEXTS) for run in classify), strict=True):
        assert [row["label"] for row in got] == [row["label"] for row in expected]
        assert [row["score"] for row in got] == pytest.approx([row["score"] for row in expected], abs=1e-6)


def test_a_new_label_among_trained_ones_gains_with_the_default_margin(folders):
    tokenizer = AutoTokenizer.from_pretrained(folders["none"])
    models = {
        name: PooledForSequenceClassification.from_pretrained(path).eval() for name, path in folders.items()
    }
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    ids, mask = pad_label_ids(label_text_token_ids(MIXED, tokenizer))
    with torch.no_grad():
        logits = {
            name: model(**batch, label_input_ids=ids, label_attention_mask=mask).logits
            for name, model in models.items()
        }
    trained = torch.tensor([0.0, 1.0, 1.0])
    torch.testing.assert_close(logits["default"], logits["none"] - DEFAULT_SEEN_MARGIN * trained)
    new_score = {name: value.softmax(-1)[:, 0] for name, value in logits.items()}
    assert (new_score["default"] > new_score["none"]).all()
    # the pipeline's softmax says the same
    pipelined = zero_shot(folders["default"], MIXED)
    assert [row["weather"] for row in pipelined] == pytest.approx(new_score["default"].tolist(), abs=1e-5)


@pytest.mark.parametrize("labels", [MIXED, ["music"]], ids=["multi_label", "one_candidate"])
def test_sigmoid_scores_read_the_logits_without_the_margin(folders, labels):
    # multi_label=True (or one candidate) scores each label by its own sigmoid: a trained label keeps its probability
    kwargs = {"multi_label": True} if len(labels) > 1 else {}
    with_margin, without = (
        zero_shot(folders["default"], labels, **kwargs),
        zero_shot(folders["none"], labels, **kwargs),
    )
    for got, expected in zip(with_margin, without, strict=True):
        assert got == pytest.approx(expected, abs=1e-6)


def test_a_multi_label_model_takes_no_margin(folders):
    # its default is none, and a margin set anyway is not taken off (its sigmoid and thresholds stay as trained)
    settings = {"problem_type": "multi_label_classification"}
    assert PooledConfig(pooling="label_text", num_labels=2, **settings).label_text_seen_margin == 0.0
    tokenizer = AutoTokenizer.from_pretrained(folders["none"])
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    plain = PooledForSequenceClassification.from_pretrained(folders["none"], **settings).eval()
    margin = PooledForSequenceClassification.from_pretrained(
        folders["none"], label_text_seen_margin=2.0, **settings
    ).eval()
    with torch.no_grad():
        torch.testing.assert_close(margin(**batch).logits, plain(**batch).logits)


def test_a_checkpoint_saved_before_the_margin_existed_loads_with_none(folders, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(folders["none"])
    model = PooledForSequenceClassification.from_pretrained(folders["default"])
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["label_text_seen_margin"]  # as 0.4 and earlier saved a label-text config
    (tmp_path / "config.json").write_text(json.dumps(saved))
    old = PooledForSequenceClassification.from_pretrained(tmp_path).eval()
    assert old.config.label_text_seen_margin == 0.0
    plain = PooledForSequenceClassification.from_pretrained(folders["none"]).eval()
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(old(**batch).logits, plain(**batch).logits)
    # a load-time setting still applies to it
    assert PooledConfig.from_pretrained(tmp_path, label_text_seen_margin=2.0).label_text_seen_margin == 2.0
