"""Padding-free (packed) batches: every pooling reads the same vectors from packed rows as from the padded batch,
training takes the same step, and backbones that cannot run packed rows are refused by name."""

import copy

import pytest
import torch
from helpers import random_batch, tiny_backbone_config, tiny_model, tiny_multitask_model
from huggingface_hub.errors import StrictDataclassFieldValidationError

from pooled_models import (
    POOLERS,
    PooledConfig,
    PooledForSequenceClassification,
    PooledForTokenClassification,
    PooledModel,
)
from pooled_models.modeling.packing import PackedLayout, packing_refusal

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOLERANCE = 1e-5
# Mixed lengths (the longest decides the row width), and a one-token text.
LENGTHS = [5, 17, 3, 40, 1, 9, 12]


def _settings(pooling: str) -> dict:
    # label_text would need a tokenizer for the label names' ids; the layout does not depend on the start.
    return {"label_token_init": "random"} if pooling == "label_tokens" else {}


def _padded_and_packed(model, batch, **kwargs):
    """The model's outputs on ``batch``, padded then packed."""
    model.config.packed_batches = False
    padded = model(**batch, **kwargs)
    model.config.packed_batches = True
    packed = model(**batch, **kwargs)
    return padded, packed


def _close(first: torch.Tensor, second: torch.Tensor, msg: str | None = None) -> None:
    torch.testing.assert_close(first, second, atol=TOLERANCE, rtol=0, msg=msg)


# ----------------------------------------------------------------------------------------------------
# Every pooling: the same pooled vectors and logits as the padded batch
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backbone", ["bert", "roberta"])  # RoBERTa: positions start past padding_idx
@pytest.mark.parametrize("pooling", sorted(POOLERS))
def test_every_pooling_reads_the_same_vectors_from_packed_rows(pooling, backbone):
    model = tiny_model(pooling, backbone=backbone, **_settings(pooling))
    batch = random_batch(LENGTHS)
    padded, packed = _padded_and_packed(model, batch)
    _close(padded.logits, packed.logits)
    embedder = tiny_model(pooling, backbone=backbone, model_class=PooledModel, **_settings(pooling))
    padded, packed = _padded_and_packed(embedder, batch)
    _close(padded.pooler_output, packed.pooler_output)


@pytest.mark.parametrize("pooling", ["cls", "mean", "label_tokens", "lstm"])
def test_left_padding_packs_as_right_padding_does(pooling):
    model = tiny_model(pooling, backbone="roberta", **_settings(pooling))
    right, left = random_batch(LENGTHS, side="right"), random_batch(LENGTHS, side="left")
    model.config.packed_batches = False
    expected = model(**right).logits
    model.config.packed_batches = True
    _close(model(**left).logits, expected)
    _close(model(**right).logits, expected)


@pytest.mark.parametrize("pooling", ["cls", "max", "label_tokens", "weighted_layer"])
def test_a_batch_of_one_text(pooling):
    model = tiny_model(pooling, **_settings(pooling))
    padded, packed = _padded_and_packed(model, random_batch([11]))
    _close(padded.logits, packed.logits)


@pytest.mark.parametrize("pooling", sorted(POOLERS))
def test_a_text_without_real_tokens_matches_the_padded_batch(pooling):
    model = tiny_model(pooling, **_settings(pooling))
    batch = random_batch([6, 9, 4])
    batch["attention_mask"][1] = 0  # an empty text (truncated to nothing)
    padded, packed = _padded_and_packed(model, batch)
    assert torch.isfinite(packed.logits).all()
    _close(padded.logits, packed.logits)
    # Every text empty: one row of padding runs, and nothing crashes.
    batch["attention_mask"][:] = 0
    padded, packed = _padded_and_packed(model, batch)
    _close(padded.logits, packed.logits)


def test_label_tokens_in_several_passes_pack_their_extended_rows():
    model = tiny_model("label_tokens", num_labels=5, label_tokens_per_pass=2, label_token_init="random")
    padded, packed = _padded_and_packed(model, random_batch(LENGTHS, side="left"))
    _close(padded.logits, packed.logits)


def test_token_type_ids_and_inputs_embeds_are_packed_too():
    model = tiny_model("mean_max")
    batch = random_batch(LENGTHS)
    batch["token_type_ids"] = (
        (torch.arange(batch["input_ids"].shape[1]) > 4).long().expand_as(batch["input_ids"])
    )
    padded, packed = _padded_and_packed(model, batch)
    _close(padded.logits, packed.logits)
    embeds = {
        "inputs_embeds": model.get_input_embeddings()(batch["input_ids"]),
        "attention_mask": batch["attention_mask"],
    }
    padded, packed = _padded_and_packed(model, embeds)
    _close(padded.logits, packed.logits)


def test_hidden_states_come_back_in_the_padded_layout_with_zeros_at_the_padding():
    model = tiny_model("mean")
    batch = random_batch(LENGTHS, side="left")
    padded, packed = _padded_and_packed(model, batch, output_hidden_states=True)
    real = batch["attention_mask"].bool().unsqueeze(-1)
    assert len(padded.hidden_states) == len(packed.hidden_states)
    for padded_state, packed_state in zip(padded.hidden_states, packed.hidden_states, strict=True):
        assert packed_state.shape == padded_state.shape
        _close(packed_state * real, padded_state * real)
        assert not packed_state.masked_select(~real).any()


def test_token_classifier_and_multitask_model_pack_too():
    torch.manual_seed(0)
    token = tiny_model("mean", model_class=PooledForTokenClassification)
    batch = random_batch(LENGTHS)
    padded, packed = _padded_and_packed(token, batch)
    real = batch["attention_mask"].bool()
    _close(padded.logits[real], packed.logits[real])

    multitask = tiny_multitask_model()
    multitask.config.packed_batches = False
    expected = multitask(**batch)
    multitask.config.packed_batches = True
    result = multitask(**batch)
    for task in ("team", "topics", "urgency"):
        _close(expected[task].logits, result[task].logits)
    _close(expected["entities"].logits[real], result["entities"].logits[real])


# ----------------------------------------------------------------------------------------------------
# Training: the same loss and the same step
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pooling", ["attention", "label_tokens", "concat_layers"])
def test_a_training_step_on_packed_rows_is_the_padded_step(pooling):
    # Dropout off (eval mode): the random masks would fall on different positions in the two layouts.
    padded_model = tiny_model(pooling, backbone="roberta", **_settings(pooling))
    packed_model = copy.deepcopy(padded_model)
    packed_model.config.packed_batches = True
    batch = {**random_batch(LENGTHS, side="left"), "labels": torch.tensor([0, 1, 2, 0, 1, 2, 0])}
    losses = []
    for model in (padded_model, packed_model):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        losses.append((loss.detach(), model(**batch).loss.detach()))
    _close(losses[0][0], losses[1][0])
    _close(losses[0][1], losses[1][1])  # after the step: the same step was taken
    for (name, padded), packed in zip(
        padded_model.named_parameters(), packed_model.parameters(), strict=True
    ):
        _close(padded, packed, msg=name)


# ----------------------------------------------------------------------------------------------------
# Backbones: which run packed, which are refused and why
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("backbone", ["bert", "roberta", "distilbert", "modernbert", "gpt2", "llama"])
def test_backbones_that_take_a_prepared_mask_run_packed(backbone, attention):
    pooling = "last_token" if backbone in ("gpt2", "llama") else "cls"
    torch.manual_seed(0)
    backbone_config = tiny_backbone_config(backbone)
    if backbone == "modernbert":
        backbone_config.local_attention = 8  # a sliding window the texts are longer than
    model = PooledForSequenceClassification(
        PooledConfig(backbone_config=backbone_config, pooling=pooling, num_labels=3)
    ).eval()
    model.backbone.set_attn_implementation(attention)
    assert model.backbone.config._attn_implementation == attention
    padded, packed = _padded_and_packed(model, random_batch(LENGTHS, side="left"))
    _close(padded.logits, packed.logits)


@pytest.mark.parametrize(
    "backbone, reason",
    [("deberta-v2", "builds its attention mask itself"), ("esm", "embeddings read the \\[batch, seq_len\\]")],
)
def test_backbones_that_cannot_run_packed_are_refused_by_name(backbone, reason):
    config = PooledConfig(backbone_config=tiny_backbone_config(backbone), packed_batches=True, num_labels=2)
    with pytest.raises(ValueError, match=f"packed_batches=True: .*Model('s)? {reason}.*packed_batches=False"):
        PooledForSequenceClassification(config)
    # Switched on after the model was built: refused at the first batch.
    model = tiny_model("mean", backbone=backbone)
    assert packing_refusal(model.backbone) is not None
    model.config.packed_batches = True
    with pytest.raises(ValueError, match=f"Model('s)? {reason}"):
        model(**random_batch([3, 5]))


def test_packing_needs_positions_from_the_mask_and_a_bool():
    with pytest.raises(ValueError, match="packed_batches=True needs position_ids_from_mask=True"):
        PooledConfig(
            backbone_config=tiny_backbone_config(), packed_batches=True, position_ids_from_mask=False
        )
    with pytest.raises(
        StrictDataclassFieldValidationError, match=r"field 'packed_batches'[\s\S]*expected bool"
    ):
        PooledConfig(backbone_config=tiny_backbone_config(), packed_batches="yes")


def test_attention_maps_are_refused_on_packed_rows():
    model = tiny_model("mean", packed_batches=True)
    with pytest.raises(ValueError, match="output_attentions is not available with packed_batches=True"):
        model(**random_batch([3, 5]), output_attentions=True)


def test_the_setting_is_saved_and_loaded(tmp_path):
    model = tiny_model("mean", packed_batches=True)
    model.save_pretrained(tmp_path)
    loaded = PooledForSequenceClassification.from_pretrained(tmp_path)
    assert loaded.config.packed_batches is True
    batch = random_batch(LENGTHS)
    _close(loaded.eval()(**batch).logits, model(**batch).logits)


# ----------------------------------------------------------------------------------------------------
# The layout
# ----------------------------------------------------------------------------------------------------


def test_texts_are_packed_whole_into_rows_no_wider_than_the_longest_text():
    mask = random_batch([7, 2, 7, 5, 0, 3], side="left")["attention_mask"]
    layout = PackedLayout(mask)
    assert layout.width == 7 and layout.num_rows == 4  # 7 | 7 | 5 2 | 3 (first fit, longest first)
    values = torch.arange(mask.numel()).view(mask.shape).unsqueeze(-1).float() + 1
    packed = layout.pack(values, 0.0)
    assert packed.shape == (4, 7, 1)
    for text, row in enumerate(mask):
        slots = layout.text_ids == text
        assert int(slots.sum()) == int(row.sum())
        if row.any():  # each text sits in one row, in one run, in its own order
            assert packed[slots].squeeze(-1).tolist() == values[text][row.bool()].squeeze(-1).tolist()
    _close(layout.unpack(packed), values * mask.unsqueeze(-1))


def test_one_row_gives_the_boundaries_flash_attention_varlen_takes():
    mask = random_batch([5, 2, 3], side="right")["attention_mask"]
    mask[1] = 0
    layout = PackedLayout(mask, one_row=True)
    assert (layout.num_rows, layout.width) == (1, 8)
    arguments = layout.varlen_arguments(torch.device("cpu"))
    assert (
        arguments["cu_seq_lens_q"].tolist() == [0, 5, 8] and arguments["cu_seq_lens_q"].dtype == torch.int32
    )
    assert arguments["max_length_q"] == arguments["max_length_k"] == 5
    # The boundaries are those of the texts in the row.
    assert layout.text_ids[0].tolist() == [0] * 5 + [2] * 3


def test_compiled_graphs_run_the_padded_batch_with_the_same_outputs():
    # Packing reads the batch's lengths (data-dependent shapes); a compiled graph runs the padded batch instead.
    import torch._dynamo

    model = tiny_model("mean", packed_batches=True)
    batch = random_batch(LENGTHS, side="left")
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        _close(compiled(**batch).logits, model(**batch).logits)
