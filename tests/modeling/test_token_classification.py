"""PooledForTokenClassification: a head over every token, its loss and label checks, the Auto class, pipeline with
aggregation, trust_remote_code, PEFT, padding, dtypes, resized embeddings."""

import json

import pytest
import torch
from helpers import ENTITY_LABELS, random_batch, repad, run_without_package, tiny_model
from transformers import AutoModel, AutoModelForTokenClassification, AutoTokenizer, pipeline
from transformers.modeling_outputs import TokenClassifierOutput

from pooled_models import PooledForSequenceClassification, PooledForTokenClassification, PooledModel


def token_model(head: str = "linear", backbone: str = "bert", **settings):
    return tiny_model(
        "mean",
        backbone=backbone,
        model_class=PooledForTokenClassification,
        classifier_head=head,
        id2label=ENTITY_LABELS,
        num_labels=len(ENTITY_LABELS),
        **settings,
    )


@pytest.mark.parametrize("head", ["linear", "dense"])
def test_logits_per_token_and_the_loss_ignores_minus_100(head):
    model = token_model(head)
    batch = random_batch([5, 3, 7])
    labels = torch.randint(0, 5, (3, 7))
    labels[batch["attention_mask"] == 0] = -100
    labels[0, 0] = -100  # a special token
    out = model(**batch, labels=labels)
    assert isinstance(out, TokenClassifierOutput)
    assert out.logits.shape == (3, 7, 5)
    kept = labels != -100
    expected = torch.nn.functional.cross_entropy(out.logits[kept], labels[kept])
    torch.testing.assert_close(out.loss, expected)
    assert model.config.problem_type == "single_label_classification"


def test_a_batch_without_any_labelled_token_has_zero_loss_not_nan():
    model = token_model().train()
    out = model(**random_batch([4, 2]), labels=torch.full((2, 4), -100))
    assert out.loss.item() == 0.0
    out.loss.backward()  # and it still has a graph


@pytest.mark.parametrize(
    "labels, message",
    [
        (
            torch.zeros(2, 3, dtype=torch.long),
            r"token labels have shape \(2, 3\) but the inputs are \(2, 6\)",
        ),
        (torch.zeros(2, 6), r"integer class ids \(torch.long\), got dtype torch.float32"),
        (torch.tensor([[0, 1, 2, 3, 4, 5]] * 2), r"labels\[0, 5\] = 5 is not a class id: with num_labels=5"),
    ],
)
def test_bad_token_labels_raise_before_the_loss(labels, message):
    with pytest.raises(ValueError, match=message):
        token_model()(**random_batch([4, 6]), labels=labels)


def test_every_trainable_parameter_gets_a_gradient():
    model = token_model("dense").train()
    out = model(**random_batch([5, 3]), labels=torch.randint(0, 5, (2, 5)))
    out.loss.backward()
    assert not [
        name for name, param in model.named_parameters() if param.requires_grad and param.grad is None
    ]


@pytest.mark.parametrize("backbone", ["bert", "roberta", "deberta-v2", "modernbert", "gpt2"])
def test_right_left_padding_and_batching_leave_each_tokens_logits_unchanged(backbone):
    model = token_model(backbone=backbone)
    batch = random_batch([5, 9, 2], seed=3)
    alone = model(**repad(batch, 0, 5, "right")).logits[0]
    torch.testing.assert_close(model(**batch).logits[0, :5], alone, atol=1e-5, rtol=1e-5)
    left = model(**repad(batch, 0, 12, "left")).logits[0, -5:]
    torch.testing.assert_close(left, alone, atol=1e-5, rtol=1e-5)


def test_batch_size_one_and_a_single_token():
    out = token_model()(input_ids=torch.tensor([[7]]), labels=torch.tensor([[3]]))
    assert out.logits.shape == (1, 1, 5) and torch.isfinite(out.loss)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_gives_finite_logits_and_a_float32_loss(dtype):
    model = token_model("dense").to(dtype)
    out = model(**random_batch([5, 3]), labels=torch.randint(0, 5, (2, 5)))
    assert out.logits.dtype == dtype and torch.isfinite(out.logits).all()
    assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)


def test_save_and_load_give_identical_logits_and_the_auto_classes_know_it(tmp_path):
    model = token_model("dense")
    batch = random_batch([4, 6])
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert (
        config["auto_map"]["AutoModelForTokenClassification"] == "modeling_token.PooledForTokenClassification"
    )
    assert config["architectures"] == ["PooledForTokenClassification"]
    reloaded = AutoModelForTokenClassification.from_pretrained(tmp_path).eval()
    assert type(reloaded) is PooledForTokenClassification
    assert torch.equal(model(**batch).logits, reloaded(**batch).logits)
    # AutoModel gives the checkpoint's sentence embeddings (its config's pooling), with the fine-tuned backbone.
    encoder = AutoModel.from_pretrained(tmp_path)
    assert type(encoder) is PooledModel
    torch.testing.assert_close(
        encoder.backbone(**batch).last_hidden_state, model.backbone(**batch).last_hidden_state
    )


def test_from_pretrained_overrides_apply(tmp_path):
    token_model().save_pretrained(tmp_path)
    reloaded = PooledForTokenClassification.from_pretrained(tmp_path, classifier_dropout=0.3)
    assert reloaded.config.classifier_dropout == 0.3 and reloaded.classifier.token_head.dropout.p == 0.3


def test_a_sequence_classifier_checkpoint_loads_its_backbone_into_a_token_classifier(tmp_path):
    sequence = tiny_model("attention", num_labels=5)
    sequence.save_pretrained(tmp_path)
    token = PooledForTokenClassification.from_pretrained(tmp_path)
    for name, weight in sequence.backbone.state_dict().items():
        assert torch.equal(token.backbone.state_dict()[name], weight), name


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"pooling": "label_tokens", "label_token_init": "random"}, "inserts tokens into every input"),
        ({"problem_type": "multi_label_classification"}, "gives each token one label"),
    ],
)
def test_settings_a_token_classifier_cannot_have_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        tiny_model(model_class=PooledForTokenClassification, **settings)


@pytest.mark.parametrize("model_class", [PooledForTokenClassification, PooledForSequenceClassification])
def test_resize_token_embeddings_saves_and_reloads(model_class, tmp_path):
    model = tiny_model("mean", model_class=model_class, num_labels=5)
    model.resize_token_embeddings(130)
    assert model.get_input_embeddings().num_embeddings == 130
    assert model.config.backbone_config.vocab_size == 130 and "vocab_size" not in model.config.to_dict()
    batch = random_batch([4])
    batch["input_ids"][0, 1] = 125
    model.save_pretrained(tmp_path)
    reloaded = model_class.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits, atol=1e-6, rtol=1e-6)


def test_peft_lora_for_token_classification_trains_and_saves_the_head(tmp_path):
    import peft

    model = token_model("dense").train()
    lora = peft.get_peft_model(
        model, peft.LoraConfig(task_type=peft.TaskType.TOKEN_CLS, target_modules=["query", "value"], r=4)
    )
    trainable = {name for name, param in lora.named_parameters() if param.requires_grad}
    assert any("lora_" in name for name in trainable)
    assert any(".classifier." in name and "token_head" in name for name in trainable)  # the head trains
    out = lora(**random_batch([5, 3]), labels=torch.randint(0, 5, (2, 5)))
    out.loss.backward()
    lora.save_pretrained(tmp_path)
    from safetensors.torch import load_file

    saved = load_file(tmp_path / "adapter_model.safetensors")
    assert any("classifier" in key and "token_head" in key for key in saved), sorted(saved)


@pytest.fixture(scope="module")
def ner_folder(tmp_path_factory, tiny_backbone_path):
    folder = tmp_path_factory.mktemp("ner")
    torch.manual_seed(0)
    model = PooledForTokenClassification.from_backbone(tiny_backbone_path, id2label=ENTITY_LABELS).eval()
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(folder)
    return folder, model


TEXT = "Where is order 4471 for the blue kettle?"


def test_pipeline_with_simple_aggregation_gives_entity_groups(ner_folder):
    folder, model = ner_folder
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        probabilities = model(**tokenizer(TEXT, return_tensors="pt")).logits.softmax(-1)[0]
    ner = pipeline("token-classification", model=str(folder))
    tokens = ner(TEXT)
    assert tokens, "an untrained head still labels some token other than O"
    for token in tokens:  # each token's score is the model's own softmax for the label it names
        index = token["index"]
        label_id = model.config.label2id[token["entity"]]
        assert token["score"] == pytest.approx(probabilities[index, label_id].item(), abs=1e-5)
    grouped = pipeline("token-classification", model=str(folder), aggregation_strategy="simple")(TEXT)
    assert grouped and all({"entity_group", "score", "word", "start", "end"} <= set(item) for item in grouped)
    for item in grouped:
        assert item["entity_group"] in {"ORDER", "PRODUCT"}
        assert TEXT[item["start"] : item["end"]].lower().replace(" ", "") == item["word"].replace(
            "##", ""
        ).replace(" ", "")


@pytest.mark.slow  # a fresh interpreter without the package
def test_trust_remote_code_loads_the_token_classifier_and_its_pipeline_without_the_package(
    ner_folder, tmp_path
):
    folder, model = ner_folder
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        expected = model(**tokenizer([TEXT], return_tensors="pt")).logits
    script = f"""
        import json, torch
        from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline
        folder = {str(folder)!r}
        model = AutoModelForTokenClassification.from_pretrained(folder, trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        with torch.no_grad():
            logits = model(**tokenizer([{TEXT!r}], return_tensors="pt")).logits
        ner = pipeline("token-classification", model=folder, trust_remote_code=True, aggregation_strategy="simple")
        groups = ner({TEXT!r})
        print(json.dumps({{"module": type(model).__module__, "logits": logits.tolist(),
                           "groups": [group["entity_group"] for group in groups]}}))
    """
    result = run_without_package(script, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["module"].startswith("transformers_modules.")
    torch.testing.assert_close(torch.tensor(report["logits"]), expected, atol=1e-6, rtol=1e-6)
    assert set(report["groups"]) <= {"ORDER", "PRODUCT"}


def test_a_token_checkpoint_also_loads_as_a_sequence_classifier_backbone(ner_folder):
    folder, model = ner_folder
    sequence = PooledForSequenceClassification.from_pretrained(folder, num_labels=2)
    for name, weight in model.backbone.state_dict().items():
        assert torch.equal(sequence.backbone.state_dict()[name], weight), name
