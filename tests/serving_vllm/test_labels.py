"""Label text served by vLLM's offline LLM API, equal to transformers in float32 (1e-4): classify with the labels'
vectors worked out at load (both scorers, descriptions, marker or mean label vectors, single- and multi-label), and the
open label set through the zero-shot IO-processor plugin, equal to pipeline("zero-shot-classification") on labels the
model never saw; bad zero-shot requests refused naming the field, the next request answered; label tokens with the
serving tokenizer."""

import math

import pytest
import torch
from label_helpers import (
    UNSEEN,
    ZERO_SHOT_TEXTS,
    assert_same_answer,
    ensure_zero_shot_entry_point,
    own_label_text_ids,
    zero_shot_pipeline_answer,
)
from transformers import AutoTokenizer
from vllm_helpers import LABELS, TOLERANCE, classify, offline_engine, save_checkpoint, transformers_logits

from pooled_models.serving.label_tokens import write_serving_tokenizer
from pooled_models.serving.zero_shot import MAX_CANDIDATE_LABELS, PLUGIN_NAME

# train.py's few-example default (per_label, a description for one label, single-label), and the scorer that reads any
# label (shared), with marker vectors, multi-label; on vLLM's BERT (the other families: test_label_backbones.py).
CHECKPOINTS = {
    "per_label": {
        "label_text_scorer": "per_label",
        "label_descriptions": {"fear": "being afraid of something"},
    },
    "shared-marker-multi_label": {
        "label_text_scorer": "shared",
        "label_text_pooling": "marker",
        "problem_type": "multi_label_classification",
    },
}


@pytest.fixture(scope="module", params=sorted(CHECKPOINTS))
def served(request, minilm_path, tmp_path_factory):
    """(checkpoint folder, its settings, vLLM's LLM on it with the zero-shot plugin)."""
    ensure_zero_shot_entry_point(tmp_path_factory.mktemp("entry_point"))
    settings = CHECKPOINTS[request.param]
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    ids = own_label_text_ids(tokenizer, LABELS, settings.get("label_descriptions"))
    folder = save_checkpoint(
        tmp_path_factory.mktemp(request.param), tokenizer, "label_text", label_text_ids=ids, **settings
    )
    with offline_engine(folder, io_processor_plugin=PLUGIN_NAME) as llm:
        yield folder, settings, llm


def zero_shot(llm, **data) -> list[dict]:
    (output,) = llm.encode({"data": data}, pooling_task="plugin", use_tqdm=False)
    return output.outputs


def test_classify_equals_transformers(served):
    folder, settings, llm = served
    logits = transformers_logits(folder)
    assert logits.std(dim=-1).min() > 1e-3  # the labels' words tell them apart
    torch.testing.assert_close(classify(llm, use_activation=False), logits, atol=TOLERANCE, rtol=0)
    multi_label = settings.get("problem_type") == "multi_label_classification"
    expected = logits.sigmoid() if multi_label else logits.softmax(-1)
    torch.testing.assert_close(classify(llm), expected, atol=TOLERANCE, rtol=0)


def test_the_open_label_set_equals_the_zero_shot_pipeline(served):
    folder, settings, llm = served
    # The shared scorer reads labels the model never saw; per_label scores its own labels (a subset, in any order).
    labels = UNSEEN if settings["label_text_scorer"] == "shared" else [LABELS[2], LABELS[0]]
    for multi_label in (False, True):
        expected = zero_shot_pipeline_answer(folder, ZERO_SHOT_TEXTS, labels, multi_label)
        answer = zero_shot(llm, texts=ZERO_SHOT_TEXTS, candidate_labels=labels, multi_label=multi_label)
        assert_same_answer(answer, expected, TOLERANCE)


BAD_REQUESTS = {
    "empty label list": ({"candidate_labels": []}, "candidate_labels"),
    "duplicated label": ({"candidate_labels": ["joy", "anger", "joy"]}, "'joy' more than once"),
    "too many labels": (
        {"candidate_labels": [f"label {i}" for i in range(MAX_CANDIDATE_LABELS + 1)]},
        f"at most {MAX_CANDIDATE_LABELS}",
    ),
    "no texts": ({"texts": [], "candidate_labels": ["joy"]}, "texts"),
    "multi_label not a boolean": ({"candidate_labels": ["joy"], "multi_label": "yes"}, "multi_label"),
    "unknown field": ({"candidate_labels": ["joy"], "labels": ["joy"]}, "unknown fields ['labels']"),
}


def test_bad_requests_name_the_field_and_the_next_one_is_answered(served):
    folder, settings, llm = served
    cases = dict(BAD_REQUESTS)
    if settings["label_text_scorer"] == "per_label":
        cases["a label the model does not know"] = ({"candidate_labels": ["joy", "sports"]}, "'sports'")
    for name, (data, said) in cases.items():
        with pytest.raises(ValueError) as refused:
            zero_shot(llm, **{"texts": ZERO_SHOT_TEXTS[:1], **data})
        assert said in str(refused.value), (name, str(refused.value))
    labels = [LABELS[1], LABELS[0]]
    expected = zero_shot_pipeline_answer(folder, ZERO_SHOT_TEXTS[:2], labels, False)
    assert_same_answer(
        zero_shot(llm, texts=ZERO_SHOT_TEXTS[:2], candidate_labels=labels), expected, TOLERANCE
    )


def test_label_tokens_with_the_serving_tokenizer_classify_as_transformers(minilm_path, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    folder = save_checkpoint(tmp_path / "model", tokenizer, "label_tokens", label_token_init="random")
    serving_tokenizer = write_serving_tokenizer(folder, tmp_path / "serving_tokenizer")
    logits = transformers_logits(folder)
    with offline_engine(folder, tokenizer=str(serving_tokenizer)) as llm:
        torch.testing.assert_close(classify(llm, use_activation=False), logits, atol=TOLERANCE, rtol=0)
        torch.testing.assert_close(classify(llm), logits.softmax(-1), atol=TOLERANCE, rtol=0)
        # Token ids sent without the label tokens (the checkpoint's own tokenizer): no score, never another model's.
        (output,) = llm.classify(
            [{"prompt_token_ids": tokenizer("I love this.")["input_ids"]}], use_tqdm=False
        )
        assert all(math.isnan(score) for score in output.outputs.probs)
