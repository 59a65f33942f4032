"""Document mode (modeling/documents.py, window_pooling.py, document_settings.py): settings, the cross-window
poolers' maths against independent computations, batch independence, one-window equality with the model without
document mode, positions per window, every problem type, and bad input."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import PAD_ID, VOCAB_SIZE, tiny_model, tiny_multitask_model
from torch.nn import functional as F

from pooled_models import (
    PooledConfig,
    PooledForSequenceClassification,
    PooledForTokenClassification,
    PooledModel,
)
from pooled_models.modeling.documents import document_batch, document_windows_from
from pooled_models.modeling.window_pooling import (
    WINDOW_POOLINGS,
    AttentionWindowPooler,
    TransformerWindowPooler,
    sinusoidal_positions,
)

DOCUMENT_POOLINGS = sorted(WINDOW_POOLINGS)


def random_documents(window_counts, seed: int = 0, width: int = 12, shortest: int = 3) -> list[dict]:
    """Documents of random windows (token ids of the tiny vocabulary), ``window_counts[i]`` windows each."""
    generator = torch.Generator().manual_seed(seed)
    documents = []
    for count in window_counts:
        lengths = torch.randint(shortest, width + 1, (count,), generator=generator).tolist()
        windows = [
            torch.randint(5, VOCAB_SIZE, (length,), generator=generator).tolist() for length in lengths
        ]
        documents.append({"input_ids": windows})
    return documents


def perturbed(model):
    """``model`` with every parameter of its cross-window pooler moved off its start (the transformer starts as the
    identity), so that the checks read a pooler that does something."""
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in model.document_pooler.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return model


def document_model(pooling: str = "mean", document_pooling: str = "mean", **settings):
    settings.setdefault("document_window", 12)
    return perturbed(tiny_model(pooling, document_pooling=document_pooling, **settings))


# -- settings ---------------------------------------------------------------------------------------------------------


def test_document_settings_default_and_refuse_with_the_valid_values():
    config = PooledConfig(document_window=64)
    assert (config.document_stride, config.document_pooling) == (8, "first_plus_rest")
    assert PooledConfig(document_window=64, document_pooling="transformer").document_transformer_layers == 2
    assert PooledConfig().document_pooling is None  # off: nothing filled in
    refusals = {
        "document_stride=8 is a setting of document mode, which is off: set document_window": {
            "document_stride": 8
        },
        r"document_stride=16 must be an integer from 0 to 15": {"document_window": 16, "document_stride": 16},
        r"Unknown document_pooling 'sum'. Valid choices: attention, first_plus_rest, max, mean, transformer": {
            "document_window": 16,
            "document_pooling": "sum",
        },
        "document_transformer_layers=1 does not apply to document_pooling='max'": {
            "document_window": 16,
            "document_pooling": "max",
            "document_transformer_layers": 1,
        },
        r"document_window must be an integer >= 2": {"document_window": 1},
    }
    for message, settings in refusals.items():
        with pytest.raises(Exception, match=message):
            PooledConfig(**settings)


def test_a_window_past_the_backbones_positions_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match=r"document_window=65 is more tokens .* valid values are 2 to 64"):
        tiny_model("mean", document_window=65)
    # label tokens take positions in every window
    with pytest.raises(ValueError, match=r"less the 3 label tokens .* valid values are 2 to 61"):
        tiny_model("label_tokens", label_token_init="random", document_window=62)
    tiny_model("label_tokens", label_token_init="random", document_window=61)
    with pytest.raises(
        ValueError, match=r"document_transformer_heads=5 must divide .* \(32\); valid choices up to 8"
    ):
        tiny_model("mean", document_window=12, document_pooling="transformer", document_transformer_heads=5)


def test_settings_survive_save_reload_edits_and_overrides(tmp_path):
    model = document_model(document_pooling="transformer", document_window=16, document_stride=3)
    model.save_pretrained(tmp_path)
    reloaded = PooledForSequenceClassification.from_pretrained(tmp_path).eval()
    assert (reloaded.config.document_window, reloaded.config.document_stride) == (16, 3)
    assert reloaded.config.reads_documents and not tiny_model("mean").config.reads_documents
    batch = document_batch(random_documents([3, 1]), PAD_ID)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits, atol=1e-6, rtol=1e-6)
    # another cross-window pooling: its own settings filled, the transformer's dropped
    switched = PooledForSequenceClassification.from_pretrained(tmp_path, document_pooling="max")
    assert switched.config.document_transformer_layers is None
    assert type(switched.document_pooler.across).__name__ == "MaxWindowPooler"
    # document mode off: every document setting dropped, the model reads rows again
    off = PooledForSequenceClassification.from_pretrained(tmp_path, document_window=None)
    assert (off.config.document_stride, off.config.document_pooling) == (None, None)
    assert not off.config.reads_documents
    with pytest.raises(ValueError, match="document_windows was given, but this model has no document mode"):
        off(**batch)
    # the window and stride only cut texts: an edit takes effect; the pooling chose modules: refused after building
    reloaded.config.document_window = 20
    reloaded(**batch)
    reloaded.config.document_pooling = "mean"
    with pytest.raises(ValueError, match="document_pooling='mean' \\(built with 'transformer'\\)"):
        reloaded(**batch)


def test_token_and_multi_task_models_refuse_document_mode():
    config = PooledConfig(
        backbone_config=tiny_model().config.backbone_config, document_window=16, num_labels=3
    )
    with pytest.raises(ValueError, match="document_window=16: .*token classifier .* has no document mode"):
        PooledForTokenClassification(config)
    with pytest.raises(
        ValueError, match="'document_window' is a setting of document mode, which a multi-task model"
    ):
        tiny_multitask_model(tasks={"topic": {"kind": "sequence", "num_labels": 2, "document_window": 16}})
    assert not tiny_multitask_model(
        tasks={"topic": {"kind": "sequence", "num_labels": 2}}
    ).config.reads_documents


# -- the cross-window poolers' maths, on plain tensors ------------------------------------------------------------------


def padded_windows(seed: int = 0, counts=(3, 1, 2), width: int = 8):
    generator = torch.Generator().manual_seed(seed)
    vectors = torch.randn(len(counts), max(counts), width, generator=generator)
    mask = torch.arange(max(counts)).unsqueeze(0) < torch.tensor(counts).unsqueeze(1)
    # padded windows hold large values: a pooler that reads them fails the checks below
    return vectors.masked_fill(~mask.unsqueeze(-1), 50.0), mask, counts


def reference_attention(pooler: AttentionWindowPooler, windows: torch.Tensor) -> torch.Tensor:
    first, _, second = pooler.scorer
    scores = torch.tanh(windows @ first.weight.T + first.bias) @ second.weight.T + second.bias  # [n, 1]
    return (scores.softmax(dim=0) * windows).sum(dim=0)


def reference_transformer(pooler: TransformerWindowPooler, windows: torch.Tensor) -> torch.Tensor:
    """One document's real windows, through the layers written out by hand (no mask: nothing to hide)."""
    count, width = windows.shape
    angles = torch.arange(count).unsqueeze(1) / 10000 ** (torch.arange(0, width, 2) / width)
    table = torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(count, width)
    states = windows + pooler.position_scale * (table - table[0])
    for layer in pooler.layers:
        heads = layer.heads
        normed = F.layer_norm(states, (width,), layer.attention_norm.weight, layer.attention_norm.bias)
        query, key, value = (normed @ layer.qkv.weight.T + layer.qkv.bias).split(width, dim=-1)
        outputs = []
        for head in range(heads):
            part = slice(head * width // heads, (head + 1) * width // heads)
            weights = (query[:, part] @ key[:, part].T / math.sqrt(width // heads)).softmax(dim=-1)
            outputs.append(weights @ value[:, part])
        states = (
            states
            + torch.cat(outputs, dim=-1) @ layer.attention_output.weight.T
            + layer.attention_output.bias
        )
        normed = F.layer_norm(states, (width,), layer.feed_forward_norm.weight, layer.feed_forward_norm.bias)
        hidden = F.gelu(normed @ layer.feed_forward.weight.T + layer.feed_forward.bias)
        states = states + hidden @ layer.feed_forward_output.weight.T + layer.feed_forward_output.bias
    return states.max(dim=0).values


@pytest.mark.parametrize("name", DOCUMENT_POOLINGS)
def test_cross_window_poolers_match_an_independent_computation_over_the_real_windows(name):
    config = PooledConfig(document_window=16, document_pooling=name, classifier_dropout=0.0)
    torch.manual_seed(0)
    pooler = WINDOW_POOLINGS[name](config, 8).eval()
    with torch.no_grad():
        for parameter in pooler.parameters():  # off the transformer's identity start
            parameter.add_(0.3 * torch.randn_like(parameter))
    vectors, mask, counts = padded_windows()
    references = {
        "mean": lambda windows: windows.mean(dim=0),
        "max": lambda windows: windows.max(dim=0).values,
        "attention": lambda windows: reference_attention(pooler, windows),
        "transformer": lambda windows: reference_transformer(pooler, windows),
        "first_plus_rest": lambda windows: (
            windows[0] + pooler.gate * (reference_attention(pooler, windows[1:]) if len(windows) > 1 else 0)
        ),
    }
    with torch.no_grad():
        pooled = pooler(vectors, mask)
        for document, count in enumerate(counts):
            expected = references[name](vectors[document, :count])
            torch.testing.assert_close(pooled[document], expected, atol=1e-5, rtol=1e-5)
    # control: reading the padded windows as real gives other vectors
    with torch.no_grad():
        assert not torch.allclose(pooler(vectors, torch.ones_like(mask))[1], pooled[1], atol=1e-3)


def test_max_over_windows_ignores_padded_windows_when_every_value_is_negative():
    vectors, mask, _ = padded_windows()
    vectors = -vectors.abs() - 1  # every real value negative, and the padding (50) too: masked, not zeroed
    vectors = vectors.masked_fill(~mask.unsqueeze(-1), 0.0)
    pooled = WINDOW_POOLINGS["max"](PooledConfig(document_window=16), 8)(vectors, mask)
    assert (pooled < 0).all()
    torch.testing.assert_close(pooled[1], vectors[1, 0])


def test_label_vectors_are_pooled_across_windows_label_by_label():
    vectors, mask, counts = padded_windows(width=8)
    per_label = torch.stack([vectors, -vectors], dim=2)  # [documents, windows, 2 labels, width]
    pooled = WINDOW_POOLINGS["max"](PooledConfig(document_window=16), 8)(per_label, mask)
    for document, count in enumerate(counts):
        torch.testing.assert_close(pooled[document, 0], vectors[document, :count].max(dim=0).values)
        torch.testing.assert_close(pooled[document, 1], (-vectors[document, :count]).max(dim=0).values)


def test_window_positions_start_at_zero_and_differ_after():
    table = sinusoidal_positions(5, 6, "cpu", torch.float32)
    assert torch.equal(table[0], torch.zeros(6))
    assert all(not torch.allclose(table[i], table[j]) for i in range(5) for j in range(i))


# -- a document's scores do not depend on its batch ---------------------------------------------------------------------


@pytest.mark.parametrize("document_pooling", DOCUMENT_POOLINGS)
def test_a_documents_scores_do_not_depend_on_order_batch_mates_padding_or_padded_windows(document_pooling):
    model = document_model(document_pooling=document_pooling)
    documents = random_documents([3, 1, 4, 2], seed=1)
    with torch.no_grad():
        alone = model(**document_batch(documents[:1], PAD_ID)).logits[0]  # batch size 1
        batched = model(**document_batch(documents, PAD_ID)).logits
        reordered = model(**document_batch(documents[::-1], PAD_ID)).logits
        left = model(**document_batch(documents, PAD_ID, padding_side="left", pad_to_multiple_of=16)).logits
    torch.testing.assert_close(
        batched[0], alone, atol=1e-5, rtol=1e-5
    )  # mates with more windows: padded layout
    torch.testing.assert_close(reordered.flip(0), batched, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(left, batched, atol=1e-5, rtol=1e-5)
    # control: a document's windows in another order (the transformer reads positions) or one window fewer differ
    shorter = {"input_ids": documents[0]["input_ids"][:-1]}
    with torch.no_grad():
        assert not torch.allclose(model(**document_batch([shorter], PAD_ID)).logits[0], alone, atol=1e-4)


@pytest.mark.parametrize("document_pooling", DOCUMENT_POOLINGS)
def test_a_text_in_one_window_gets_the_scores_of_the_model_without_document_mode(document_pooling, tmp_path):
    model = tiny_model(
        "attention", document_window=12, document_pooling=document_pooling
    )  # as built: its start
    model.save_pretrained(tmp_path)
    plain = PooledForSequenceClassification.from_pretrained(tmp_path, document_window=None).eval()
    documents = random_documents([1, 1, 1], seed=2)
    rows = document_batch(documents, PAD_ID)
    with torch.no_grad():
        expected = plain(input_ids=rows["input_ids"], attention_mask=rows["attention_mask"]).logits
        torch.testing.assert_close(model(**rows).logits, expected, atol=1e-6, rtol=1e-6)
        # without a layout every row is a one-window document
        torch.testing.assert_close(
            model(rows["input_ids"], rows["attention_mask"]).logits, expected, atol=1e-6, rtol=1e-6
        )
    if document_pooling != "transformer":  # the same after training: pooling one vector is that vector
        # (first_plus_rest: a one-window document has no rest to add); a trained transformer transforms it
        perturbed(model)
        with torch.no_grad():
            torch.testing.assert_close(model(**rows).logits, expected, atol=1e-6, rtol=1e-6)


def test_first_plus_rest_starts_as_the_model_reading_the_first_window_and_learns_from_the_rest():
    model = tiny_model("attention", document_window=12, document_pooling="first_plus_rest")  # as built
    documents = random_documents([4, 2, 1], seed=5)
    firsts = [{"input_ids": document["input_ids"][:1]} for document in documents]
    with torch.no_grad():
        whole = model(**document_batch(documents, PAD_ID)).logits
        torch.testing.assert_close(
            whole, model(**document_batch(firsts, PAD_ID)).logits, atol=1e-6, rtol=1e-6
        )
    # the gate takes a gradient at zero, so training can open it; then the rest of a document counts
    labels = torch.tensor([1, 0, 1])
    model(**document_batch(documents, PAD_ID), labels=labels).loss.backward()
    assert model.document_pooler.across.gate.grad.abs().sum() > 0
    perturbed(model)
    with torch.no_grad():
        opened = model(**document_batch(documents, PAD_ID)).logits
    assert not torch.allclose(opened[:2], model(**document_batch(firsts[:2], PAD_ID)).logits, atol=1e-4)


def test_a_classifier_put_into_document_mode_keeps_its_first_window_scores_until_trained(tmp_path):
    tiny_model("attention").save_pretrained(tmp_path)  # no document mode: no gate in the checkpoint
    model = PooledForSequenceClassification.from_pretrained(tmp_path, document_window=12).eval()
    assert model.config.document_pooling == "first_plus_rest"  # the default
    documents = random_documents([4, 2], seed=6)
    firsts = [{"input_ids": document["input_ids"][:1]} for document in documents]
    with torch.no_grad():
        whole = model(**document_batch(documents, PAD_ID)).logits
        torch.testing.assert_close(
            whole, model(**document_batch(firsts, PAD_ID)).logits, atol=1e-6, rtol=1e-6
        )
        # control: the mean across windows, loaded the same way, reads the rest at once
        mean = PooledForSequenceClassification.from_pretrained(
            tmp_path, document_window=12, document_pooling="mean"
        ).eval()
        assert not torch.allclose(mean(**document_batch(documents, PAD_ID)).logits, whole, atol=1e-4)


@pytest.mark.parametrize("backbone", ["roberta", "modernbert"])
def test_positions_restart_in_every_window(backbone):
    model = tiny_model(
        "mean", backbone=backbone, model_class=PooledModel, document_window=12, document_pooling="mean"
    )
    documents = random_documents([3], seed=4)
    batch = document_batch(documents, PAD_ID, padding_side="left")
    with torch.no_grad():
        document = model(**batch).pooler_output[0]
        each = [model.embed(torch.tensor([window])) for window in documents[0]["input_ids"]]
        torch.testing.assert_close(document, torch.cat(each).mean(dim=0), atol=1e-5, rtol=1e-5)
        # control: the windows read as one sequence (attention across them, positions running on) give another vector
        joined = torch.tensor([[token for window in documents[0]["input_ids"] for token in window]])
        states = model(joined).last_hidden_state[0]
        bounds = torch.tensor([0] + [len(window) for window in documents[0]["input_ids"]]).cumsum(0).tolist()
        read_together = torch.stack(
            [states[start:stop].mean(dim=0) for start, stop in zip(bounds[:-1], bounds[1:], strict=True)]
        )
    assert not torch.allclose(read_together.mean(dim=0), document, atol=1e-4)


@pytest.mark.parametrize("pooling", ["label_tokens", "label_text"])
def test_label_poolings_read_documents_too(pooling):
    settings = {"label_token_init": "random"} if pooling == "label_tokens" else {}
    model = document_model(pooling, document_pooling="attention", **settings)
    documents = random_documents([2, 3], seed=5)
    with torch.no_grad():
        batched = model(**document_batch(documents, PAD_ID)).logits
        alone = model(**document_batch(documents[:1], PAD_ID)).logits
        embedded = model.embed(**document_batch(documents, PAD_ID))
    assert batched.shape == (2, 3) and embedded.shape == (2, 3, 32)
    torch.testing.assert_close(batched[0], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("problem_type", "labels"),
    [
        ("single_label_classification", torch.tensor([2, 0])),
        ("multi_label_classification", torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])),
        ("regression", torch.tensor([0.5, -1.0])),
    ],
)
def test_one_loss_per_document_for_every_problem_type(problem_type, labels):
    num_labels = 1 if problem_type == "regression" else 3
    model = document_model(problem_type=problem_type, num_labels=num_labels)
    batch = document_batch(random_documents([3, 2], seed=6), PAD_ID)
    output = model(**batch, labels=labels)
    assert output.logits.shape == (2, num_labels)
    losses = {
        "single_label_classification": lambda: F.cross_entropy(output.logits, labels),
        "multi_label_classification": lambda: F.binary_cross_entropy_with_logits(output.logits, labels),
        "regression": lambda: F.mse_loss(output.logits.squeeze(-1), labels),
    }
    torch.testing.assert_close(output.loss, losses[problem_type]())


# -- bad input ----------------------------------------------------------------------------------------------------------


def test_a_bad_document_layout_is_refused_with_what_is_wrong():
    model = document_model()
    batch = document_batch(random_documents([2, 1]), PAD_ID)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    layouts = {
        "indices must be -1 or a row of the batch's 3 windows": [[0, 1], [3, -1]],
        "each of the batch's 3 windows must belong to exactly one document": [[0, 1], [1, -1]],
        "every document needs at least one window": [[0, 1], [-1, -1]],
        "a document's -1 entries must come after its windows": [[0, 1], [-1, 2]],
    }
    for message, layout in layouts.items():
        with pytest.raises(ValueError, match=message):
            model(input_ids=ids, attention_mask=mask, document_windows=torch.tensor(layout))
    with pytest.raises(ValueError, match="must be an integer tensor"):
        model(input_ids=ids, attention_mask=mask, document_windows=torch.tensor([[0.0, 1.0, 2.0]]))


def test_document_windows_from_a_window_to_document_index():
    assert document_windows_from([0, 0, 1, 2, 2, 2]).tolist() == [[0, 1, -1], [2, -1, -1], [3, 4, 5]]
    with pytest.raises(ValueError, match="number the documents from 0 in order"):
        document_windows_from([0, 2, 1])


def test_packed_windows_give_the_padded_batchs_scores():
    padded = document_model(document_pooling="attention")
    packed = document_model(document_pooling="attention", packed_batches=True)
    batch = document_batch(random_documents([3, 1, 2], seed=8), PAD_ID)
    with torch.no_grad():
        torch.testing.assert_close(packed(**batch).logits, padded(**batch).logits, atol=1e-5, rtol=1e-5)
