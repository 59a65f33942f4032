"""encode() and similarity(): texts in, pooled vectors out in input order, for every pooling and at the seams a
Transformers user hits (pairs, dtypes, padding side, batch size 1, empty texts, train mode, PEFT, remote code)."""

import json
import random

import pytest
import torch
from helpers import HIDDEN_STATE_POOLERS, run_without_package
from torch.nn import functional as F
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from pooled_models import PooledForSequenceClassification, PooledModel
from pooled_models.modeling import encoding
from pooled_models.modeling.encoding import SENTENCE_TRANSFORMERS_FILES, _sorted_batches, similarity

# Of several lengths, in no order of length, so that sorting and restoring the order is exercised.
TEXTS = [
    "A short one.",
    "This sentence is quite a bit longer than the one before it, with more words.",
    "Hi",
    "",  # nothing but the special tokens
    "Medium length text about pooling heads.",
    "Another fairly long sentence, to put two long ones into the same batch of texts.",
    "ok",
]
LABELS = {0: "sport", 1: "food", 2: "music"}


def one_by_one(model, tokenizer, texts, pairs=None) -> torch.Tensor:
    """Each text alone through the model's forward: what encode must reproduce, in order."""
    rows = []
    with torch.no_grad():
        for index, text in enumerate(texts):
            encoded = tokenizer(text, pairs[index] if pairs else None, return_tensors="pt")
            rows.append(model.embed(**encoded)[0])
    return torch.stack(rows).float()


def build(path, pooling="mean", model_class=PooledModel, **settings):
    torch.manual_seed(0)
    if pooling == "label_tokens":
        settings.setdefault("id2label", LABELS)
    return model_class.from_backbone(path, pooling=pooling, **settings).eval()


@pytest.fixture(scope="module")
def tokenizer(tiny_backbone_path):
    return AutoTokenizer.from_pretrained(tiny_backbone_path)


@pytest.mark.parametrize("pooling", [*HIDDEN_STATE_POOLERS, "label_tokens"])
def test_encode_gives_each_texts_own_vector_in_input_order(pooling, tiny_backbone_path, tokenizer):
    model = build(tiny_backbone_path, pooling)
    # batch_size 2: several batches, whose rows come back from length order to input order
    encoded = model.encode(TEXTS, batch_size=2)
    expected = one_by_one(model, tokenizer, TEXTS)
    assert encoded.dtype.name == "float32"
    assert encoded.shape == tuple(expected.shape)
    torch.testing.assert_close(torch.from_numpy(encoded), expected, atol=1e-5, rtol=1e-5)


def test_batch_size_does_not_change_the_vectors(tiny_backbone_path):
    model = build(tiny_backbone_path, "attention")
    texts = TEXTS * 5  # 35 texts: batches of many sizes under the token budget
    alone = model.encode(texts, batch_size=1)
    together = model.encode(texts, batch_size=32)
    torch.testing.assert_close(torch.from_numpy(together), torch.from_numpy(alone), atol=1e-5, rtol=1e-5)


def test_batches_hold_batch_size_texts_and_more_of_short_ones_within_the_token_budget():
    lengths = [40] * 8 + [10] * 30 + [5] * 20  # a few long texts, many short ones, in no order
    order = list(range(len(lengths)))
    random.Random(0).shuffle(order)
    block = {"input_ids": [[7] * lengths[row] for row in order]}
    batches = list(_sorted_batches(block, batch_size=4, pad_id=0))
    rows = [row for batch_rows, _ in batches for row in batch_rows]
    assert sorted(rows) == list(range(len(lengths)))  # every text once
    budget = 4 * sum(lengths) / len(lengths)
    for batch_rows, batch in batches:
        padded = batch["input_ids"].numel()
        assert padded <= 4 * 40  # never more than batch_size of the longest texts
        assert len(batch_rows) >= 4 or batch_rows == batches[-1][0]  # at least batch_size, but for the last
        assert len(batch_rows) == 4 or padded <= budget  # more texts only within the budget
        assert batch["attention_mask"].sum() == sum(len(block["input_ids"][row]) for row in batch_rows)
    assert max(len(batch_rows) for batch_rows, _ in batches) > 4  # short texts did share larger batches
    assert len(batches) < len(lengths) / 4  # so fewer passes than batches of 4


def test_a_single_text_gives_one_vector_and_no_text_an_empty_matrix(tiny_backbone_path):
    model = build(tiny_backbone_path, "mean_max")
    width = model.pooler.output_dim
    vector = model.encode("A short one.")
    assert vector.shape == (width,)
    torch.testing.assert_close(torch.from_numpy(vector), torch.from_numpy(model.encode(TEXTS)[0]))
    assert model.encode([]).shape == (0, width)


def test_a_text_of_special_tokens_only_gives_a_finite_vector(tiny_backbone_path, tokenizer):
    model = build(tiny_backbone_path, "max")
    assert tokenizer("")["input_ids"] == [tokenizer.cls_token_id, tokenizer.sep_token_id]
    vector = model.encode("")
    assert torch.isfinite(torch.from_numpy(vector)).all()
    torch.testing.assert_close(torch.from_numpy(vector), one_by_one(model, tokenizer, [""])[0])


def test_sentence_pairs_are_encoded_together(tiny_backbone_path, tokenizer):
    model = build(tiny_backbone_path, "mean")
    firsts, seconds = TEXTS[:3], TEXTS[4:]
    encoded = model.encode(list(zip(firsts, seconds, strict=True)), batch_size=3)
    torch.testing.assert_close(
        torch.from_numpy(encoded), one_by_one(model, tokenizer, firsts, seconds), atol=1e-5, rtol=1e-5
    )
    single_pair = model.encode((firsts[1], seconds[1]))
    torch.testing.assert_close(torch.from_numpy(single_pair), torch.from_numpy(encoded[1]))
    # A pair is not its first text: the second one and the token types count.
    assert not torch.allclose(torch.from_numpy(encoded[1]), torch.from_numpy(model.encode(firsts[1])))


def test_a_mix_of_texts_and_pairs_or_other_items_is_refused(tiny_backbone_path):
    model = build(tiny_backbone_path)
    with pytest.raises(ValueError, match=r"sentences\[1\] is \('b', 'c'\)"):
        model.encode(["a", ("b", "c")])
    with pytest.raises(ValueError, match=r"sentences\[0\] is 3"):
        model.encode([3])
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        model.encode(["a"], batch_size=0)


def test_normalized_embeddings_have_length_one_and_point_the_same_way(tiny_backbone_path):
    model = build(tiny_backbone_path, "cls")
    raw = torch.from_numpy(model.encode(TEXTS))
    unit = torch.from_numpy(model.encode(TEXTS, normalize_embeddings=True))
    torch.testing.assert_close(unit.norm(dim=-1), torch.ones(len(TEXTS)))
    torch.testing.assert_close(unit, F.normalize(raw, dim=-1))


def test_encode_runs_in_eval_mode_without_gradients_and_restores_train_mode(tiny_backbone_path):
    model = build(tiny_backbone_path, "attention")
    evaluated = model.encode(TEXTS)
    model.train()  # dropout on: a forward in train mode would differ from run to run
    encoded = model.encode(TEXTS, convert_to_tensor=True)
    assert model.training and all(module.training for module in model.modules())
    assert isinstance(encoded, torch.Tensor) and not encoded.requires_grad
    torch.testing.assert_close(encoded, torch.from_numpy(evaluated))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_model_computes_in_its_dtype_and_returns_float32(dtype, tiny_backbone_path):
    model = build(tiny_backbone_path, "mean")
    reference = torch.from_numpy(model.encode(TEXTS))
    model.to(dtype)
    computed = []
    hook = model.pooler.register_forward_hook(lambda module, args, output: computed.append(output.dtype))
    encoded = model.encode(TEXTS)
    hook.remove()
    assert set(computed) == {dtype}
    assert encoded.dtype.name == "float32"
    torch.testing.assert_close(torch.from_numpy(encoded), reference, atol=3e-2, rtol=3e-2)


def test_device_and_output_type(tiny_backbone_path):
    model = build(tiny_backbone_path)
    on_cpu = model.encode(TEXTS, device="cpu", convert_to_numpy=False)
    assert isinstance(on_cpu, torch.Tensor) and on_cpu.device.type == "cpu" and on_cpu.dtype == torch.float32
    assert not on_cpu.is_inference()  # computed under inference_mode, handed back as an ordinary tensor
    weight = torch.ones(on_cpu.shape[1], requires_grad=True)
    (on_cpu @ weight).sum().backward()  # usable in a graph, e.g. as a frozen feature for a trained layer
    assert model.device.type == "cpu"


def test_a_left_padding_tokenizer_gives_the_same_vectors(tiny_backbone_path):
    model = build(tiny_backbone_path, "cls")
    left = AutoTokenizer.from_pretrained(tiny_backbone_path, padding_side="left")
    torch.testing.assert_close(
        torch.from_numpy(model.encode(TEXTS, tokenizer=left)), torch.from_numpy(model.encode(TEXTS))
    )


def test_texts_are_truncated_to_what_the_model_has_positions_for(tiny_backbone_path, tokenizer):
    model = build(tiny_backbone_path, "mean")  # 64 positions, a tokenizer that allows 512 tokens
    long_text = " ".join(["word"] * 300)
    truncated = tokenizer(long_text, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        expected = model.embed(**truncated)[0]
    torch.testing.assert_close(torch.from_numpy(model.encode(long_text)), expected)
    # more than the positions allow: capped (with a warning) rather than an index error in the embeddings
    torch.testing.assert_close(torch.from_numpy(model.encode(long_text, max_length=500)), expected)
    assert model.encode(long_text, max_length=10).shape == expected.shape
    assert not torch.allclose(torch.from_numpy(model.encode(long_text, max_length=10)), expected)
    with pytest.raises(ValueError, match="max_length must be an integer >= 1"):
        model.encode(long_text, max_length=0)


def test_label_token_models_give_one_vector_per_label_or_the_one_asked_for(tiny_backbone_path):
    model = build(tiny_backbone_path, "label_tokens")
    every_label = model.encode(TEXTS)
    assert every_label.shape == (len(TEXTS), len(LABELS), model.config.backbone_config.hidden_size)
    food = model.encode(TEXTS, label="food")
    torch.testing.assert_close(torch.from_numpy(food), torch.from_numpy(every_label[:, 1]))
    torch.testing.assert_close(torch.from_numpy(model.encode(TEXTS, label=1)), torch.from_numpy(food))
    with pytest.raises(
        ValueError, match="'drinks' is not a label of this model. Its labels: sport, food, music"
    ):
        model.encode(TEXTS, label="drinks")
    with pytest.raises(ValueError, match="pooling='label_tokens'"):
        build(tiny_backbone_path, "mean").encode(TEXTS, label="food")
    # similarity compares label by label: the mean over labels of each label's cosine similarity
    per_label = [similarity(every_label[:, label], every_label[:, label]) for label in range(len(LABELS))]
    torch.testing.assert_close(model.similarity(every_label, every_label), torch.stack(per_label).mean(dim=0))


def test_a_classifier_encodes_with_its_pooler(tiny_backbone_path, tmp_path):
    classifier = build(tiny_backbone_path, "attention", PooledForSequenceClassification, num_labels=3)
    classifier.save_pretrained(tmp_path)
    encoder = AutoModel.from_pretrained(tmp_path)
    assert isinstance(encoder, PooledModel)
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(tmp_path)
    torch.testing.assert_close(
        torch.from_numpy(classifier.encode(TEXTS)), torch.from_numpy(encoder.encode(TEXTS)), atol=1e-6, rtol=0
    )


def test_the_tokenizer_is_found_next_to_the_checkpoint_or_the_backbone(tiny_backbone_path, tmp_path):
    model = build(tiny_backbone_path)  # from_backbone: the backbone's folder holds the tokenizer
    expected = model.encode(TEXTS)
    model.save_pretrained(tmp_path / "without_tokenizer")
    reloaded = AutoModel.from_pretrained(tmp_path / "without_tokenizer")
    with pytest.raises(ValueError, match="encode needs the model's tokenizer.*pass encode"):
        reloaded.encode(TEXTS)
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(tmp_path / "without_tokenizer")
    torch.testing.assert_close(torch.from_numpy(reloaded.encode(TEXTS)), torch.from_numpy(expected))


def test_a_progress_bar_on_long_inputs_or_when_asked(tiny_backbone_path, capsys, monkeypatch):
    model = build(tiny_backbone_path)
    model.encode(TEXTS)
    assert "Encoding" not in capsys.readouterr().err
    model.encode(TEXTS, show_progress_bar=True)
    assert "Encoding" in capsys.readouterr().err
    assert encoding.PROGRESS_BAR_FROM == 512  # the default the docstring and README state
    monkeypatch.setattr(encoding, "PROGRESS_BAR_FROM", 20)  # a long input, without encoding 512 texts
    model.encode(["a text"] * 20)
    assert "Encoding" in capsys.readouterr().err
    model.encode(["a text"] * 20, show_progress_bar=False)
    assert "Encoding" not in capsys.readouterr().err


def test_a_peft_wrapped_classifier_encodes_through_its_adapters(tiny_backbone_path):
    import peft

    classifier = build(tiny_backbone_path, "mean", PooledForSequenceClassification, num_labels=3)
    before = classifier.encode(TEXTS)
    config = peft.LoraConfig(task_type="SEQ_CLS", target_modules=["query", "value"], init_lora_weights=False)
    wrapped = peft.get_peft_model(classifier, config)
    adapted = wrapped.encode(TEXTS)
    with wrapped.disable_adapter():
        torch.testing.assert_close(torch.from_numpy(wrapped.encode(TEXTS)), torch.from_numpy(before))
    assert not torch.allclose(torch.from_numpy(adapted), torch.from_numpy(before))


def test_similarity_functions():
    first, second = torch.randn(3, 8), torch.randn(4, 8)
    cosine = similarity(first.numpy(), second)
    torch.testing.assert_close(cosine, F.cosine_similarity(first[:, None], second[None], dim=-1))
    torch.testing.assert_close(similarity(first, second, "dot"), first @ second.T)
    torch.testing.assert_close(similarity(first, second, "euclidean"), -torch.cdist(first, second))
    torch.testing.assert_close(similarity(first, second, "manhattan"), -torch.cdist(first, second, p=1))
    assert similarity(first[0], second).shape == (1, 4)
    with pytest.raises(ValueError, match="Valid choices: cosine, dot, euclidean, manhattan"):
        similarity(first, second, "jaccard")
    with pytest.raises(ValueError, match=r"Cannot compare embeddings of shape \(3, 8\) with \(4, 6\)"):
        similarity(first, torch.randn(4, 6))


def test_save_pretrained_describes_the_checkpoint_to_sentence_transformers(tiny_backbone_path, tmp_path):
    build(tiny_backbone_path).save_pretrained(tmp_path)
    for name, content in SENTENCE_TRANSFORMERS_FILES.items():
        assert json.loads((tmp_path / name).read_text()) == content


def test_save_pretrained_with_push_to_hub_uploads_the_sentence_transformers_files(
    tiny_backbone_path, tmp_path, monkeypatch
):
    model = build(tiny_backbone_path)
    pushed = []

    def fake_push(self, repo_id, **kwargs):
        folder = tmp_path / "hub"
        self.save_pretrained(folder)  # what PushToHubMixin.push_to_hub does, into a temporary folder
        pushed.append((repo_id, kwargs, sorted(path.name for path in folder.iterdir())))

    monkeypatch.setattr(PooledModel, "push_to_hub", fake_push)
    model.save_pretrained(tmp_path / "local", push_to_hub=True, repo_id="me/model", commit_message="first")
    ((repo_id, kwargs, uploaded),) = pushed
    assert repo_id == "me/model" and kwargs == {"commit_message": "first"}
    assert set(SENTENCE_TRANSFORMERS_FILES) | {"model.safetensors", "config.json"} <= set(uploaded)
    assert set(SENTENCE_TRANSFORMERS_FILES) <= {path.name for path in (tmp_path / "local").iterdir()}


@pytest.mark.slow  # a fresh interpreter without the package
def test_remote_code_models_encode_too(tiny_backbone_path, tmp_path):
    model = build(tiny_backbone_path, "gem", PooledForSequenceClassification, num_labels=3)
    model.save_pretrained(tmp_path / "model")
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(tmp_path / "model")
    script = f"""
        import json
        from transformers import AutoModel, AutoModelForSequenceClassification
        folder = {str(tmp_path / "model")!r}
        encoder = AutoModel.from_pretrained(folder, trust_remote_code=True)
        classifier = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
        print(json.dumps({{"module": type(encoder).__module__, "encoder": encoder.encode({TEXTS!r}).tolist(),
                           "classifier": classifier.encode({TEXTS!r}, normalize_embeddings=True).tolist()}}))
    """
    result = run_without_package(script, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["module"].startswith("transformers_modules.")
    expected = torch.from_numpy(model.encode(TEXTS))
    torch.testing.assert_close(torch.tensor(report["encoder"]), expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(torch.tensor(report["classifier"]), F.normalize(expected, dim=-1))


def test_auto_model_for_sequence_classification_checkpoints_encode(tiny_backbone_path, tmp_path):
    model = build(tiny_backbone_path, "weighted_layer", PooledForSequenceClassification, num_labels=3)
    model.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(tmp_path)
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path)
    torch.testing.assert_close(
        torch.from_numpy(reloaded.encode(TEXTS)), torch.from_numpy(model.encode(TEXTS))
    )
