"""label_token_attention="one_way": the label tokens attend to the text, the text does not attend to them.

The reference is the backbone itself: under one-way attention the text's states are those the backbone gives the text
alone, whatever the labels, and each label's token still reads the text."""

import pytest
import torch
from helpers import assert_padding_and_batching_invariant, random_batch
from huggingface_hub.errors import StrictDataclassFieldValidationError
from test_late_label_tokens import late_model

from pooled_models import PooledConfig, PooledForSequenceClassification
from pooled_models.modeling.label_token_layers import text_not_attending_labels

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NUM_LABELS = 4


def one_way_model(family="bert", layers=1, **settings):
    return late_model(
        family, layers=layers, num_labels=NUM_LABELS, label_token_attention="one_way", **settings
    )


def text_states(model, ids: torch.Tensor) -> torch.Tensor:
    """The final states of one unpadded text's tokens in the model (labels after its first token, all in one pass)."""
    states = model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0]
    return torch.cat([states[:1], states[1 + NUM_LABELS :]])


@pytest.mark.parametrize("family", ["bert", "roberta", "esm", "distilbert"])
@pytest.mark.parametrize("layers", [1, "all"])
def test_the_text_keeps_the_states_it_has_alone(family, layers):
    model = one_way_model(family, layers)
    ids = random_batch([7])["input_ids"]
    with torch.no_grad():
        alone = model.backbone(input_ids=ids).last_hidden_state[0]
        torch.testing.assert_close(text_states(model, ids), alone, atol=1e-5, rtol=1e-5)
        # Two-way attention, the same weights: the text reads the label tokens, and its states change.
        two_way = late_model(family, layers=layers, num_labels=NUM_LABELS)
        two_way.load_state_dict(model.state_dict())
        assert not torch.allclose(text_states(two_way, ids), alone, atol=1e-3)


def test_the_labels_read_the_text_and_differ_from_two_way_below_the_top_layer():
    # In the top layer the labels read the text's states from below, which the text's attention to the labels has
    # not changed yet: with k = 1 both ways give the same logits; from k = 2 on they differ.
    model = one_way_model(layers=2)
    two_way = late_model("bert", layers=2, num_labels=NUM_LABELS)
    two_way.load_state_dict(model.state_dict())
    batch = random_batch([6, 6], seed=1)
    with torch.no_grad():
        labels = model.embed(
            **batch
        )  # each label token's final state, what the head scores: [texts, labels, H]
        assert not torch.allclose(labels[0], labels[1], atol=1e-3)  # two texts, two readings per label
        # A tiny random model's attention is near uniform, so the text's change reaches the labels damped (about
        # 1e-5 here), far above float32 rounding (the same computation twice is bit-identical on CPU).
        assert torch.equal(labels, model.embed(**batch))
        assert (labels - two_way.embed(**batch)).abs().max() > 1e-6


@pytest.mark.parametrize("family", ["bert", "esm"])
@pytest.mark.parametrize("position", [1, -1])
def test_padding_and_batching_invariance(family, position):
    assert_padding_and_batching_invariant(
        one_way_model(family, label_tokens_per_pass=2, label_token_position=position)
    )


def test_eager_and_sdpa_agree_and_a_text_without_tokens_stays_finite():
    # sdpa reads a boolean mask, eager an additive one: both are edited. An empty text leaves its label tokens
    # attending to each other only; no attention row may end up empty (NaN).
    model = one_way_model(label_tokens_per_pass=2).train()
    batch = random_batch([7, 5, 3], seed=3)
    batch["attention_mask"][2] = 0
    out = model(**batch, labels=torch.tensor([0, 1, 3]))
    assert torch.isfinite(out.logits).all()
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        sdpa = model(**batch).logits
        model.set_attn_implementation("eager")
        torch.testing.assert_close(model(**batch).logits, sdpa, atol=1e-5, rtol=1e-5)


def test_save_reload_and_fullgraph_compilation(tmp_path):
    import torch._dynamo

    model = one_way_model()
    batch = random_batch([5, 8])
    model.save_pretrained(tmp_path)
    loaded = PooledForSequenceClassification.from_pretrained(tmp_path).eval()
    assert loaded.config.label_token_attention == "one_way"
    torch._dynamo.reset()
    compiled = torch.compile(loaded, fullgraph=True, backend="eager")
    with torch.no_grad():
        expected = model(**batch).logits
        torch.testing.assert_close(loaded(**batch).logits, expected)
        torch.testing.assert_close(compiled(**batch).logits, expected)


def test_the_default_is_two_way_and_a_bad_value_names_the_choices():
    assert late_model("bert", layers=1).config.label_token_attention == "two_way"
    # A closed choice (Literal["two_way", "one_way"]): @strict refuses another value as it is set, naming the choices.
    with pytest.raises(
        StrictDataclassFieldValidationError,
        match=r"label_token_attention.*\('two_way', 'one_way'\), got both",
    ):
        late_model("bert", layers=1, label_token_attention="both")


@pytest.mark.parametrize("family", ["gpt2", "deberta-v2"])
def test_a_backbone_whose_layers_it_cannot_run_is_refused_naming_two_way(family):
    from helpers import tiny_backbone_config

    config = PooledConfig(
        backbone_config=tiny_backbone_config(family),
        pooling="label_tokens",
        num_labels=3,
        label_token_init="random",
        label_token_attention="one_way",
    )
    with pytest.raises(
        ValueError,
        match=r"label_token_attention='one_way' runs the backbone's layers one by one.*"
        r"Valid choice for this backbone: label_token_attention='two_way'",
    ):
        PooledForSequenceClassification(config)


def test_an_attention_without_a_mask_tensor_is_refused_by_name():
    model = one_way_model()
    model.backbone.config._attn_implementation = "flash_attention_2"  # its mask: 2D or None, not editable
    with pytest.raises(
        ValueError, match=r"'flash_attention_2' attention does not take as a tensor.*'sdpa' or 'eager'"
    ):
        text_not_attending_labels(
            None, torch.ones(1, 3, dtype=torch.bool), torch.zeros(1, 3, dtype=torch.bool), model.backbone
        )


def test_a_loading_override_applies_and_an_edit_of_a_built_model_is_refused(tmp_path):
    late_model("bert", layers=2, num_labels=NUM_LABELS).save_pretrained(tmp_path)  # two-way
    loaded = PooledForSequenceClassification.from_pretrained(tmp_path, label_token_attention="one_way")
    assert loaded.classifier.pooler.one_way
    loaded.config.label_token_attention = (
        "two_way"  # the built pooler cannot follow: refused at the next forward
    )
    with pytest.raises(ValueError, match=r"label_token_attention='two_way' \(built with 'one_way'\)"):
        loaded(**random_batch([4]))
