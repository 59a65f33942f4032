"""Which implementation serves each backbone (serving/routes.py), for every type the package trains
(tests/modeling/test_architectures.py's list), and the transformers route itself run without vLLM on a sample of
types: the states it gives from a flattened batch of requests are each request's own, as transformers computes them.
(make test-vllm serves a sample of both routes through vLLM: tests/serving_vllm/test_backbones.py.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers import tiny_backbone_config
from modeling.test_architectures import BUILT_IN_FAILS, EVERY, REFUSED, SEQUENCE_TYPES, tiny_config
from safetensors.torch import load_file

from pooled_models import PooledConfig, PooledForSequenceClassification
from pooled_models.modeling.backbone import SEQUENCE_BASE_MODELS
from pooled_models.serving.routes import (
    TRANSFORMERS,
    TRANSFORMERS_ROUTE_REFUSED,
    VLLM_KERNELS,
    kernel_architecture,
    route,
)
from pooled_models.serving.support import refusal

CLASSIFIER = "PooledForSequenceClassification"
TRAINED = [t for t in SEQUENCE_TYPES if t not in BUILT_IN_FAILS and REFUSED.get(t, ((),))[0] != EVERY]


@pytest.mark.parametrize("model_type", TRAINED)
def test_every_trained_type_is_served_by_a_route_or_refused_by_name(model_type):
    config = PooledConfig(backbone_config=tiny_config(model_type), pooling="mean", num_labels=3)
    message = refusal(config, CLASSIFIER)
    if model_type in SEQUENCE_BASE_MODELS or model_type in TRANSFORMERS_ROUTE_REFUSED:
        assert message is not None and f"{model_type!r} backbone" in message and "pipeline(" in message
        return
    assert message is None
    backbone_type = config.backbone_config.model_type  # gpt-sw3's config is GPT-2's
    implementation, why = route(config.backbone_config, None)
    if backbone_type in VLLM_KERNELS:
        assert implementation == VLLM_KERNELS[backbone_type]
    else:
        assert implementation == TRANSFORMERS and f"{backbone_type!r}" in why


def test_what_vllm_kernels_do_not_reproduce_goes_through_transformers():
    relative = tiny_backbone_config("bert")
    relative.position_embedding_type = "relative_key"
    assert route(relative, None) == (TRANSFORMERS, "vLLM's BERT has absolute positions only, not "
                                     "position_embedding_type='relative_key'")  # fmt: skip
    layers = [0, 1, 2]
    assert (
        kernel_architecture(tiny_backbone_config("llama"), layers) == "LlamaModel"
    )  # the aux-hidden-state hook
    assert kernel_architecture(tiny_config("qwen3"), layers) == "Qwen3Model"
    assert kernel_architecture(tiny_config("gemma3_text"), None) == "Gemma3Model"
    assert kernel_architecture(tiny_config("gemma3_text"), layers) == "Gemma3Model"  # its layers looped
    assert kernel_architecture(tiny_config("modernbert"), layers) == "ModernBertModel"
    bidirectional = tiny_config("gemma3_text")
    bidirectional.use_bidirectional_attention = (
        True  # EmbeddingGemma's: vLLM's Gemma 3 reads is_causal instead
    )
    assert route(bidirectional, None)[0] == TRANSFORMERS


# A sample of what the transformers route meets: an encoder-decoder's encoder (T5, BART), relative positions
# (DeBERTa-v2, XLNet), fused experts that transformers saves in an older layout (Mixtral), backbones run request by
# request (ConvBERT's and FNet's states move with padding), a layer pooling.
SAMPLE = {
    "distilbert": "mean",
    "deberta-v2": "cls",
    "t5": "mean",
    "bart": "last_token",
    "xlnet": "mean",
    "mixtral": "last_token",
    "convbert": "max",
    "fnet": "mean",
    "electra": "weighted_layer",
}


@pytest.mark.parametrize("model_type", sorted(SAMPLE))
def test_the_transformers_route_gives_each_request_its_own_states(model_type, tmp_path):
    from pooled_models.serving.transformers_backbone import TransformersBackbone

    torch.manual_seed(0)
    config = PooledConfig(backbone_config=tiny_config(model_type), pooling=SAMPLE[model_type], num_labels=3)
    model = PooledForSequenceClassification(config).eval()
    model.save_pretrained(tmp_path)
    layers = model.pooler.hidden_states_read
    family = TransformersBackbone(PooledConfig.from_pretrained(tmp_path), TRANSFORMERS, layers)
    engine = SimpleNamespace(model_config=SimpleNamespace(model=str(tmp_path), dtype=torch.float32))
    module = family.build(engine, "backbone")
    saved = load_file(tmp_path / "model.safetensors")  # as vLLM reads the checkpoint
    weights = [
        (name.removeprefix("backbone."), t) for name, t in saved.items() if name.startswith("backbone.")
    ]
    assert family.load_weights(module, weights) >= {name for name, _ in module.named_parameters()}

    requests = [
        torch.randint(5, 99, (length,), generator=torch.Generator().manual_seed(length))
        for length in (6, 3, 9)
    ]
    with torch.no_grad():
        served = family.run(module, torch.cat(requests), torch.cat([torch.arange(len(r)) for r in requests]))
        for request, states in zip(requests, torch.split(served, [len(r) for r in requests]), strict=True):
            alone = model.run_backbone(
                input_ids=request.unsqueeze(0),
                attention_mask=torch.ones(1, len(request), dtype=torch.long),
                output_hidden_states=layers is not None,
            )
            expected = (
                alone.last_hidden_state
                if layers is None
                else torch.cat([alone.hidden_states[i] for i in layers], dim=-1)
            )
            torch.testing.assert_close(states, expected[0], atol=1e-5, rtol=0)


def test_a_split_prompt_is_refused():
    from pooled_models.serving.transformers_backbone import request_lengths

    assert request_lengths(torch.tensor([0, 1, 2, 0, 0, 1])) == [3, 1, 2]
    with pytest.raises(RuntimeError, match="whole prompts"):
        request_lengths(torch.tensor([3, 4, 0, 1]))


def test_the_transformers_route_pads_requests_of_like_lengths_together():
    from pooled_models.serving.transformers_backbone import length_groups

    lengths = [50, 3, 40, 4, 200, 5, 45]
    groups = length_groups(lengths, positions_per_batch=150)
    assert sorted(index for group in groups for index in group) == list(range(len(lengths)))
    assert groups == [[1, 3, 5], [2, 6, 0], [4]]  # by length; 4 x 50 > 150 closes the second; 200 alone
    for group in groups:  # within the budget once padded, unless one request alone is longer
        assert len(group) == 1 or len(group) * max(lengths[i] for i in group) <= 150
