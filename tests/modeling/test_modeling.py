"""PooledModel / PooledForSequenceClassification on a tiny random BERT, for every registered pooling."""

import pytest
import torch
from helpers import (
    HIDDEN_STATE_POOLERS,
    assert_padding_and_batching_invariant,
    random_batch,
    repad,
    tiny_model,
)
from transformers.modeling_outputs import SequenceClassifierOutput

from pooled_models import POOLERS, PooledForSequenceClassification, PooledModel
from pooled_models.modeling.compat import SELECTS_HIDDEN_STATES


@pytest.mark.parametrize("pooling", HIDDEN_STATE_POOLERS)
def test_forward_shapes_and_loss(pooling):
    model = tiny_model(pooling)
    batch = random_batch([5, 3, 7])
    out = model(**batch, labels=torch.tensor([0, 2, 1]))
    assert isinstance(out, SequenceClassifierOutput)
    assert out.logits.shape == (3, 3)
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)
    assert model.config.problem_type == "single_label_classification"


@pytest.mark.parametrize("pooling", HIDDEN_STATE_POOLERS)
def test_every_trainable_parameter_gets_a_gradient(pooling):
    """What DDP with find_unused_parameters=False needs: no parameter is left out of the graph."""
    model = tiny_model(pooling).train()
    out = model(
        **random_batch([5, 3, 7]),
        token_type_ids=torch.zeros(3, 7, dtype=torch.long),
        labels=torch.tensor([0, 2, 1]),
    )
    out.loss.backward()
    missing = [name for name, param in model.named_parameters() if param.requires_grad and param.grad is None]
    assert not missing, f"parameters without a gradient: {missing}"


@pytest.mark.parametrize("pooling", HIDDEN_STATE_POOLERS)
def test_save_and_load_give_identical_logits(pooling, tmp_path):
    model = tiny_model(pooling, classifier_head="dense")
    batch = random_batch([4, 6])
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert not list(tmp_path.glob("*.bin")) and not list(tmp_path.glob("*.pt"))
    reloaded = PooledForSequenceClassification.from_pretrained(tmp_path).eval()
    assert torch.equal(model(**batch).logits, reloaded(**batch).logits)


@pytest.mark.parametrize("pooling", HIDDEN_STATE_POOLERS)
def test_right_left_padding_and_batching_leave_logits_unchanged(pooling):
    assert_padding_and_batching_invariant(tiny_model(pooling), seed=3)


def test_left_padding_needs_mask_derived_positions():
    """Without position_ids_from_mask, left padding shifts BERT's absolute positions (so the test above can fail)."""
    model = tiny_model("mean", position_ids_from_mask=False)
    batch = random_batch([5], seed=4)
    alone = model(**batch).logits
    left = model(**repad(batch, 0, 9, "left")).logits
    assert not torch.allclose(alone, left, atol=1e-4)


def test_pooled_model_returns_the_poolers_output():
    model = tiny_model("mean_max", model_class=PooledModel)
    batch = random_batch([4, 6])
    out = model(**batch)
    assert out.pooler_output.shape == (2, 64)
    expected = model.pooler(out.last_hidden_state, batch["attention_mask"])
    torch.testing.assert_close(out.pooler_output, expected)


def test_no_unused_backbone_pooler_is_built():
    model = tiny_model("cls")
    assert model.backbone.pooler is None
    assert not any("backbone.pooler" in name for name, _ in model.named_parameters())


def test_batch_size_one_and_a_single_token():
    model = tiny_model("attention")
    out = model(input_ids=torch.tensor([[7]]), labels=torch.tensor([1]))
    assert out.logits.shape == (1, 3) and torch.isfinite(out.loss)


def test_inputs_embeds_match_input_ids():
    model = tiny_model("mean")
    batch = random_batch([4, 6])
    embeds = model.get_input_embeddings()(batch["input_ids"])
    torch.testing.assert_close(
        model(inputs_embeds=embeds, attention_mask=batch["attention_mask"]).logits, model(**batch).logits
    )
    with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds"):
        model(attention_mask=batch["attention_mask"])


def test_hidden_states_and_attentions_only_when_asked():
    model = tiny_model("weighted_layer", attn_implementation="eager")
    batch = random_batch([4, 6])
    plain = model(**batch)
    assert (
        plain.hidden_states is None and plain.attentions is None
    )  # the pooler read them, the caller did not ask
    full = model(**batch, output_hidden_states=True, output_attentions=True)
    assert len(full.hidden_states) == 3 and full.hidden_states[-1].shape == (2, 6, 32)
    assert len(full.attentions) == 2 and full.attentions[0].shape == (2, 4, 6, 6)


def test_return_dict_false_gives_a_tuple():
    model = tiny_model("mean")
    out = model(**random_batch([4, 6]), labels=torch.tensor([0, 1]), return_dict=False)
    assert isinstance(out, tuple) and out[0].ndim == 0 and out[1].shape == (2, 3)


def test_bf16_model_gives_finite_logits():
    model = tiny_model("cls_mean_max").to(torch.bfloat16)
    batch = random_batch([5, 3])
    batch["attention_mask"][1] = 0  # and a row with no real token
    logits = model(**batch).logits
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()


def test_gradient_checkpointing_trains():
    model = tiny_model("concat_layers").train()
    model.gradient_checkpointing_enable()
    out = model(**random_batch([5, 3]), labels=torch.tensor([0, 1]))
    out.loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


# ----------------------------------------------------------------------------------------------------
# Problem types and losses
# ----------------------------------------------------------------------------------------------------


def test_regression_with_one_label():
    model = tiny_model("mean", num_labels=1)
    labels = torch.tensor([0.5, -1.0])
    out = model(**random_batch([4, 6]), labels=labels)
    assert model.config.problem_type == "regression"
    torch.testing.assert_close(out.loss, torch.nn.functional.mse_loss(out.logits.squeeze(-1), labels))


def test_regression_at_batch_size_one():
    model = tiny_model("mean", num_labels=1)
    out = model(**random_batch([4]), labels=torch.tensor([2.0]))
    torch.testing.assert_close(out.loss, (out.logits[0, 0] - 2.0) ** 2)


def test_single_label_loss_is_cross_entropy_and_ignores_minus_100():
    model = tiny_model("mean")
    labels = torch.tensor([2, -100, 0])
    out = model(**random_batch([4, 6, 2]), labels=labels)
    expected = torch.nn.functional.cross_entropy(out.logits[[0, 2]], labels[[0, 2]])
    torch.testing.assert_close(out.loss, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.long])
def test_multi_label_from_float_or_multi_hot_integer_targets(dtype):
    model = tiny_model("mean")
    labels = torch.tensor([[1, 0, 1], [0, 0, 0]], dtype=dtype)
    out = model(**random_batch([4, 6]), labels=labels)
    assert model.config.problem_type == "multi_label_classification"
    expected = torch.nn.functional.binary_cross_entropy_with_logits(out.logits, labels.float())
    torch.testing.assert_close(out.loss, expected)


@pytest.mark.parametrize(
    "settings, labels, message",
    [
        (
            {},
            torch.tensor([0, 3]),
            r"labels\[1\] = 3 is not a class id: with num_labels=3 class ids must be in \[0, 2\]",
        ),
        ({}, torch.tensor([-2, 1]), r"labels\[0\] = -2 is not a class id"),
        (
            {"problem_type": "single_label_classification"},
            torch.tensor([0.0, 1.0]),
            r"expects integer class ids.*got dtype torch.float32",
        ),
        ({}, torch.tensor([0, 1, 2]), r"labels has shape \(3,\) but the batch has 2 rows"),
        (
            {"problem_type": "multi_label_classification"},
            torch.ones(2, 4),
            r"expects labels of shape \(2, 3\).*got shape \(2, 4\)",
        ),
        (
            {"problem_type": "multi_label_classification"},
            torch.tensor([0, 1]),
            r"expects labels of shape \(2, 3\)",
        ),
        (
            {"problem_type": "multi_label_classification"},
            torch.tensor([[0, 2.0, 0], [0, 0, 1]]),
            r"labels\[0, 1\] = 2.0: multi-label targets must lie in \[0, 1\]",
        ),
        (
            {"num_labels": 1},
            torch.tensor([1.0, float("nan")]),
            r"regression targets must be finite numbers; row 1",
        ),
        ({"problem_type": "regression"}, torch.ones(2), r"regression expects labels of shape \(2, 3\)"),
    ],
)
def test_bad_labels_raise_before_the_loss(settings, labels, message):
    model = tiny_model("mean", **settings)
    with pytest.raises(ValueError, match=message):
        model(**random_batch([4, 6]), labels=labels)


def test_single_label_with_one_label_is_refused():
    model = tiny_model("mean", num_labels=1)
    model.config.problem_type = "single_label_classification"
    with pytest.raises(ValueError, match="single_label_classification needs num_labels >= 2"):
        model(**random_batch([4, 6]), labels=torch.tensor([0, 0]))


# ----------------------------------------------------------------------------------------------------
# Mistakes in what a caller passes: a ValueError that says what is wrong, and nothing changed by it
# ----------------------------------------------------------------------------------------------------


def test_token_ids_beyond_the_vocabulary_are_named():
    model = tiny_model("mean")
    batch = random_batch([4, 6])
    batch["input_ids"][1, 2] = 500
    with pytest.raises(
        ValueError,
        match=r"input_ids\[1, 2\] = 500 is not a token id of this model: its vocabulary "
        r"has 120 entries",
    ):
        model(**batch)


def test_a_mask_shaped_unlike_the_ids_is_named():
    model = tiny_model("mean")
    batch = random_batch([4, 6])
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 5\) but the inputs are \(2, 6\)"):
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"][:, :5])


def test_labels_given_as_a_python_list_work_like_a_tensor():
    model = tiny_model("mean")
    batch = random_batch([4, 6])
    from_list = model(**batch, labels=[0, 2]).loss
    assert torch.equal(from_list, model(**batch, labels=torch.tensor([0, 2])).loss)


def test_a_failed_label_check_does_not_fix_the_problem_type():
    model = tiny_model("mean")
    batch = random_batch([4, 6])
    with pytest.raises(ValueError, match="labels has shape"):
        model(**batch, labels=torch.tensor([0, 1, 2]))  # three labels for two rows
    assert model.config.problem_type is None
    assert model(**batch, labels=torch.tensor([0, 2])).loss is not None
    assert model.config.problem_type == "single_label_classification"


# ----------------------------------------------------------------------------------------------------
# A selection of hidden states (transformers 5: output_hidden_states=[0, 2])
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pooling", sorted(POOLERS))
@pytest.mark.parametrize("selection", [[0, 2], 1, [-1]], ids=["0,2", "1", "-1"])
def test_a_selection_of_hidden_states_works_with_every_pooling(pooling, selection):
    settings = {"label_token_init": "random"} if pooling == "label_tokens" else {}
    if pooling in ("concat_layers", "weighted_layer", "lstm"):
        settings["layer_start"] = 0  # reads every layer, the embeddings included
    model = tiny_model(pooling, **settings)
    batch = random_batch([4, 7])
    with torch.no_grad():
        plain = model(**batch)
        selected = model(**batch, output_hidden_states=selection)
    torch.testing.assert_close(selected.logits, plain.logits)
    assert plain.hidden_states is None
    wanted = {index % 3 for index in ([selection] if isinstance(selection, int) else selection)}
    assert [index for index, state in enumerate(selected.hidden_states) if state is not None] == sorted(
        wanted
    )


def test_a_layer_pooling_asks_the_backbone_for_its_layers_only():
    model = tiny_model("concat_layers", layer_start=-1)  # the last layer: no hidden states needed
    seen = []
    model.backbone.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["output_hidden_states"]), with_kwargs=True
    )
    model(**random_batch([4, 7]))
    model = tiny_model("weighted_layer", layer_start=1)
    model.backbone.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["output_hidden_states"]), with_kwargs=True
    )
    model(**random_batch([4, 7]), output_hidden_states=[0])
    # No hidden states at all; then the weighted layers and the selected one, where transformers takes a selection
    # (5.23 on), else every hidden state (the flag older versions take).
    assert seen == [False, [0, 1, 2] if SELECTS_HIDDEN_STATES else True]
