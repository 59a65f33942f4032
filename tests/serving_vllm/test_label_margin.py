"""Label text's seen-label margin (label_text_seen_margin, calibrated stacking) served by vLLM as transformers applies
it: classify takes it off every own label's logit, and the zero-shot route off the trained labels among those asked
(matched by their words), equal to pipeline("zero-shot-classification"); a control without the margin answers
otherwise."""

import pytest
import torch
from label_helpers import (
    UNSEEN,
    assert_same_answer,
    ensure_zero_shot_entry_point,
    own_label_text_ids,
    zero_shot_pipeline_answer,
)
from transformers import AutoTokenizer, pipeline
from vllm_helpers import (
    LABELS,
    TEXTS,
    TOLERANCE,
    classify,
    offline_engine,
    save_checkpoint,
    transformers_logits,
)

from pooled_models import PooledForSequenceClassification
from pooled_models.serving.zero_shot import PLUGIN_NAME

MARGIN = 3.0
# Two of the model's own labels (trained: the margin applies) among labels it never saw.
ASKED = [LABELS[0], UNSEEN[0], LABELS[2], UNSEEN[1]]


@pytest.fixture(scope="module")
def served(minilm_path, tmp_path_factory):
    ensure_zero_shot_entry_point(tmp_path_factory.mktemp("entry_point"))
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    ids = own_label_text_ids(tokenizer, LABELS, None)
    folder = save_checkpoint(
        tmp_path_factory.mktemp("margin"),
        tokenizer,
        "label_text",
        label_text_ids=ids,
        label_text_scorer="shared",
        label_text_seen_margin=MARGIN,
        label_text_seen_ids=ids,
    )
    with offline_engine(folder, io_processor_plugin=PLUGIN_NAME) as llm:
        yield folder, llm


def test_classify_takes_the_margin_off_as_transformers(served):
    folder, llm = served
    logits = transformers_logits(folder)
    unmargined = PooledForSequenceClassification.from_pretrained(folder, label_text_seen_margin=0.0).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        raw = unmargined(**tokenizer(TEXTS, padding=True, return_tensors="pt")).logits
    torch.testing.assert_close(logits, raw - MARGIN)  # transformers applies it to every own label
    torch.testing.assert_close(classify(llm, use_activation=False), logits, atol=TOLERANCE, rtol=0)


def test_the_zero_shot_route_takes_it_off_the_trained_labels_only(served):
    folder, llm = served
    (output,) = llm.encode(
        {"data": {"texts": TEXTS[:3], "candidate_labels": ASKED}}, pooling_task="plugin", use_tqdm=False
    )
    expected = zero_shot_pipeline_answer(folder, TEXTS[:3], ASKED, False)
    assert_same_answer(output.outputs, expected, TOLERANCE)
    # the control: without the margin, the pipeline's scores differ
    tokenizer = AutoTokenizer.from_pretrained(folder)
    plain = pipeline(
        "zero-shot-classification",
        model=PooledForSequenceClassification.from_pretrained(folder, label_text_seen_margin=0.0),
        tokenizer=tokenizer,
    )(TEXTS[:3], candidate_labels=ASKED)
    # the margin moved probability from the trained labels to the unseen ones
    assert all(
        unseen_share(got) > unseen_share(control) + 1e-3
        for got, control in zip(output.outputs, plain, strict=True)
    )


def unseen_share(answer: dict) -> float:
    return sum(
        score for label, score in zip(answer["labels"], answer["scores"], strict=True) if label in UNSEEN
    )
