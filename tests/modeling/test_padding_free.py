"""Padding-free batches (modeling/padding_free.py) with torch's varlen attention (modeling/varlen_attention.py), on
the CPU: a batch given as one row and its texts' boundaries reads, for every pooling, what the padded batch reads;
RoBERTa-style positions, a local window (ModernBERT) and causal grouped-query attention (Llama, Qwen3) included;
gradients too; the kernel is called as each torch version takes it; backbones that cannot are refused by name.

On the CPU the attention function runs its reference (each text alone through sdpa, with the kernel's causal and
window rules): the layout is what is tested here. The kernel itself needs a GPU: bench/gpu.py checks it there."""

import pytest
import torch
import transformers
from helpers import random_batch, repad, tiny_backbone_config, tiny_model, tiny_multitask_model

from pooled_models import (
    POOLERS,
    TORCH_VARLEN,
    PooledForSequenceClassification,
    PooledForTokenClassification,
    PooledModel,
)
from pooled_models.modeling import varlen_attention
from pooled_models.modeling.packing import packing_refusal

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOLERANCE = 1e-5
LENGTHS = [5, 17, 3, 40, 1, 9, 12]


def _settings(pooling: str) -> dict:
    return {"label_token_init": "random"} if pooling == "label_tokens" else {}


def flat(batch) -> dict:
    """``batch`` (padded) as transformers' flattening collator gives it: one row, the boundaries, the longest."""
    real = batch["attention_mask"].bool()
    lengths = real.sum(dim=1)
    boundaries = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
    longest = int(lengths.max())
    return {
        "input_ids": batch["input_ids"][real].unsqueeze(0),
        "cu_seq_lens_q": boundaries,
        "cu_seq_lens_k": boundaries,
        "max_length_q": longest,
        "max_length_k": longest,
    }


def varlen(model):
    model.get_backbone().set_attn_implementation(TORCH_VARLEN)
    return model


def _close(first, second, tolerance=TOLERANCE):
    torch.testing.assert_close(first, second, atol=tolerance, rtol=0)


def _cut(padded: torch.Tensor, longest: int) -> torch.Tensor:
    # A flat batch's padded layout is as wide as its longest text; the padded batch's may be wider.
    return padded[:, :longest]


# ----------------------------------------------------------------------------------------------------
# Every pooling reads the same vectors
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backbone", ["bert", "roberta"])  # RoBERTa: positions start past padding_idx
@pytest.mark.parametrize("pooling", sorted(POOLERS))
def test_every_pooling_reads_from_a_flat_batch_what_it_reads_padded(pooling, backbone):
    batch = random_batch(LENGTHS)
    padded = tiny_model(pooling, backbone=backbone, **_settings(pooling))
    expected = padded(**batch).logits
    model = varlen(tiny_model(pooling, backbone=backbone, **_settings(pooling)))
    _close(model(**flat(batch)).logits, expected)
    embedder = tiny_model(pooling, backbone=backbone, model_class=PooledModel, **_settings(pooling))
    expected = embedder(**batch).pooler_output
    _close(varlen(embedder)(**flat(batch)).pooler_output, expected)


@pytest.mark.parametrize("backbone", ["bert", "roberta"])
def test_each_text_reads_as_it_does_alone(backbone):
    batch = random_batch(LENGTHS, seed=3)
    model = varlen(tiny_model("mean", backbone=backbone))
    logits = model(**flat(batch)).logits
    reference = tiny_model("mean", backbone=backbone)
    for row, length in enumerate(LENGTHS):
        alone = reference(**repad(batch, row, length, "right")).logits[0]
        _close(logits[row], alone)


def test_the_boundaries_keep_texts_apart():
    # The control: the same row told it holds one text gives other logits, so the boundaries are what is read.
    batch = random_batch([6, 9, 4], seed=1)
    model = varlen(tiny_model("mean"))
    right = flat(batch)
    joined = dict(right, cu_seq_lens_q=torch.tensor([0, 19], dtype=torch.int32), max_length_q=19)
    joined["cu_seq_lens_k"], joined["max_length_k"] = joined["cu_seq_lens_q"], 19
    assert not torch.allclose(model(**joined).logits[0], model(**right).logits[0], atol=1e-3)


def test_the_backbone_runs_the_row_without_padding(monkeypatch):
    seen = []
    reference = varlen_attention.reference_varlen_attention

    def recording(query, *args, **kwargs):
        seen.append(query.shape[0])  # [tokens, heads, dim]
        return reference(query, *args, **kwargs)

    monkeypatch.setattr(varlen_attention, "reference_varlen_attention", recording)
    model = varlen(tiny_model("cls"))
    model(**flat(random_batch(LENGTHS)))
    assert seen and set(seen) == {sum(LENGTHS)}  # every layer's attention saw the real tokens, and only them


def test_a_padded_batch_is_packed_for_torch_varlen():
    # torch_varlen takes no mask: a padded batch runs as one packed row, with the same outputs.
    batch = random_batch(LENGTHS, side="left")
    expected = tiny_model("max", backbone="roberta")(**batch).logits
    _close(varlen(tiny_model("max", backbone="roberta"))(**batch).logits, expected)


@pytest.mark.parametrize("lengths", [[11], [4, 0, 7], [0, 3]])
def test_batch_of_one_and_a_text_without_tokens(lengths):
    batch = random_batch(lengths)
    model = tiny_model("mean")
    expected = model(**batch).logits
    _close(varlen(model)(**flat(batch)).logits, expected)


# ----------------------------------------------------------------------------------------------------
# Windows, causal attention, grouped-query attention
# ----------------------------------------------------------------------------------------------------


def _modernbert():
    # A local window of 4 (2 tokens each side) on every other layer, shorter than most texts here.
    config = tiny_backbone_config("modernbert", local_attention=4, global_attn_every_n_layers=2)
    return config


def _qwen3():
    return transformers.Qwen3Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=37,
        max_position_embeddings=64,
        vocab_size=120,
        pad_token_id=0,
    )


@pytest.mark.parametrize(
    ("name", "config", "pooling"),
    [
        ("modernbert", _modernbert, "mean"),
        ("llama", lambda: tiny_backbone_config("llama"), "last_token"),
        ("qwen3", _qwen3, "last_token"),
    ],
)
def test_windowed_causal_and_grouped_query_backbones(name, config, pooling):
    from pooled_models import PooledConfig

    batch = random_batch(LENGTHS, seed=2)
    torch.manual_seed(0)
    model = PooledForSequenceClassification(
        PooledConfig(backbone_config=config(), pooling=pooling, num_labels=3)
    ).eval()
    expected = model(**batch).logits
    _close(varlen(model)(**flat(batch)).logits, expected)


def test_the_reference_window_and_causal_rules_match_a_mask():
    torch.manual_seed(0)
    query, key, value = (torch.randn(10, 2, 8) for _ in range(3))
    boundaries = torch.tensor([0, 4, 10], dtype=torch.int32)
    for window in [(-1, -1), (-1, 0), (2, 2), (3, 0)]:
        output = varlen_attention.reference_varlen_attention(query, key, value, boundaries, None, window)
        for start, end in [(0, 4), (4, 10)]:
            i = torch.arange(end - start)
            distance = i[:, None] - i[None, :]
            allowed = torch.ones_like(distance, dtype=torch.bool)
            if window[0] >= 0:
                allowed &= distance <= window[0]
            if window[1] >= 0:
                allowed &= distance >= -window[1]
            scores = torch.einsum("qhd,khd->hqk", query[start:end], key[start:end]) / 8**0.5
            weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
            expected = torch.einsum("hqk,khd->qhd", weights, value[start:end])
            _close(output[start:end], expected)


# ----------------------------------------------------------------------------------------------------
# Training: the same gradients
# ----------------------------------------------------------------------------------------------------


def test_a_flat_batch_trains_with_the_padded_batch_gradients():
    batch = random_batch(LENGTHS, seed=4)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    padded, packed = tiny_model("mean", backbone="roberta"), varlen(tiny_model("mean", backbone="roberta"))
    padded(**batch, labels=labels).loss.backward()
    packed(**flat(batch), labels=labels).loss.backward()
    gradients = dict(padded.named_parameters())
    for name, parameter in packed.named_parameters():
        expected = gradients[name].grad
        if expected is None:
            assert parameter.grad is None, name
            continue
        _close(parameter.grad, expected, tolerance=1e-6)


# ----------------------------------------------------------------------------------------------------
# The kernel as each torch takes it
# ----------------------------------------------------------------------------------------------------


def _fake_kernel(keywords: str):
    calls = []

    def reference(query, key, value, boundaries, window, scale):
        return varlen_attention.reference_varlen_attention(query, key, value, boundaries, scale, window)

    if keywords == "2.10":

        def kernel(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, return_aux=None):
            calls.append({"is_causal": is_causal, "max_q": max_q})
            return reference(query, key, value, cu_seq_q, (-1, 0) if is_causal else (-1, -1), None)

    else:

        def kernel(
            query,
            key,
            value,
            cu_seq_q,
            cu_seq_k,
            max_q,
            max_k,
            *,
            return_aux=None,
            scale=None,
            window_size=(-1, -1),
        ):
            calls.append({"window_size": window_size, "scale": scale, "max_q": max_q})
            return reference(query, key, value, cu_seq_q, window_size, scale)

    return kernel, calls


@pytest.mark.parametrize("version", ["2.10", "2.11"])
@pytest.mark.parametrize("window", [(-1, -1), (-1, 0)])
def test_the_kernel_is_called_as_its_torch_takes_it(monkeypatch, version, window):
    kernel, calls = _fake_kernel(version)
    monkeypatch.setattr(varlen_attention, "varlen_kernel", lambda: kernel)
    torch.manual_seed(0)
    query, key, value = (torch.randn(9, 2, 8) for _ in range(3))
    boundaries = torch.tensor([0, 5, 9], dtype=torch.int32)
    scale = 0.3  # not 1/sqrt(8): 2.10's kernel has no scale, so the query must carry it
    output = varlen_attention._call_kernel(query, key, value, boundaries, 5, scale, window)
    expected = varlen_attention.reference_varlen_attention(query, key, value, boundaries, scale, window)
    _close(output, expected)
    (call,) = calls
    assert call["max_q"] == 5
    if version == "2.10":
        assert call["is_causal"] is (window == (-1, 0))
    else:
        assert call["window_size"] == window and call["scale"] == scale


def test_a_window_needs_torch_2_11(monkeypatch):
    kernel, _ = _fake_kernel("2.10")
    monkeypatch.setattr(varlen_attention, "varlen_kernel", lambda: kernel)
    tensors = [torch.randn(4, 2, 8) for _ in range(3)]
    with pytest.raises(ValueError, match=r"no window_size.*torch 2\.11"):
        varlen_attention._call_kernel(*tensors, torch.tensor([0, 4], dtype=torch.int32), 4, None, (2, 2))


def test_on_this_machine_the_kernel_is_said_to_need_cuda():
    assert "CUDA" in varlen_attention.varlen_unavailable_reason("cpu")


# ----------------------------------------------------------------------------------------------------
# Refused by name
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backbone", ["deberta-v2", "esm"])
def test_backbones_that_cannot_run_a_flat_row_are_refused_by_name(backbone):
    model = tiny_model("mean", backbone=backbone)
    reason = packing_refusal(model.get_backbone(), varlen=True)
    expected = "AttentionInterface" if backbone == "deberta-v2" else "embeddings read"
    assert reason is not None and expected in reason
    model.get_backbone().config._attn_implementation = TORCH_VARLEN  # as set_attn_implementation would
    with pytest.raises(ValueError, match=r"torch_varlen.*attn_implementation='sdpa'"):
        model(**random_batch([3, 5]))


def test_models_with_a_row_per_token_refuse_flat_batches():
    batch = flat(random_batch([3, 5]))
    token = tiny_model("mean", model_class=PooledForTokenClassification)
    with pytest.raises(ValueError, match="PooledForTokenClassification takes padded batches only"):
        token(**batch)
    with pytest.raises(ValueError, match="PooledForMultiTask takes padded batches only"):
        tiny_multitask_model()(**batch)


def test_a_padded_call_to_the_attention_function_is_refused():
    backbone = transformers.BertModel(tiny_backbone_config("bert"), add_pooling_layer=False).eval()
    backbone.set_attn_implementation(TORCH_VARLEN)
    with pytest.raises(ValueError, match="runs padding-free rows only"):
        backbone(**random_batch([3, 5]))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"input_ids": torch.ones(2, 4, dtype=torch.long)}, r"one row: input_ids \[1, tokens\]"),
        ({"max_length_q": torch.tensor(5)}, "max_length_q must be the longest text's length as a Python int"),
        ({"cu_seq_lens_q": torch.tensor(3)}, "cu_seq_lens_q must be a 1-D tensor"),
        ({"attention_mask": torch.ones(2, 3)}, "attention_mask must be left out"),
        ({"cu_seq_lens_k": torch.tensor([0, 3])}, r"cu_seq_lens_k must be cu_seq_lens_q's boundaries"),
    ],
)
def test_a_malformed_flat_batch_is_refused(change, message):
    batch = dict(flat(random_batch([3, 5])), **change)
    with pytest.raises(ValueError, match=message):
        varlen(tiny_model("mean"))(**batch)
