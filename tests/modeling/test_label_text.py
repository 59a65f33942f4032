"""pooling="label_text": every label's text in the input, one-way (the text never reads the labels) and label by label
(a label never reads another label), scored by one shared scorer or one per label.

The references are the backbone itself (the text's states alone, each label's text alone) and the same model asked in
other ways (other groupings, other orders, labels given at call time), so every check could fail."""

import pytest
import torch
from helpers import assert_padding_and_batching_invariant, random_batch, tiny_backbone_config
from huggingface_hub.errors import StrictDataclassFieldValidationError

from pooled_models import PooledConfig, PooledForSequenceClassification, PooledModel
from pooled_models.modeling.label_text import pad_label_ids
from pooled_models.modeling.label_text_layout import (
    LabelSegments,
    group_segments,
    joined_attention,
    split_joined,
)
from pooled_models.modeling.label_text_margin import DEFAULT_SEEN_MARGIN

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Label texts as a BERT tokenizer gives them: [CLS]=1 first (the marker's slot), [SEP]=2 last.
LABEL_IDS = [[1, 10, 11, 2], [1, 12, 2], [1, 13, 14, 15, 2], [1, 16, 2]]


def text_model(family="bert", layers=1, scorer="shared", seed=0, model_class=None, **settings):
    torch.manual_seed(seed)
    settings.setdefault("label_text_ids", [list(ids) for ids in LABEL_IDS])
    config = PooledConfig(
        backbone_config=tiny_backbone_config(family),
        pooling="label_text",
        num_labels=len(settings["label_text_ids"] or LABEL_IDS),
        label_text_layers=layers,
        label_text_scorer=scorer,
        **settings,
    )
    return (model_class or PooledForSequenceClassification)(config).eval()


def call_labels(rows):
    ids, mask = pad_label_ids(rows)
    return {"label_input_ids": ids, "label_attention_mask": mask}


# -- the layout's maths, on plain tensors ------------------------------------------------------------------


def test_grouping_and_splitting_give_back_every_label_and_the_text():
    ids, mask = pad_label_ids(LABEL_IDS)
    segments = LabelSegments(
        ids, mask, per_pass=3
    )  # two groups, the second holding one label and two empty ones
    assert (segments.num_groups, segments.length) == (2, 5)
    blocks = group_segments(ids, segments)
    assert blocks.shape == (2, 15) and blocks[1, 5:].eq(0).all()
    batch, text = 2, 6
    joined = torch.randn(batch * 2, text + 15, 3)
    text_states, label_states = split_joined(joined, text, segments, batch)
    assert torch.equal(text_states[1], joined[2, :text])  # text 1, from its first group
    assert torch.equal(
        label_states[1, 3], joined[3, text : text + 5]
    )  # text 1, label 3: group 1's first segment


def test_text_reads_only_text_and_a_label_only_the_text_and_itself():
    ids, mask = pad_label_ids(LABEL_IDS[:2])  # segments of 4 slots: [1 10 11 2] and [1 12 2 pad]
    segments = LabelSegments(ids, mask, per_pass=2)
    text_mask = torch.tensor([[1, 1, 0]])  # two real tokens, one padding
    allowed = joined_attention(text_mask, segments)[0, 0]  # [3 + 8, 3 + 8]
    text, first, second = [0, 1], [3, 4, 5, 6], [7, 8, 9]
    for query in text:
        assert allowed[query, text].all() and not allowed[query, 2] and not allowed[query, 3:].any()
    for own, other in ((first, second), (second, first)):
        for query in own:
            assert allowed[query, text].all() and allowed[query, own].all()
            assert not allowed[query, other].any() and not allowed[query, 2] and not allowed[query, 10]
    assert allowed.diagonal().all()  # padding slots attend to themselves: no empty softmax row


# -- what the model computes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["bert", "esm", "distilbert"])
@pytest.mark.parametrize("layers", [0, 1, "all"])
def test_the_text_keeps_its_own_states_and_each_label_reads_it(family, layers):
    # (label_text_layers=0 is the default: it runs on every backbone; the others run the layers one by one)
    model = text_model(family, layers)
    batch = random_batch([7, 4], seed=2)
    with torch.no_grad():
        outputs = model(**batch, output_hidden_states=True)
        alone = model.backbone(**batch).last_hidden_state
        real = batch["attention_mask"].bool()
        torch.testing.assert_close(outputs.hidden_states[-1][real], alone[real], atol=1e-5, rtol=1e-5)
        labels = model.embed(**batch)  # each label's vector for each text
    # The labels read the text from layer 1 on: two texts, two readings of every label; with 0 they never do.
    assert torch.allclose(labels[0], labels[1]) == (layers == 0)


@pytest.mark.parametrize("layers", [0, 2])
def test_a_label_scores_the_same_whatever_else_is_asked_and_however_labels_are_grouped(layers):
    model = text_model(layers=layers)
    batch = random_batch([6, 3, 8], seed=4)
    with torch.no_grad():
        together = model(**batch).logits
        order = [2, 0, 3, 1]
        shuffled = model(**batch, **call_labels([LABEL_IDS[i] for i in order])).logits
        torch.testing.assert_close(shuffled, together[:, order], atol=1e-5, rtol=1e-5)
        alone = torch.cat([model(**batch, **call_labels([ids])).logits for ids in LABEL_IDS], dim=1)
        torch.testing.assert_close(alone, together, atol=1e-5, rtol=1e-5)
    one_per_pass = text_model(layers=layers, label_tokens_per_pass=1)
    one_per_pass.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(one_per_pass(**batch).logits, together, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["bert", "esm"])
@pytest.mark.parametrize("scorer", ["shared", "per_label"])
def test_padding_and_batching_invariance(family, scorer):
    assert_padding_and_batching_invariant(
        text_model(family, layers=2, scorer=scorer, label_tokens_per_pass=3)
    )


def test_eager_and_sdpa_agree_and_a_text_without_tokens_stays_finite():
    model = text_model(layers=2, label_tokens_per_pass=3).train()
    batch = random_batch([7, 5, 3], seed=3)
    batch["attention_mask"][2] = 0
    out = model(**batch, labels=torch.tensor([0, 1, 3]))
    assert torch.isfinite(out.logits).all()
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert model.classifier.pooler.label_embeddings.weight.grad.abs().sum() > 0  # the marker learns
    model.eval()
    with torch.no_grad():
        sdpa = model(**batch).logits
        model.set_attn_implementation("eager")
        torch.testing.assert_close(model(**batch).logits, sdpa, atol=1e-5, rtol=1e-5)


def test_the_shared_scorer_is_the_scaled_cosine_and_scores_labels_given_at_call_time():
    model = text_model(layers=0)
    batch = random_batch([5, 6], seed=5)
    with torch.no_grad():
        pooled = model.classifier.pooler.encode(model._backbone_call(), dict(batch), False)[1]
        cosine = torch.nn.functional.cosine_similarity(pooled[:, :1], pooled[:, 1:], dim=-1)
        # the model's own labels less the seen-label margin every label-text model takes off them by default
        expected = 20 * (cosine - 0.3) - DEFAULT_SEEN_MARGIN
        torch.testing.assert_close(model(**batch).logits, expected, atol=1e-4, rtol=1e-5)
        # New labels, never seen: a vector of scores for them, and the model's own labels score as before.
        new = call_labels([[1, 40, 41, 2], [1, 50, 2], *LABEL_IDS])
        logits = model(**batch, **new).logits
    assert logits.shape == (2, 6)
    torch.testing.assert_close(logits[:, 2:], model(**batch).logits, atol=1e-5, rtol=1e-5)


def test_training_on_labels_given_at_call_time():
    model = text_model(layers=1).train()
    batch = random_batch([5, 6], seed=6)
    new = call_labels([[1, 40, 41, 2], [1, 50, 2]])
    loss = model(**batch, **new, labels=torch.tensor([1, 0])).loss
    loss.backward()
    assert torch.isfinite(loss) and model.classifier.head.log_scale.grad is not None
    multi = text_model(layers=1, problem_type="multi_label_classification").train()
    assert torch.isfinite(multi(**batch, **new, labels=torch.tensor([[1.0, 0.0], [1.0, 1.0]])).loss)


def test_the_per_label_scorer_starts_as_the_shared_one_and_refuses_labels_given_at_call_time():
    batch = random_batch([4, 7], seed=9)
    for layers in (0, 1):
        per_label = text_model(layers=layers, scorer="per_label")
        shared = text_model(layers=layers)
        with torch.no_grad():  # the same backbone, marker and similarity; the per-label terms start at zero
            torch.testing.assert_close(per_label(**batch).logits, shared(**batch).logits)
            per_label.classifier.head.bias[2] += 1.0
            difference = per_label(**batch).logits - shared(**batch).logits
        torch.testing.assert_close(difference, torch.tensor([[0.0, 0.0, 1.0, 0.0]] * 2))
    with pytest.raises(ValueError, match=r"scores the 4 labels the model was built with, not 2 labels"):
        per_label(**random_batch([4]), **call_labels(LABEL_IDS[:2]))


def test_the_encoder_gives_one_vector_per_label():
    model = text_model(layers=1, model_class=PooledModel)
    batch = random_batch([4, 6])
    with torch.no_grad():
        out = model(**batch)
        classifier = text_model(layers=1)
        torch.testing.assert_close(classifier.embed(**batch), out.pooler_output)
    assert out.pooler_output.shape == (2, len(LABEL_IDS), 32)


def test_marker_vectors_on_a_causal_decoder_are_all_alike_and_mean_ones_are_not():
    # docs/label-text.md: the marker comes first in its segment, and a causal decoder's first token attends to itself.
    batch = random_batch([4, 6])
    with torch.no_grad():
        marker = text_model("llama", layers=0, model_class=PooledModel, label_text_pooling="marker")(**batch)
        mean = text_model("llama", layers=0, model_class=PooledModel, label_text_pooling="mean")(**batch)
    labels = marker.pooler_output[0]
    torch.testing.assert_close(labels, labels[:1].expand_as(labels))
    assert (mean.pooler_output[0] - mean.pooler_output[0, :1]).abs().amax() > 1e-3


# -- settings, checks and refusals ------------------------------------------------------------------------


def test_bad_settings_name_the_setting_and_the_choices():
    # Closed choices are typed fields: refused as they are set, naming the choices.
    with pytest.raises(
        StrictDataclassFieldValidationError,
        match=r"field 'label_text_scorer'(.|\n)*expected one of \('per_label', 'shared'\)",
    ):
        text_model(scorer="both")
    with pytest.raises(
        StrictDataclassFieldValidationError,
        match=r"field 'label_text_pooling'(.|\n)*expected one of \('mean', 'marker'\)",
    ):
        text_model(label_text_pooling="first")
    with pytest.raises(
        ValueError, match=r"label_text_layers must be 'all' or an integer in \[0, num_hidden_layers=2"
    ):
        text_model(layers=3)
    with pytest.raises(ValueError, match=r"label_text_ids\[1\] = \[1, 500, 2\] must list .* in \[0, 119\]"):
        text_model(label_text_ids=[[1, 10, 2], [1, 500, 2], [1, 11, 2], [1, 12, 2]])
    with pytest.raises(ValueError, match=r"label_descriptions names labels the model does not have: 'bills'"):
        text_model(label_descriptions={"bills": "about invoices"})
    with pytest.raises(
        ValueError, match=r"label_text_layers=3 does not apply|does not apply to pooling='mean'"
    ):
        PooledConfig(backbone_config=tiny_backbone_config(), pooling="mean", label_text_layers=3)


def test_labels_given_at_call_time_are_checked():
    model = text_model(layers=0)
    batch = random_batch([4])
    with pytest.raises(ValueError, match=r"label_input_ids holds ids outside the vocabulary \[0, 119\]"):
        model(**batch, **call_labels([[1, 300, 2]]))
    left = {
        "label_input_ids": torch.tensor([[0, 1, 10, 2]]),
        "label_attention_mask": torch.tensor([[0, 1, 1, 1]]),
    }
    with pytest.raises(ValueError, match=r"must be right-padded"):
        model(**batch, **left)
    holed = {
        "label_input_ids": torch.tensor([[1, 10, 11, 2]]),
        "label_attention_mask": torch.tensor([[1, 0, 1, 1]]),
    }
    with pytest.raises(ValueError, match=r"no padding between its tokens"):
        model(**batch, **holed)
    with pytest.raises(ValueError, match=r"label_attention_mask must hold 0 \(padding\) and 1"):
        model(**batch, **{**holed, "label_attention_mask": torch.tensor([[2, 2, 2, 2]])})
    with pytest.raises(
        ValueError, match=r"label_input_ids must be a \[labels, length\] tensor .* pad the label texts"
    ):
        model(**batch, label_input_ids=[[1, 10, 2], [1, 12, 13, 2]])  # ragged lists
    with pytest.raises(ValueError, match=r"label_input_ids must hold integers, got torch.float32"):
        model(**batch, label_input_ids=torch.tensor([[1.0, 10.0, 2.0]]))
    with pytest.raises(ValueError, match=r"label_input_ids holds no token"):
        model(**batch, label_input_ids=torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(
        ValueError,
        match=r"label_input_ids, label_attention_mask: labels given as text at call time are read by ",
    ):
        from helpers import tiny_model

        tiny_model("mean")(**batch, **call_labels(LABEL_IDS))


def test_a_model_built_from_its_config_alone_runs_and_reads_labels_given_at_call_time():
    model = text_model(layers=1, label_text_ids=None)
    batch = random_batch([4, 6])
    with torch.no_grad():
        logits = model(**batch).logits  # every label is its marker alone: the same score for every label
        torch.testing.assert_close(logits, logits[:, :1].expand_as(logits))
        given = model(**batch, **call_labels(LABEL_IDS)).logits
    assert given.shape == (2, 4) and not torch.allclose(given, given[:, :1].expand_as(given))


def test_a_backbone_whose_layers_it_cannot_run_needs_label_text_layers_0():
    for family in ("deberta-v2", "modernbert"):
        config = PooledConfig(
            backbone_config=tiny_backbone_config(family),
            pooling="label_text",
            num_labels=2,
            label_text_ids=LABEL_IDS[:2],
            label_text_layers=1,
        )
        with pytest.raises(ValueError, match=r"Valid choice for this backbone: label_text_layers=0"):
            PooledForSequenceClassification(config)
        config.label_text_layers = 0
        model = PooledForSequenceClassification(config).eval()
        with torch.no_grad():
            assert torch.isfinite(model(**random_batch([5, 3])).logits).all()


def test_save_reload_overrides_and_an_edit_of_a_built_model(tmp_path):
    model = text_model(layers=2, label_descriptions={"LABEL_1": "the second label"})
    batch = random_batch([5, 8])
    model.save_pretrained(tmp_path)
    loaded = PooledForSequenceClassification.from_pretrained(tmp_path).eval()
    assert loaded.config.label_text_ids == LABEL_IDS and loaded.config.label_descriptions == {
        "LABEL_1": "the second label"
    }
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits)
    apart = PooledForSequenceClassification.from_pretrained(tmp_path, label_text_layers=0).eval()
    assert apart.classifier.pooler.top_layers == 0
    apart.config.label_text_pooling = "marker"
    with pytest.raises(ValueError, match=r"label_text_pooling='marker' \(built with 'mean'\)"):
        apart(**batch)


# -- the seams: a model built from a folder, re-headed, resized, trained with LoRA, in half precision ------------

NAMES = {0: "sport", 1: "food", 2: "music"}


@pytest.fixture(scope="module")
def folder(tiny_backbone_path, minilm_tokenizer, tmp_path_factory):
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        tiny_backbone_path, pooling="label_text", id2label=NAMES, label_text_layers=1
    )
    path = tmp_path_factory.mktemp("label_text")
    model.save_pretrained(path)
    minilm_tokenizer.save_pretrained(path)
    return str(path)


def test_new_labels_at_load_time_read_their_texts_from_the_folders_tokenizer(folder, minilm_tokenizer):
    names = {0: "travel", 1: "music", 2: "weather", 3: "garden"}
    model = PooledForSequenceClassification.from_pretrained(
        folder, id2label=names, ignore_mismatched_sizes=True
    )
    assert model.config.label_text_ids == [minilm_tokenizer(name)["input_ids"] for name in names.values()]
    with torch.no_grad():
        logits = model.eval()(**minilm_tokenizer(["a song"], return_tensors="pt")).logits
        original = PooledForSequenceClassification.from_pretrained(folder).eval()
        before = original(**minilm_tokenizer(["a song"], return_tensors="pt")).logits
    # The shared scorer has no per-label weights: "music" scores as it did under the old label set.
    torch.testing.assert_close(logits[0, 1], before[0, 2])


def test_resizing_keeps_the_scores_and_refuses_to_drop_a_labels_tokens(folder, minilm_tokenizer, tmp_path):
    model = PooledForSequenceClassification.from_pretrained(folder).eval()
    batch = minilm_tokenizer(["a song", "dinner"], padding=True, return_tensors="pt")
    with torch.no_grad():
        before = model(**batch).logits
    size = model.get_input_embeddings().num_embeddings
    model.resize_token_embeddings(size + 8)  # the marker's id moves with the vocabulary's end
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, before)
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(
            PooledForSequenceClassification.from_pretrained(tmp_path).eval()(**batch).logits, before
        )
    highest = max(token for label in model.config.label_text_ids for token in label)
    with pytest.raises(ValueError, match=rf"would drop token id {highest}, which the labels' texts hold"):
        model.resize_token_embeddings(highest)
    assert model.get_input_embeddings().num_embeddings == size + 8


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("layers", [0, 1])
def test_half_precision_stays_close_to_float32(folder, minilm_tokenizer, dtype, layers):
    batch = minilm_tokenizer(["a song about the sea", "dinner"], padding=True, return_tensors="pt")
    model = PooledForSequenceClassification.from_pretrained(folder, label_text_layers=layers).eval()
    with torch.no_grad():
        expected = model(**batch).logits
        half = model.to(dtype)(**batch).logits
    assert half.dtype == dtype and torch.isfinite(half).all()
    torch.testing.assert_close(half.float(), expected, atol=0.1, rtol=0.02)


def test_a_thousand_labels_train_in_passes_of_bounded_width():
    # 1,000 labels of generated text ([CLS], one or two tokens, [SEP]): every text is joined with groups of
    # label_tokens_per_pass labels, so no row the top layer attends over is wider than the text and one group, whatever
    # the number of labels. All 1,000 in one row would be about 3,500 slots (a 3,500 x 3,500 attention per head).
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 3, (1000,), generator=generator).tolist()
    texts = [[1, *torch.randint(5, 120, (length,), generator=generator).tolist(), 2] for length in lengths]
    model = text_model(layers=1, label_text_ids=texts).train()
    pooler = model.classifier.pooler
    slots = len(pooler.label_rows[0])  # every label's segment, padded to the longest: 4
    assert (
        pooler.per_pass * slots <= 32
    )  # the default: a pass's slots within half of the tiny backbone's positions
    widths = []
    layer = model.backbone.encoder.layer[-1]
    hook = layer.register_forward_pre_hook(lambda module, args: widths.append(args[0].shape[1]))
    batch = random_batch([9, 4], seed=8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(2):
        loss = model(**batch, labels=torch.tensor([3, 997])).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        assert torch.isfinite(loss)
    hook.remove()
    assert max(widths) == 9 + pooler.per_pass * slots


def test_encode_gives_every_labels_vector_or_one_labels(folder):
    model = PooledModel.from_pretrained(folder)
    texts = ["a song about the sea", "dinner"]
    vectors = model.encode(texts, convert_to_tensor=True)
    assert vectors.shape == (2, 3, 32)
    torch.testing.assert_close(model.encode(texts, convert_to_tensor=True, label="food"), vectors[:, 1])
