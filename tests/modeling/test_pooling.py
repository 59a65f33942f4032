"""Pooler-level tests, parametrised over every registered pooling that reads hidden states.

A new pooler registered with ``@register_pooler`` is picked up by every test here; it also needs an
entry in REFERENCES (what it should compute on an unpadded sequence), which a test enforces.
"""

import math

import pytest
import torch
from helpers import HIDDEN_STATE_POOLERS
from transformers import BertConfig

from pooled_models import POOLERS, PooledConfig, register_pooler
from pooled_models.modeling.pooling import TokenPooler, build_pooler, get_pooler_class

HIDDEN = 8
NUM_LAYERS = 4  # hidden_states has NUM_LAYERS + 1 entries


def make_pooler(name: str, **options):
    backbone = BertConfig(
        hidden_size=HIDDEN, num_hidden_layers=NUM_LAYERS, num_attention_heads=2, intermediate_size=16
    )
    torch.manual_seed(0)
    pooler = build_pooler(PooledConfig(backbone_config=backbone, pooling=name, **options))
    return pooler.eval()


def run(pooler, layers, mask):
    return pooler(layers[-1], mask, tuple(layers))


def random_layers(batch: int, length: int, dtype=torch.float32):
    return [torch.randn(batch, length, HIDDEN, dtype=dtype) for _ in range(NUM_LAYERS + 1)]


def pad(layers, extra: int, side: str):
    """Pad every layer with `extra` positions of large garbage, which a correct pooler never reads."""
    padded = []
    for layer in layers:
        garbage = 1000 * torch.randn(layer.shape[0], extra, HIDDEN)
        padded.append(torch.cat([layer, garbage] if side == "right" else [garbage, layer], dim=1))
    return padded


def pad_mask(length: int, extra: int, side: str):
    real, padding = torch.ones(1, length, dtype=torch.long), torch.zeros(1, extra, dtype=torch.long)
    return torch.cat([real, padding] if side == "right" else [padding, real], dim=1)


# What each pooling must compute on one unpadded sequence: layers are [T, H], from embeddings to last.
def _reference_attention(pooler, layers):
    hidden = layers[-1]
    weights = pooler.scorer(hidden).softmax(dim=0)  # [T, heads]
    return (weights.T @ hidden).reshape(-1)


def _reference_lstm(pooler, layers):
    per_layer = torch.stack([layer[0] for layer in layers[1:]])  # CLS of every layer from layer_start=1
    output, _ = pooler.lstm(per_layer.unsqueeze(0))
    return output[0, -1]


def _positions(length):
    return torch.arange(1, length + 1, dtype=torch.float32).unsqueeze(-1)


REFERENCES = {
    "cls": lambda p, L: L[-1][0],
    "last_token": lambda p, L: L[-1][-1],
    "mean": lambda p, L: L[-1].mean(0),
    "max": lambda p, L: L[-1].amax(0),
    "min": lambda p, L: L[-1].amin(0),
    "mean_max": lambda p, L: torch.cat([L[-1].mean(0), L[-1].amax(0)]),
    "cls_mean_max": lambda p, L: torch.cat([L[-1][0], L[-1].amax(0), L[-1].mean(0)]),
    "mean_sqrt_len": lambda p, L: L[-1].sum(0) / math.sqrt(L[-1].shape[0]),
    "weighted_mean": lambda p, L: (
        (_positions(L[-1].shape[0]) * L[-1]).sum(0) / _positions(L[-1].shape[0]).sum()
    ),
    "gem": lambda p, L: L[-1].clamp(min=1e-6).pow(3).mean(0).pow(1 / 3),
    "attention": _reference_attention,
    "concat_layers": lambda p, L: torch.cat([layer[0] for layer in L[-4:]]),
    "weighted_layer": lambda p, L: torch.stack(L[1:]).mean(0)[0],
    "lstm": _reference_lstm,
}


def test_every_pooler_has_a_reference():
    assert set(REFERENCES) == set(HIDDEN_STATE_POOLERS)
    # The poolings that edit the input are tested in test_label_tokens.py and test_label_text.py; a new one needs tests
    # of its own.
    assert set(POOLERS) - set(HIDDEN_STATE_POOLERS) == {"label_tokens", "label_text"}


@pytest.mark.parametrize("name", HIDDEN_STATE_POOLERS)
def test_matches_reference_on_unpadded_sequence(name):
    pooler = make_pooler(name)
    layers = random_layers(1, 6)
    expected = REFERENCES[name](pooler, [layer[0] for layer in layers])
    torch.testing.assert_close(run(pooler, layers, torch.ones(1, 6))[0], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", HIDDEN_STATE_POOLERS)
def test_output_shape_matches_reported_dim(name):
    pooler = make_pooler(name)
    out = run(pooler, random_layers(3, 5), torch.ones(3, 5))
    assert out.shape == (3, pooler.output_dim)


@pytest.mark.parametrize("name", HIDDEN_STATE_POOLERS)
def test_padding_invariance(name):
    """Alone, right-padded, left-padded and inside a batch of longer sequences: the same vector."""
    pooler = make_pooler(name)
    torch.manual_seed(1)
    length, extra = 5, 4
    text = random_layers(1, length)
    alone = run(pooler, text, torch.ones(1, length))[0]

    for side in ("right", "left"):
        padded = run(pooler, pad(text, extra, side), pad_mask(length, extra, side))[0]
        torch.testing.assert_close(
            padded, alone, atol=1e-5, rtol=1e-5, msg=f"{side} padding changed the output"
        )

        longer = random_layers(1, length + extra)
        shorter = random_layers(1, length - 2)
        batch = [
            torch.cat([a, b, c], dim=0)
            for a, b, c in zip(pad(text, extra, side), longer, pad(shorter, extra + 2, side), strict=True)
        ]
        mask = torch.cat(
            [
                pad_mask(length, extra, side),
                torch.ones(1, length + extra, dtype=torch.long),
                pad_mask(length - 2, extra + 2, side),
            ]
        )
        in_batch = run(pooler, batch, mask)[0]
        torch.testing.assert_close(
            in_batch, alone, atol=1e-5, rtol=1e-5, msg=f"batching ({side}) changed the output"
        )


@pytest.mark.parametrize("name", HIDDEN_STATE_POOLERS)
def test_batch_size_one(name):
    pooler = make_pooler(name)
    out = run(pooler, random_layers(1, 1), torch.ones(1, 1))
    assert out.shape == (1, pooler.output_dim)


@pytest.mark.parametrize("name", HIDDEN_STATE_POOLERS)
def test_does_not_modify_the_callers_hidden_states(name):
    pooler = make_pooler(name)
    layers = pad(random_layers(2, 4), 3, "right")
    before = [layer.clone() for layer in layers]
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0]])
    run(pooler, layers, mask)
    for layer, original in zip(layers, before, strict=True):
        assert torch.equal(layer, original)


@pytest.mark.parametrize("name", HIDDEN_STATE_POOLERS)
def test_bf16_is_finite(name):
    pooler = make_pooler(name).to(torch.bfloat16)
    layers = pad(random_layers(2, 6, torch.bfloat16), 2, "right")
    layers = [layer.to(torch.bfloat16) for layer in layers]
    mask = torch.tensor([[1] * 8, [1] * 3 + [0] * 5])
    out = run(pooler, layers, mask)
    assert out.dtype == torch.bfloat16
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", HIDDEN_STATE_POOLERS)
def test_row_without_real_tokens_is_finite_with_finite_gradients(name):
    pooler = make_pooler(name).train()
    layers = [layer.requires_grad_() for layer in random_layers(2, 5)]
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    out = run(pooler, layers, mask)
    assert torch.isfinite(out).all()
    out.sum().backward()
    for layer in layers:
        assert layer.grad is None or torch.isfinite(layer.grad).all()


@pytest.mark.parametrize("name", HIDDEN_STATE_POOLERS)
def test_every_parameter_gets_a_gradient(name):
    pooler = make_pooler(name).train()
    layers = [layer.requires_grad_() for layer in random_layers(2, 5)]
    out = run(pooler, layers, torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]))
    (out * torch.randn_like(out)).sum().backward()
    for param_name, param in pooler.named_parameters():
        assert param.grad is not None, f"{param_name} got no gradient"
        assert torch.isfinite(param.grad).all() and param.grad.abs().sum() > 0, (
            f"{param_name} got a zero gradient"
        )


@pytest.mark.parametrize(
    "name, part, largest",
    [
        ("max", slice(0, HIDDEN), True),
        ("mean_max", slice(HIDDEN, 2 * HIDDEN), True),
        ("cls_mean_max", slice(HIDDEN, 2 * HIDDEN), True),
        ("min", slice(0, HIDDEN), False),
    ],
)
def test_extremes_ignore_zeroed_padding(name, part, largest):
    """The seed bug: padding set to 0 wins the max when every real value is negative."""
    pooler = make_pooler(name)
    sign = -1 if largest else 1
    real = sign * (torch.rand(1, 4, HIDDEN) + 0.5)
    hidden = torch.cat([real, torch.zeros(1, 3, HIDDEN)], dim=1)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0]])
    expected = real[0].amax(0) if largest else real[0].amin(0)
    out = pooler(hidden, mask)[0, part]
    torch.testing.assert_close(out, expected)
    assert (out * sign > 0).all()


def test_attention_gives_padding_no_weight():
    pooler = make_pooler("attention", attention_heads=3)
    hidden = torch.randn(1, 6, HIDDEN)
    hidden[0, 4:] = 1e4  # would dominate any weighted sum that let padding in
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    out = pooler(hidden, mask).reshape(3, HIDDEN)
    assert out.abs().max() < 100


@pytest.mark.parametrize("token_pooling", ["mean", "max", "attention", "gem", "last_token"])
@pytest.mark.parametrize("strategy", ["concat_layers", "weighted_layer", "lstm"])
def test_any_token_pooling_on_any_layer_strategy(strategy, token_pooling):
    pooler = make_pooler(strategy, layer_token_pooling=token_pooling, layer_start=-3)
    assert pooler.layer_indices == [2, 3, 4]
    assert isinstance(pooler.token_pooler, get_pooler_class(token_pooling))
    out = run(pooler, random_layers(2, 5), torch.ones(2, 5))
    assert out.shape == (2, pooler.output_dim) and torch.isfinite(out).all()


def test_concat_of_mean_of_last_four_layers():
    pooler = make_pooler("concat_layers", layer_token_pooling="mean")
    layers = random_layers(1, 5)
    expected = torch.cat([layer[0].mean(0) for layer in layers[-4:]])
    torch.testing.assert_close(run(pooler, layers, torch.ones(1, 5))[0], expected)


def test_layer_strategy_on_last_layer_only_does_not_need_all_hidden_states():
    assert make_pooler("concat_layers", layer_start=-1).hidden_states_read is None
    assert make_pooler("concat_layers", layer_start=-2).hidden_states_read == [NUM_LAYERS - 1, NUM_LAYERS]
    assert make_pooler("mean").hidden_states_read is None
    with pytest.raises(ValueError, match="output_hidden_states=True"):
        make_pooler("weighted_layer")(torch.randn(1, 3, HIDDEN), torch.ones(1, 3))


def test_gem_exponent_is_learned_and_starts_at_gem_p():
    pooler = make_pooler("gem", gem_p=2.0)
    assert pooler.p.requires_grad and pooler.p.item() == 2.0


def test_registry_rejects_duplicates_and_lists_choices_for_unknown_names():
    with pytest.raises(ValueError, match="already registered"):
        register_pooler("mean")(type("AnotherMean", (TokenPooler,), {}))
    with pytest.raises(ValueError, match="Valid choices: .*attention.*cls.*mean"):
        get_pooler_class("average")
