"""fp16 and bf16: poolings accumulate in float32 and return the model's dtype, so long sequences with large
activations stay finite and close to float32. In fp16, 512 tokens of 300 sum to 153600 > 65504 (its largest
number), and position weights 1..n sum past it from 362 tokens."""

import pytest
import torch
from helpers import HIDDEN_STATE_POOLERS, random_batch, tiny_backbone_config

from pooled_models import PooledConfig, PooledModel
from pooled_models.modeling.pooling import build_pooler

TOKENS, HIDDEN, LAYERS = 512, 32, 2


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    return float((value.float() - reference).norm() / reference.norm())


def large_activations(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Two rows: 512 real tokens, and 300 then padding; one feature near 300 in every token, as trained models
    have (outlier features), the others moderate."""
    generator = torch.Generator().manual_seed(seed)
    layers = []
    for _ in range(LAYERS + 1):
        states = torch.randn(2, TOKENS, HIDDEN, generator=generator)
        states[..., 0] = 300 + 10 * torch.randn(2, TOKENS, generator=generator)
        layers.append(states)
    mask = torch.ones(2, TOKENS, dtype=torch.long)
    mask[1, 300:] = 0
    return layers[-1], mask, layers


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("pooling", HIDDEN_STATE_POOLERS)
def test_every_pooling_stays_finite_and_close_to_float32_on_512_large_tokens(pooling, dtype):
    backbone = tiny_backbone_config(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, max_position_embeddings=TOKENS
    )
    torch.manual_seed(0)
    pooler = build_pooler(PooledConfig(backbone_config=backbone, pooling=pooling, num_labels=2)).eval()
    hidden, mask, layers = large_activations()
    with torch.no_grad():
        reference = pooler(hidden, mask, layers)
        low = pooler.to(dtype)(hidden.to(dtype), mask, [layer.to(dtype) for layer in layers])
    assert low.dtype == dtype
    assert torch.isfinite(low).all(), pooling
    assert relative_error(low, reference) < 1e-2, (pooling, relative_error(low, reference))


@pytest.mark.parametrize("pooling", ["mean", "weighted_mean", "mean_sqrt_len", "attention", "gem"])
def test_a_tiny_bert_in_fp16_pools_400_tokens_like_float32(pooling):
    config = PooledConfig(
        backbone_config=tiny_backbone_config(max_position_embeddings=512), pooling=pooling, num_labels=2
    )
    torch.manual_seed(0)
    model = PooledModel(config).eval()
    batch = random_batch([400, 300], seed=3)
    with torch.no_grad():
        reference = model(**batch).pooler_output
        half = model.half()(**batch).pooler_output
    assert half.dtype == torch.float16 and torch.isfinite(half).all()
    assert relative_error(half, reference) < 1e-2


@pytest.mark.parametrize("pooling", ["cls", "last_token"])
def test_a_row_without_real_tokens_pools_to_zeros(pooling):
    config = PooledConfig(backbone_config=tiny_backbone_config(), pooling=pooling, num_labels=2)
    pooler = build_pooler(config)
    hidden = torch.randn(2, 5, config.hidden_size) + 3
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    pooled = pooler(hidden, mask)
    assert torch.equal(pooled[1], torch.zeros(config.hidden_size)) and pooled[0].abs().sum() > 0
