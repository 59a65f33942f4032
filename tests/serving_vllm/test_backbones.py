"""Every backbone family the plugin serves, against transformers in float32 (1e-4): vLLM's own kernels (ModernBERT,
Qwen3, Gemma 3, Llama, Qwen2, XLM-RoBERTa, CamemBERT) and the transformers route (DistilBERT, DeBERTa-v3, ELECTRA,
MPNet, ALBERT, BERT with relative positions), with token and layer poolings; one of them over HTTP; and the refusals
of Funnel and CANINE by name. Each case builds one engine on one tiny random checkpoint (attention head size 32, what
vLLM's CPU attention takes) and checks which route served it."""

from __future__ import annotations

import pytest
import torch
from backbone_helpers import BACKBONES, save, served_route
from transformers import AutoTokenizer
from vllm_helpers import (
    LABELS,
    TEXTS,
    TOLERANCE,
    Server,
    classify,
    embed,
    offline_engine,
    transformers_logits,
)

from pooled_models import PooledConfig, PooledModel

ALL_LAYERS = {"layer_start": 0}  # a layer pooling over every hidden state, the embedding output included
# case -> (backbone, pooling, settings, the route that serves it: vLLM's class name or "transformers")
CASES = {
    "modernbert-cls_mean_max": ("modernbert", "cls_mean_max", {}, "ModernBertModel"),
    "modernbert-concat_layers": ("modernbert", "concat_layers", ALL_LAYERS, "ModernBertModel"),
    "qwen3-last_token": ("qwen3", "last_token", {}, "Qwen3Model"),
    "qwen3-weighted_layer-mean": (
        "qwen3",
        "weighted_layer",
        {**ALL_LAYERS, "layer_token_pooling": "mean"},
        "Qwen3Model",
    ),
    "llama-concat_layers-last_token": (
        "llama",
        "concat_layers",
        {"layer_start": 1, "layer_token_pooling": "last_token"},
        "LlamaModel",
    ),
    "qwen2-mean": ("qwen2", "mean", {}, "Qwen2Model"),
    "gemma3_text-mean": ("gemma3_text", "mean", {}, "Gemma3Model"),
    "gemma3-last_token": ("gemma3", "last_token", {}, "Gemma3Model"),
    "gemma3_text-lstm": ("gemma3_text", "lstm", {"layer_token_pooling": "mean"}, "Gemma3Model"),
    "gemma3-weighted_layer": ("gemma3", "weighted_layer", ALL_LAYERS, "Gemma3Model"),
    "xlm-roberta-cls": ("xlm-roberta", "cls", {}, "XLMRobertaModel"),
    "camembert-weighted_layer": ("camembert", "weighted_layer", ALL_LAYERS, "CamembertModel"),
    "bert-relative_key-mean": ("bert-relative_key", "mean", {}, "transformers"),
    "distilbert-mean": ("distilbert", "mean", {}, "transformers"),
    "deberta-v2-cls_mean_max": ("deberta-v2", "cls_mean_max", {}, "transformers"),
    "electra-weighted_layer": ("electra", "weighted_layer", ALL_LAYERS, "transformers"),
    "mpnet-last_token": ("mpnet", "last_token", {}, "transformers"),
    "albert-attention": ("albert", "attention", {}, "transformers"),
}


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return AutoTokenizer.from_pretrained(minilm_path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_backbone_classifies_as_transformers(case, tokenizer, tmp_path):
    backbone, pooling, settings, route = CASES[case]
    folder = save(tmp_path, tokenizer, backbone, pooling, **settings)
    logits = transformers_logits(folder)
    with offline_engine(folder) as llm:
        assert served_route(llm) == route
        served_logits = classify(llm, use_activation=False)
        served = classify(llm)
    torch.testing.assert_close(served_logits, logits, atol=TOLERANCE, rtol=0)
    torch.testing.assert_close(served, logits.softmax(-1), atol=TOLERANCE, rtol=0)


def test_an_mpnet_embedder_serves_its_normalised_embeddings(tokenizer, tmp_path):
    """all-mpnet-base-v2's backbone, as a sentence embedder: the transformers route through LLM.embed."""
    ids = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
    config = PooledConfig(backbone_config=BACKBONES["mpnet"](ids), pooling="mean", normalize_embeddings=True)
    torch.manual_seed(0)
    PooledModel(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    expected = torch.nn.functional.normalize(transformers_logits(tmp_path), dim=-1)
    with offline_engine(tmp_path) as llm:
        torch.testing.assert_close(embed(llm), expected, atol=TOLERANCE, rtol=0)


def test_the_transformers_route_serves_over_http(tokenizer, tmp_path):
    folder = save(tmp_path / "model", tokenizer, "deberta-v2", "mean")
    expected = transformers_logits(folder).softmax(-1)
    with Server(folder, tmp_path / "server.log") as server:
        answer = server.post("/classify", {"input": TEXTS})
    served = torch.tensor([item["probs"] for item in answer["data"]])
    torch.testing.assert_close(served, expected, atol=TOLERANCE, rtol=0)
    assert [item["label"] for item in answer["data"]] == [LABELS[int(i)] for i in expected.argmax(-1)]


# Refused at load by name: (backbone, what the message must say).
REFUSED = {"funnel": "FunnelBaseModel gives fewer states", "canine": "downsamples the characters"}


@pytest.mark.parametrize("backbone", sorted(REFUSED))
def test_funnel_and_canine_are_refused_by_name(backbone, tokenizer, tmp_path):
    folder = save(tmp_path, tokenizer, backbone, "mean")
    with pytest.raises(ValueError, match="pooled_models' vLLM plugin cannot serve") as refused:
        with offline_engine(folder):
            pass
    message = str(refused.value)
    assert f"{backbone!r} backbone" in message and REFUSED[backbone] in message and "pipeline" in message
