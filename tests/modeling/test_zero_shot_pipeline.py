"""pipeline("zero-shot-classification") for label-text classifiers: transformers' arguments (candidate_labels,
multi_label, hypothesis_template), the labels tokenised once per call, the model's own scores; transformers' NLI
pipeline unchanged for every other model; the same scores from a checkpoint's own code without the package."""

import json

import pytest
import torch
from helpers import run_without_package
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, pipeline
from transformers.pipelines.zero_shot_classification import ZeroShotClassificationPipeline

from pooled_models import PooledForSequenceClassification
from pooled_models.modeling import zero_shot_pipeline
from pooled_models.modeling.label_text import label_text_token_ids, pad_label_ids

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LABELS = {0: "billing", 1: "delivery", 2: "password"}
TEXTS = ["My parcel never came.", "I was charged twice for one order, please refund me.", "Locked out"]
NEW = ["shipping", "money back", "login problem", "weather"]


def save_label_text_model(folder, backbone, scorer="shared", layers=1):
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        backbone, pooling="label_text", id2label=LABELS, label_text_layers=layers, label_text_scorer=scorer
    ).eval()
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(backbone).save_pretrained(folder)
    return model


def expected_logits(model, tokenizer, texts, labels):
    ids, mask = pad_label_ids(label_text_token_ids(labels, tokenizer))
    with torch.no_grad():
        return torch.cat(
            [
                model(
                    **tokenizer([text], return_tensors="pt"), label_input_ids=ids, label_attention_mask=mask
                ).logits
                for text in texts
            ]
        )


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tiny_backbone_path):
    path = tmp_path_factory.mktemp("label_text")
    model = save_label_text_model(path, tiny_backbone_path)
    return path, model


def scores_by_label(result):
    return dict(zip(result["labels"], result["scores"], strict=True))


def test_the_registered_pipeline_scores_new_labels_as_the_model_does(folder):
    path, model = folder
    # config.json names the pipeline for remote-code loads; the package's config drops it: no trust_remote_code asked.
    assert "zero-shot-classification" in json.loads((path / "config.json").read_text())["custom_pipelines"]
    classify = pipeline("zero-shot-classification", model=str(path))
    assert isinstance(classify, zero_shot_pipeline.LabelTextZeroShotPipeline)
    logits = expected_logits(model, classify.tokenizer, TEXTS, NEW)
    results = classify(TEXTS, candidate_labels=NEW)
    for result, row in zip(results, logits, strict=True):
        assert result["scores"] == sorted(result["scores"], reverse=True)
        assert scores_by_label(result) == pytest.approx(
            dict(zip(NEW, row.softmax(-1).tolist(), strict=True)), abs=1e-5
        )
    multi = classify(TEXTS[0], candidate_labels=", ".join(NEW), multi_label=True)
    assert scores_by_label(multi) == pytest.approx(
        dict(zip(NEW, logits[0].sigmoid().tolist(), strict=True)), abs=1e-5
    )
    templated = classify(TEXTS[0], candidate_labels=NEW, hypothesis_template="about {}")
    templated_logits = expected_logits(
        model, classify.tokenizer, TEXTS[:1], [f"about {label}" for label in NEW]
    )
    assert scores_by_label(templated) == pytest.approx(
        dict(zip(NEW, templated_logits[0].softmax(-1).tolist(), strict=True)), abs=1e-5
    )


def test_a_text_longer_than_the_backbone_takes_is_cut_at_the_models_length(folder):
    path, model = folder
    classify = pipeline("zero-shot-classification", model=str(path))
    long = "My parcel never came and nobody answers my messages. " * 200  # 2,000 tokens; 64 positions
    length = model.max_text_length(classify.tokenizer)
    assert length == 64 and len(classify.tokenizer(long)["input_ids"]) > 2000
    ids, mask = pad_label_ids(label_text_token_ids(NEW, classify.tokenizer))
    with torch.no_grad():
        text = classify.tokenizer([long], truncation=True, max_length=length, return_tensors="pt")
        logits = model(**text, label_input_ids=ids, label_attention_mask=mask).logits[0]
    assert scores_by_label(classify(long, candidate_labels=NEW)) == pytest.approx(
        dict(zip(NEW, logits.softmax(-1).tolist(), strict=True)), abs=1e-5
    )


@pytest.mark.parametrize("template", ["{} and {}", "{0}", "{label}", "{:>9}", "about {", "no field"])
def test_a_template_that_cannot_place_the_label_is_refused_naming_it(folder, template):
    path, _ = folder
    classify = pipeline("zero-shot-classification", model=str(path))
    # The rule the served route applies too (pooled_models/serving/zero_shot_request.py).
    with pytest.raises(ValueError, match="hypothesis_template") as refused:
        classify(TEXTS[0], candidate_labels=NEW, hypothesis_template=template)
    assert str(refused.value) == zero_shot_pipeline.template_refusal(template)


def test_labels_are_tokenised_once_per_call_and_batching_changes_nothing(folder, monkeypatch):
    path, _ = folder
    classify = pipeline("zero-shot-classification", model=str(path))
    calls = []
    real = zero_shot_pipeline.label_text_token_ids
    monkeypatch.setattr(
        zero_shot_pipeline,
        "label_text_token_ids",
        lambda texts, tok: calls.append(list(texts)) or real(texts, tok),
    )
    one = classify(TEXTS * 2, candidate_labels=NEW, batch_size=1)
    batched = classify(TEXTS * 2, candidate_labels=NEW, batch_size=4)
    assert calls == [NEW, NEW]  # one tokenisation per call, for six texts
    for a, b in zip(one, batched, strict=True):
        assert a["labels"] == b["labels"] and a["scores"] == pytest.approx(b["scores"], abs=1e-5)


def test_a_per_label_scorer_scores_its_own_labels_and_refuses_others(tmp_path, tiny_backbone_path):
    model = save_label_text_model(tmp_path, tiny_backbone_path, scorer="per_label")
    classify = pipeline("zero-shot-classification", model=str(tmp_path))
    result = classify(TEXTS[0], candidate_labels=["password", "billing"])
    with torch.no_grad():
        logits = model(**classify.tokenizer(TEXTS[:1], return_tensors="pt")).logits[0, [2, 0]]
    assert scores_by_label(result) == pytest.approx(
        dict(zip(["password", "billing"], logits.softmax(-1).tolist(), strict=True))
    )
    with pytest.raises(ValueError, match=r"scores its own labels only.*'weather' is not one of them"):
        classify(TEXTS[0], candidate_labels=["billing", "weather"])


def test_every_other_model_gets_transformers_nli_pipeline(tmp_path, minilm_tokenizer):
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(minilm_tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        id2label={0: "contradiction", 1: "neutral", 2: "entailment"},
        label2id={"contradiction": 0, "neutral": 1, "entailment": 2},
    )
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    minilm_tokenizer.save_pretrained(tmp_path)
    ours = pipeline("zero-shot-classification", model=str(tmp_path))
    theirs = pipeline(
        "zero-shot-classification", model=str(tmp_path), pipeline_class=ZeroShotClassificationPipeline
    )
    for multi_label in (False, True):
        a = ours(TEXTS[1], candidate_labels=NEW, multi_label=multi_label)
        b = theirs(TEXTS[1], candidate_labels=NEW, multi_label=multi_label)
        assert a["scores"] == pytest.approx(b["scores"], abs=1e-5)
        assert scores_by_label(a) == pytest.approx(scores_by_label(b), abs=1e-5)


@pytest.mark.slow  # a fresh interpreter without the package
def test_a_checkpoints_own_code_brings_the_pipeline_without_the_package(folder, tmp_path):
    path, model = folder
    script = f"""
        import json
        from transformers import pipeline
        classify = pipeline("zero-shot-classification", model={str(path)!r}, trust_remote_code=True)
        result = classify({TEXTS[0]!r}, candidate_labels={NEW!r})
        try:  # config.json names two tasks (text-classification too): transformers asks which, as for any such model
            untasked = type(pipeline(model={str(path)!r}, trust_remote_code=True)).__name__
        except RuntimeError as error:
            untasked = str(error)
        print(json.dumps({{"class": type(classify).__module__, "untasked": untasked, "result": result}}))
    """
    completed = run_without_package(script, tmp_path)
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    # The checkpoint's own file (zero_shot_pipeline.py, saved next to it), found through config.json's custom_pipelines.
    assert report["class"].startswith("transformers_modules.") and report["class"].endswith(
        ".zero_shot_pipeline"
    )
    assert "Pick one in text-classification, zero-shot-classification" in report["untasked"]
    logits = expected_logits(model, AutoTokenizer.from_pretrained(path), TEXTS[:1], NEW)[0]
    assert scores_by_label(report["result"]) == pytest.approx(
        dict(zip(NEW, logits.softmax(-1).tolist(), strict=True)), abs=1e-5
    )
