"""Every backbone family on a tiny random config: the pooled model works the same way on each."""

import pytest
import torch
from helpers import TINY_BACKBONES, assert_padding_and_batching_invariant, random_batch, tiny_model

from pooled_models import PooledForSequenceClassification

CASES = [
    (backbone, pooling)
    for backbone, (_, family_pooling) in sorted(TINY_BACKBONES.items())
    for pooling in (family_pooling, "mean", "concat_layers")
]


@pytest.mark.parametrize("backbone, pooling", CASES)
def test_backbone_trains_saves_and_reloads(backbone, pooling, tmp_path):
    model = tiny_model(pooling, backbone=backbone).train()
    batch = random_batch([6, 4, 2])
    out = model(**batch, labels=torch.tensor([0, 1, 2]))
    assert out.logits.shape == (3, 3) and torch.isfinite(out.loss)
    out.loss.backward()
    missing = [name for name, param in model.named_parameters() if param.requires_grad and param.grad is None]
    assert not missing, f"parameters without a gradient: {missing}"

    model.eval().save_pretrained(tmp_path)
    reloaded = PooledForSequenceClassification.from_pretrained(tmp_path).eval()
    assert type(reloaded.backbone) is type(model.backbone)
    assert torch.equal(model(**batch).logits, reloaded(**batch).logits)


@pytest.mark.parametrize("backbone, pooling", CASES)
def test_backbone_padding_and_batching_invariance(backbone, pooling):
    assert_padding_and_batching_invariant(tiny_model(pooling, backbone=backbone), (5, 8, 3), seed=2, width=11)


def test_token_type_ids_are_dropped_for_backbones_without_segments():
    model = tiny_model("mean", backbone="distilbert")
    batch = random_batch([4, 6])
    with_segments = model(**batch, token_type_ids=torch.zeros(2, 6, dtype=torch.long)).logits
    torch.testing.assert_close(with_segments, model(**batch).logits)


def test_esm_contact_head_is_not_built():
    model = tiny_model("cls", backbone="esm")
    assert model.backbone.contact_head is None and model.backbone.pooler is None


@pytest.mark.parametrize("backbone", sorted(TINY_BACKBONES))
def test_mask_derived_positions_agree_with_the_backbones_own_under_right_padding(backbone):
    """Positions from the mask follow each backbone's convention (RoBERTa/ESM count from padding_idx + 1)."""
    ours = tiny_model("mean", backbone=backbone, seed=5)
    own = tiny_model("mean", backbone=backbone, seed=5, position_ids_from_mask=False)
    batch = random_batch([5, 8, 3], seed=6)
    torch.testing.assert_close(ours(**batch).logits, own(**batch).logits, atol=1e-5, rtol=1e-5)
