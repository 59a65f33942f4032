"""pooling="label_tokens": one learned token per label in the input, each label scored from its own token."""

import json

import pytest
import torch
from helpers import (
    assert_padding_and_batching_invariant,
    random_batch,
    repad,
    run_without_package,
    tiny_backbone_config,
    tiny_model,
)
from transformers import AutoModel, AutoTokenizer, BertModel, pipeline

from pooled_models import PooledConfig, PooledForSequenceClassification, PooledModel
from pooled_models.modeling.label_tokens import _Layout

ENCODERS = ["bert", "roberta", "esm", "esm_absolute", "distilbert", "deberta-v2", "modernbert"]
DECODERS = ["gpt2", "llama"]  # causal: the labels go after the text, where they can see it


def label_model(backbone="bert", num_labels=5, **settings):
    settings.setdefault("label_token_init", "vocab_mean")
    if backbone in DECODERS:
        settings.setdefault("label_token_position", -1)
    return tiny_model("label_tokens", backbone=backbone, num_labels=num_labels, **settings)


@pytest.mark.parametrize("backbone", ENCODERS + DECODERS)
def test_shapes_losses_gradients_and_reload(backbone, tmp_path):
    model = label_model(backbone).train()
    batch = random_batch([6, 3, 9])
    single = model(**batch, labels=torch.tensor([0, 4, 2]))
    assert single.logits.shape == (3, 5) and torch.isfinite(single.loss)
    single.loss.backward()
    missing = [name for name, param in model.named_parameters() if param.requires_grad and param.grad is None]
    assert not missing, f"parameters without a gradient: {missing}"
    assert model.pooler.label_embeddings.weight.grad.abs().sum() > 0

    multi = label_model(backbone, problem_type="multi_label_classification")
    out = multi(**batch, labels=torch.tensor([[1, 0, 0, 1, 0], [0] * 5, [1] * 5]))
    assert torch.isfinite(out.loss)

    model.eval().save_pretrained(tmp_path)
    reloaded = PooledForSequenceClassification.from_pretrained(tmp_path).eval()
    assert torch.equal(reloaded.pooler.label_embeddings.weight, model.pooler.label_embeddings.weight)
    assert torch.equal(reloaded(**batch).logits, model(**batch).logits)


@pytest.mark.parametrize("backbone", ENCODERS + DECODERS)
def test_padding_and_batching_invariance(backbone):
    assert_padding_and_batching_invariant(label_model(backbone))


def test_batch_size_one_and_one_label_multi_label():
    model = label_model(num_labels=1, problem_type="multi_label_classification")
    out = model(**random_batch([4]), labels=torch.tensor([[1.0]]))
    assert out.logits.shape == (1, 1)
    torch.testing.assert_close(
        out.loss, torch.nn.functional.binary_cross_entropy_with_logits(out.logits, torch.ones(1, 1))
    )


@pytest.mark.parametrize("scorer", ["per_label", "shared"])
def test_scorers(scorer):
    model = label_model(label_token_scorer=scorer)
    head = model.classifier.head
    assert head.weight.shape == ((5, 32) if scorer == "per_label" else (1, 32))
    batch = random_batch([4, 6])
    states = model.embed(**batch)
    assert states.shape == (2, 5, 32)
    expected = (states * head.weight).sum(-1) + head.bias
    torch.testing.assert_close(model(**batch).logits, expected)


def test_dense_head_before_the_scorer():
    model = label_model(classifier_head="dense", classifier_hidden_size=16)
    assert model.classifier.head.dense.out_features == 16 and model.classifier.head.weight.shape == (5, 16)
    assert model(**random_batch([4])).logits.shape == (1, 5)


def test_the_tokenizer_and_vocabulary_stay_unchanged(tiny_backbone_path, tmp_path):
    # The label tokens are vectors of the pooler, not tokens added to the tokenizer: building, running and saving a
    # label-token model leave the tokenizer's vocabulary and the embedding table as they were.
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_path)
    vocabulary, table_size = tokenizer.get_vocab(), len(tokenizer)
    model = PooledForSequenceClassification.from_backbone(
        tiny_backbone_path,
        pooling="label_tokens",
        id2label={0: "sport", 1: "food", 2: "music"},
        tokenizer=tokenizer,
    )
    batch = tokenizer(["a match tonight", "pasta"], padding=True, return_tensors="pt")
    assert model(**batch).logits.shape == (2, 3)
    assert tokenizer.get_vocab() == vocabulary and len(tokenizer) == table_size
    assert model.get_input_embeddings().weight.shape[0] == table_size == model.config.vocab_size
    assert "label_embeddings.weight" in dict(model.pooler.named_parameters())
    # Each label started from its own name's tokens, which the unchanged tokenizer still gives.
    for label, name in model.config.id2label.items():
        assert (
            model.config.label_token_init_ids[label] == tokenizer(name, add_special_tokens=False)["input_ids"]
        )
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path).get_vocab() == vocabulary


# ----------------------------------------------------------------------------------------------------
# Where the label tokens go
# ----------------------------------------------------------------------------------------------------


class FakePooler:
    def __init__(self, num_labels, per_pass, position):
        self.num_labels, self.per_pass, self.position = num_labels, per_pass, position
        self.num_passes = -(-num_labels // per_pass)


def extend(ids, mask, pooler, budget=None):
    layout = _Layout.build(mask, pooler, budget)
    extended = layout.extend_inputs(
        {"input_ids": ids, "attention_mask": mask}, pad_token_id=0, vocabulary=1000
    )
    return extended["input_ids"], extended["attention_mask"], layout.label_index


def test_labels_go_right_after_the_first_special_token_under_either_padding():
    right = torch.tensor([[101, 7, 8, 102, 0, 0]]), torch.tensor([[1, 1, 1, 1, 0, 0]])
    left = torch.tensor([[0, 0, 101, 7, 8, 102]]), torch.tensor([[0, 0, 1, 1, 1, 1]])
    for ids, mask in (right, left):
        new_ids, new_mask, label_index = extend(ids, mask, FakePooler(3, 3, 1))
        # The batch's width plus the label slots, whatever the padding (a width from the shapes, as export needs).
        assert new_mask.tolist() == [[1] * 7 + [0] * 2]
        assert label_index.tolist() == [[-1, 0, 1, 2, -1, -1, -1, -1, -1]]
        assert new_ids[0, [0, 4, 5, 6]].tolist() == [101, 7, 8, 102]
        assert new_ids[0, [1, 2, 3]].tolist() == [1000, 1001, 1002]  # markers: vocabulary + label


def test_labels_at_the_start_or_after_the_text():
    ids, mask = torch.tensor([[5, 6, 7]]), torch.ones(1, 3, dtype=torch.long)
    assert extend(ids, mask, FakePooler(2, 2, 0))[2].tolist() == [[0, 1, -1, -1, -1]]
    assert extend(ids, mask, FakePooler(2, 2, -1))[2].tolist() == [[-1, -1, -1, 0, 1]]


def test_labels_are_split_into_passes_and_long_texts_truncated_keeping_their_last_token():
    ids = torch.tensor([[101, 11, 12, 13, 14, 15, 102]])
    mask = torch.ones_like(ids)
    new_ids, new_mask, label_index = extend(ids, mask, FakePooler(5, 2, 1), budget=6)
    # 3 passes of 2 label slots; 6 positions leave 4 for the text: [CLS] 11 12 ... [SEP]
    assert label_index.tolist() == [[-1, 0, 1, -1, -1, -1], [-1, 2, 3, -1, -1, -1], [-1, 4, -1, -1, -1, -1]]
    assert new_ids[:, [0, 3, 4, 5]].tolist() == [[101, 11, 12, 102]] * 3
    assert new_mask.tolist()[2] == [1, 1, 0, 1, 1, 1]  # the last pass has one label slot to spare


def test_two_hundred_labels_with_64_positions_train_and_predict():
    model = PooledForSequenceClassification(
        PooledConfig(
            backbone_config=tiny_backbone_config("bert"),
            pooling="label_tokens",
            num_labels=200,
            label_token_init="vocab_mean",
            problem_type="multi_label_classification",
        )
    ).train()
    assert model.config.label_tokens_per_pass == 32  # half of the 64 positions
    batch = random_batch([60, 20, 5])  # the 60-token text is truncated to the 32 positions left
    labels = (torch.rand(3, 200) < 0.05).float()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with torch.no_grad():  # both losses in eval mode: dropout alone must not make the second one lower
        before = model.eval()(**batch, labels=labels).loss
    model.train()(**batch, labels=labels).loss.backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        after = model(**batch, labels=labels)
    assert after.logits.shape == (3, 200) and torch.isfinite(after.logits).all()
    assert after.loss < before
    alone = model(**repad(batch, 1, 20, "right")).logits[0]
    torch.testing.assert_close(after.logits[1], alone, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------------
# Initialisation
# ----------------------------------------------------------------------------------------------------


def word_embeddings(model):
    return model.get_input_embeddings().weight.detach()


def test_vocab_mean_init():
    model = label_model(label_token_init="vocab_mean")
    expected = word_embeddings(model).mean(0).expand(5, -1)
    torch.testing.assert_close(model.pooler.label_embeddings.weight.detach(), expected)


def test_cls_init_from_the_backbone_config():
    model = label_model("roberta", label_token_init="cls")  # RobertaConfig has bos_token_id 0
    assert model.config.label_token_init_ids == [[0]] * 5
    expected = word_embeddings(model)[0].expand(5, -1)
    torch.testing.assert_close(model.pooler.label_embeddings.weight.detach(), expected)


def test_random_init():
    model = label_model(label_token_init="random", num_labels=50)
    embeddings = model.pooler.label_embeddings.weight.detach()
    assert abs(embeddings.std().item() - model.config.initializer_range) < 0.005
    assert abs(embeddings.mean().item()) < 0.005


def test_label_text_init_from_given_ids():
    model = label_model(num_labels=2, label_token_init="label_text", label_token_init_ids=[[7], [8, 9]])
    table = word_embeddings(model)
    torch.testing.assert_close(
        model.pooler.label_embeddings.weight.detach(), torch.stack([table[7], table[8:10].mean(0)])
    )


def test_minilm_label_text_and_cls_init(minilm_path, minilm_tokenizer):
    names = {0: "sports", 1: "science fiction", 2: "politics"}
    model = PooledForSequenceClassification.from_backbone(minilm_path, pooling="label_tokens", id2label=names)
    table = word_embeddings(model)
    ids = {name: minilm_tokenizer(name, add_special_tokens=False)["input_ids"] for name in names.values()}
    assert len(ids["sports"]) == 1 and len(ids["science fiction"]) == 2
    expected = torch.stack([table[ids[name]].mean(0) for name in names.values()])
    torch.testing.assert_close(model.pooler.label_embeddings.weight.detach(), expected)
    assert model.config.label_token_position == 1  # BERT's tokenizer starts with [CLS]

    cls_model = PooledForSequenceClassification.from_backbone(
        minilm_path, pooling="label_tokens", id2label=names, label_token_init="cls"
    )
    cls_row = table[minilm_tokenizer.cls_token_id]
    torch.testing.assert_close(cls_model.pooler.label_embeddings.weight.detach(), cls_row.expand(3, -1))


# ----------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"label_token_init": "label_text", "label_token_init_ids": [[1]]},
            r"one list of token ids per label \(5\), got 1",
        ),
        (
            {"label_token_init": "label_text", "label_token_init_ids": [[1], [2], [], [3], [4]]},
            r"label_token_init_ids\[2\] = \[\]",
        ),
        (
            {"label_token_init_ids": [[1]] * 5},
            r"label_token_init_ids=.* does not apply to pooling='label_tokens'; it is a setting of "
            r"pooling='label_tokens', label_token_init='label_text', label_token_init='cls'\.",
        ),
        ({"label_tokens_per_pass": 6}, r"label_tokens_per_pass must be an integer in \[1, num_labels=5\]"),
        ({"label_token_position": -2}, r"label_token_position must be an integer >= 0"),
        ({"position_ids_from_mask": False}, r"needs position_ids_from_mask=True"),
    ],
)
def test_bad_label_token_settings(settings, message):
    settings.setdefault("label_token_init", "vocab_mean")
    with pytest.raises(ValueError, match=message):
        PooledConfig(
            backbone_config=tiny_backbone_config("bert"), pooling="label_tokens", num_labels=5, **settings
        )


def test_labels_that_leave_no_room_for_the_text():
    with pytest.raises(ValueError, match=r"label_tokens_per_pass=63 leaves 1 of the backbone's 64 positions"):
        label_model(num_labels=63, label_tokens_per_pass=63)


def test_a_backbone_without_input_embeddings_is_named():
    config = PooledConfig(
        backbone_config=tiny_backbone_config("bert"),
        pooling="label_tokens",
        num_labels=3,
        label_token_init="random",
    )
    backbone = BertModel(config.backbone_config, add_pooling_layer=False)

    def no_embeddings():
        raise NotImplementedError

    backbone.get_input_embeddings = no_embeddings
    with pytest.raises(
        ValueError, match=r"BertModel has no input embedding table.*Poolings that work with BertModel: .*mean"
    ):
        PooledForSequenceClassification(config, backbone=backbone)
    # Only label tokens need the table: another pooling builds and runs on the same backbone.
    config = PooledConfig(backbone_config=config.backbone_config, pooling="attention", num_labels=3)
    model = PooledForSequenceClassification(config, backbone=backbone).eval()
    assert model(**random_batch([4, 2])).logits.shape == (2, 3)


# ----------------------------------------------------------------------------------------------------
# Loading without the package, pipeline, the real MiniLM
# ----------------------------------------------------------------------------------------------------


@pytest.mark.slow  # a fresh interpreter without the package
def test_trust_remote_code_load_without_the_package(tmp_path):
    model = label_model(problem_type="multi_label_classification")
    model.save_pretrained(tmp_path / "model")
    batch = random_batch([5, 3])
    expected = model(**batch).logits
    script = f"""
        import json, torch
        from transformers import AutoModelForSequenceClassification
        model = AutoModelForSequenceClassification.from_pretrained({str(tmp_path / "model")!r}, trust_remote_code=True)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor({batch["input_ids"].tolist()}),
                           attention_mask=torch.tensor({batch["attention_mask"].tolist()})).logits
        print(json.dumps(logits.tolist()))
    """
    result = run_without_package(script, tmp_path)
    assert result.returncode == 0, result.stderr
    torch.testing.assert_close(torch.tensor(json.loads(result.stdout.strip().splitlines()[-1])), expected)


def test_real_minilm_learns_and_runs_in_a_pipeline(minilm_path, minilm_tokenizer, tmp_path):
    names = {0: "positive", 1: "negative", 2: "question"}
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(minilm_path, pooling="label_tokens", id2label=names)
    texts = ["I loved it", "what a great day", "this is awful", "I hated it", "is it open?", "where are you?"]
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    batch = minilm_tokenizer(texts, padding=True, return_tensors="pt")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model.train()
    losses = []
    for _ in range(8):
        loss = model(**batch, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]

    model.eval().save_pretrained(tmp_path)
    minilm_tokenizer.save_pretrained(tmp_path)
    assert type(AutoModel.from_pretrained(tmp_path)) is PooledModel
    predictions = pipeline("text-classification", model=str(tmp_path))(texts)
    assert [p["label"] for p in predictions] == [names[int(i)] for i in labels]
