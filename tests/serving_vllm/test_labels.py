"""Label text served by vLLM's offline LLM API, equal to transformers in float32 (1e-4): classify with the labels'
vectors worked out at load through vLLM's own modules, no transformers copy of the model built (both scorers,
descriptions, marker or mean label vectors, single- and multi-label; where the attention is not plain, the transformers
copy, equal too), and the open label set through the zero-shot IO-processor plugin, equal to
pipeline("zero-shot-classification") on labels the model never saw, with cached labels as without, one prompt per text;
bad zero-shot requests refused naming the field, the next request answered; label tokens with the serving
tokenizer."""

import contextlib
import math
from unittest import mock

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

from pooled_models import PooledForSequenceClassification
from pooled_models.serving import label_text
from pooled_models.serving.label_tokens import write_serving_tokenizer
from pooled_models.serving.label_vector_cache import LabelVectorCache
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


@contextlib.contextmanager
def counting_transformers_models():
    """Within it, the PooledForSequenceClassification models built (the engine runs in this process)."""
    built = []
    original = PooledForSequenceClassification.__init__

    def counted(self, *args, **kwargs):
        built.append(type(self).__name__)
        original(self, *args, **kwargs)

    with mock.patch.object(PooledForSequenceClassification, "__init__", counted):
        yield built


@pytest.fixture(scope="module", params=sorted(CHECKPOINTS))
def served(request, minilm_path, tmp_path_factory):
    """(checkpoint folder, its settings, vLLM's LLM on it with the zero-shot plugin, the transformers models built while
    vLLM loaded it)."""
    ensure_zero_shot_entry_point(tmp_path_factory.mktemp("entry_point"))
    settings = CHECKPOINTS[request.param]
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    ids = own_label_text_ids(tokenizer, LABELS, settings.get("label_descriptions"))
    folder = save_checkpoint(
        tmp_path_factory.mktemp(request.param), tokenizer, "label_text", label_text_ids=ids, **settings
    )
    with (
        counting_transformers_models() as built,
        offline_engine(folder, io_processor_plugin=PLUGIN_NAME) as llm,
    ):
        loaded_with = list(built)
        yield folder, settings, llm, loaded_with


def zero_shot(llm, **data) -> list[dict]:
    (output,) = llm.encode({"data": data}, pooling_task="plugin", use_tqdm=False)
    return output.outputs


def test_classify_equals_transformers_with_no_copy_of_the_model(served):
    folder, settings, llm, loaded_with = served
    assert loaded_with == []  # the labels' vectors came from vLLM's own modules (label_text.py)
    logits = transformers_logits(folder)
    assert logits.std(dim=-1).min() > 1e-3  # the labels' words tell them apart
    torch.testing.assert_close(classify(llm, use_activation=False), logits, atol=TOLERANCE, rtol=0)
    multi_label = settings.get("problem_type") == "multi_label_classification"
    expected = logits.sigmoid() if multi_label else logits.softmax(-1)
    torch.testing.assert_close(classify(llm), expected, atol=TOLERANCE, rtol=0)


def test_the_open_label_set_equals_the_zero_shot_pipeline(served):
    folder, settings, llm, _ = served
    # The shared scorer reads labels the model never saw; per_label scores its own labels (a subset, in any order).
    labels = UNSEEN if settings["label_text_scorer"] == "shared" else [LABELS[2], LABELS[0]]
    for multi_label in (False, True):
        expected = zero_shot_pipeline_answer(folder, ZERO_SHOT_TEXTS, labels, multi_label)
        answer = zero_shot(llm, texts=ZERO_SHOT_TEXTS, candidate_labels=labels, multi_label=multi_label)
        assert_same_answer(answer, expected, TOLERANCE)


def test_cached_labels_give_the_uncached_answer_with_one_prompt_per_text(served):
    folder, settings, llm, _ = served
    processor = llm.pooling_io_processors["plugin"].io_processor
    processor.label_vectors = LabelVectorCache()  # nothing cached by the earlier tests
    prompts = []
    original = processor.pre_process

    def counted(prompt, request_id=None, **kwargs):
        sent = original(prompt, request_id, **kwargs)
        prompts.append(len(sent))
        return sent

    processor.pre_process = counted
    try:
        labels = UNSEEN[1:4] if settings["label_text_scorer"] == "shared" else [LABELS[1], LABELS[2]]
        texts = ZERO_SHOT_TEXTS[:3]
        first = zero_shot(llm, texts=texts, candidate_labels=labels)
        second = zero_shot(llm, texts=texts, candidate_labels=labels)
        third = zero_shot(llm, texts=texts[:1], candidate_labels=labels[:1], multi_label=True)
    finally:
        del processor.pre_process
    # per_label: every label the model has is scored (the asked ones are then picked), so all of them run once.
    labels_run = len(labels) if settings["label_text_scorer"] == "shared" else len(LABELS)
    assert prompts == [labels_run + len(texts), len(texts), 1]
    assert_same_answer(second, first, 1e-6)
    assert_same_answer(first, zero_shot_pipeline_answer(folder, texts, labels, False), TOLERANCE)
    assert_same_answer(third, zero_shot_pipeline_answer(folder, texts[:1], labels[:1], True), TOLERANCE)


def test_where_the_attention_is_not_plain_the_label_vectors_come_from_the_transformers_copy(
    minilm_path, tmp_path, monkeypatch
):
    folder = save_checkpoint(
        tmp_path / "model",
        AutoTokenizer.from_pretrained(minilm_path),
        "label_text",
        **CHECKPOINTS["per_label"],
    )
    monkeypatch.setattr(label_text, "plain_attention_refusal", lambda model, longest: "a reason of this test")
    with counting_transformers_models() as built, offline_engine(folder) as llm:
        assert built == ["PooledForSequenceClassification"]
        logits = transformers_logits(folder)
        torch.testing.assert_close(classify(llm, use_activation=False), logits, atol=TOLERANCE, rtol=0)


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
    folder, settings, llm, _ = served
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
