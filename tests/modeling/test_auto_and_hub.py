"""Auto classes, pipeline, trust_remote_code loading without the package, push_to_hub, safetensors only."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import run_without_package, use_fake_hub
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer, pipeline

from pooled_models import PooledConfig, PooledForSequenceClassification, PooledModel

TEXTS = ["I love this.", "This is the worst thing I have ever read, honestly."]
LABELS = {0: "joy", 1: "anger", 2: "fear"}
LONG = "A long complaint about a parcel that never came. " * 300  # past MiniLM's 512 positions


def save_classifier(
    folder: Path, minilm_path, tokenizer, problem_type: str
) -> PooledForSequenceClassification:
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        minilm_path,
        pooling="cls_mean_max",
        id2label=LABELS,
        problem_type=problem_type,
        classifier_head="dense",
        classifier_dropout_samples=2,  # a head setting the remote code must know too
    ).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def multi_label_folder(tmp_path_factory, minilm_path, minilm_tokenizer):
    folder = tmp_path_factory.mktemp("multi_label")
    model = save_classifier(folder, minilm_path, minilm_tokenizer, "multi_label_classification")
    with torch.no_grad():
        logits = model(**minilm_tokenizer(TEXTS, padding=True, return_tensors="pt")).logits
    return folder, logits


def test_saved_folder_holds_config_safetensors_and_code(multi_label_folder):
    folder, _ = multi_label_folder
    files = {path.name for path in folder.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "configuration_pooled.py",
        "modeling_pooled.py",
        "pooling.py",
    } <= files
    assert not [name for name in files if name.endswith((".bin", ".pt", ".pth", ".pkl"))]
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_pooled.PooledConfig",
        "AutoModel": "modeling_pooled.PooledModel",
        "AutoModelForSequenceClassification": "modeling_pooled.PooledForSequenceClassification",
    }
    assert "auto_map" not in config["backbone_config"]


def test_auto_classes_load_the_pooled_classes(multi_label_folder, minilm_tokenizer):
    folder, logits = multi_label_folder
    assert isinstance(AutoConfig.from_pretrained(folder), PooledConfig)
    classifier = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    assert type(classifier) is PooledForSequenceClassification
    batch = minilm_tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(classifier(**batch).logits, logits)
        encoder = AutoModel.from_pretrained(folder).eval()
        assert type(encoder) is PooledModel
        torch.testing.assert_close(encoder(**batch).pooler_output, classifier.embed(**batch))


def test_pipeline_gives_sigmoid_scores_for_multi_label(multi_label_folder):
    folder, logits = multi_label_folder
    classify = pipeline("text-classification", model=str(folder), top_k=None)
    results = classify(TEXTS)
    for row, scores in enumerate(results):
        by_label = {item["label"]: item["score"] for item in scores}
        expected = {LABELS[i]: torch.sigmoid(logits[row, i]).item() for i in range(3)}
        assert by_label == pytest.approx(expected, abs=1e-5)


def test_pipeline_gives_softmax_scores_for_single_label(tmp_path, minilm_path, minilm_tokenizer):
    model = save_classifier(tmp_path, minilm_path, minilm_tokenizer, "single_label_classification")
    with torch.no_grad():
        probabilities = model(**minilm_tokenizer(TEXTS[:1], return_tensors="pt")).logits.softmax(-1)[0]
    result = pipeline("text-classification", model=str(tmp_path))(TEXTS[0])[0]
    best = int(probabilities.argmax())
    assert result["label"] == LABELS[best]
    assert result["score"] == pytest.approx(probabilities[best].item(), abs=1e-5)


@pytest.mark.slow  # a fresh interpreter without the package
def test_trust_remote_code_loads_the_same_model_without_the_package(multi_label_folder, tmp_path):
    folder, logits = multi_label_folder
    script = f"""
        import json, torch
        from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer, pipeline
        try:
            import pooled_models
            raise SystemExit("pooled_models should not be importable here")
        except ImportError:
            pass
        folder = {str(folder)!r}
        model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
        encoder = AutoModel.from_pretrained(folder, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        with torch.no_grad():
            logits = model(**tokenizer({TEXTS!r}, padding=True, return_tensors="pt")).logits
        # The checkpoint's own code registers the pipeline that cuts a text at the model's length (MiniLM's 256).
        classify = pipeline("text-classification", model=folder, trust_remote_code=True)
        long = [item["score"] for item in sorted(classify({LONG!r}, top_k=None), key=lambda item: item["label"])]
        print(json.dumps({{"model": type(model).__module__, "encoder": type(encoder).__name__,
                           "logits": logits.tolist(), "dropout_samples": model.classifier.dropout_samples,
                           "pipeline": type(classify).__module__, "long": long}}))
    """
    result = run_without_package(script, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["model"].startswith("transformers_modules.")
    assert report["encoder"] == "PooledModel"
    assert report["dropout_samples"] == 2
    torch.testing.assert_close(torch.tensor(report["logits"]), logits, atol=1e-6, rtol=1e-6)
    assert report["pipeline"].startswith("transformers_modules.")
    model = PooledForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        cut = (
            model(**tokenizer(LONG, truncation=True, max_length=256, return_tensors="pt")).logits[0].sigmoid()
        )
    torch.testing.assert_close(
        torch.tensor(report["long"]), cut[[1, 2, 0]], atol=1e-5, rtol=0
    )  # anger, fear, joy


@pytest.mark.slow  # a fresh interpreter without the package
def test_without_the_package_remote_code_is_never_run_unasked(multi_label_folder, tmp_path):
    folder, _ = multi_label_folder
    script = f"""
        from transformers import AutoModelForSequenceClassification
        AutoModelForSequenceClassification.from_pretrained({str(folder)!r}, trust_remote_code=False)
    """
    result = run_without_package(script, tmp_path)
    assert result.returncode != 0
    assert "trust_remote_code=True" in result.stderr


# In the scripts below, transformers' question "Do you wish to run the custom code? [y/N]" (resolve_trust_remote_code,
# which calls input()) ends the script at once, instead of waiting 15 seconds for an answer that never comes.
NO_QUESTIONS = """
    import builtins
    def asked(prompt=""):
        print("ASKED: " + prompt.strip().splitlines()[-1])
        raise SystemExit(3)
    builtins.input = asked
"""


def test_the_tokenizer_of_a_saved_folder_loads_without_a_question_with_the_package(
    multi_label_folder, monkeypatch
):
    folder, _ = multi_label_folder
    monkeypatch.setattr("builtins.input", lambda *args: pytest.fail(f"transformers asked: {args}"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert type(tokenizer).__name__ == "BertTokenizer"


@pytest.mark.slow  # a fresh interpreter without the package
def test_without_the_package_the_tokenizer_alone_loads_without_a_question_or_code(
    multi_label_folder, minilm_tokenizer, tmp_path
):
    """The folder's tokenizer is a built-in one (its tokenizer_config.json names BertTokenizer): with
    trust_remote_code=False, AutoTokenizer loads it, no code read, no question asked (docs/models.md)."""
    folder, _ = multi_label_folder
    script = (
        NO_QUESTIONS
        + f"""
    import json, sys
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=False)
    print(json.dumps({{"class": type(tokenizer).__name__, "ids": tokenizer({TEXTS!r})["input_ids"],
                      "code": sorted(name for name in sys.modules if name.startswith("transformers_modules"))}}))
    """
    )
    result = run_without_package(script, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"class": "BertTokenizer", "ids": minilm_tokenizer(TEXTS)["input_ids"], "code": []}


@pytest.mark.slow  # a fresh interpreter without the package
@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="transformers 5.16-5.24: AutoTokenizer.from_pretrained loads the folder's config with AutoConfig before "
    "it reads tokenizer_config.json (models/auto/tokenization_auto.py), with the caller's trust_remote_code (None), "
    "and AutoConfig asks whenever config.json's auto_map names a config class for a model type transformers does not "
    "know (models/auto/configuration_auto.py, dynamic_module_utils.resolve_trust_remote_code). That auto_map entry "
    "is what every trust_remote_code load needs (auto_factory.py loads the config through AutoConfig too), so no file "
    "of the folder can tell the two calls apart. Passing trust_remote_code=False, or importing pooled_models first, "
    "loads the tokenizer without the question (the tests above). Issue 42, item 4.",
)
def test_without_the_package_a_plain_autotokenizer_call_asks_no_question(multi_label_folder, tmp_path):
    folder, _ = multi_label_folder
    script = (
        NO_QUESTIONS
        + f"""
    from transformers import AutoTokenizer
    print(type(AutoTokenizer.from_pretrained({str(folder)!r})).__name__)
    """
    )
    result = run_without_package(script, tmp_path)
    assert "ASKED" not in result.stdout, result.stdout
    assert result.returncode == 0 and result.stdout.split()[-1] == "BertTokenizer"


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    return use_fake_hub(monkeypatch, tmp_path / "uploaded")


@pytest.mark.slow  # uploads through a fake Hub, then loads in a fresh interpreter
def test_push_to_hub_uploads_a_loadable_self_contained_checkpoint(
    fake_hub, minilm_path, minilm_tokenizer, tmp_path
):
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(minilm_path, pooling="lstm", id2label=LABELS).eval()
    model.push_to_hub("someone/pooled-minilm")
    minilm_tokenizer.push_to_hub("someone/pooled-minilm")
    uploaded = fake_hub.destination
    assert fake_hub.repo_ids == ["someone/pooled-minilm", "someone/pooled-minilm"]
    names = {path.name for path in uploaded.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "modeling_pooled.py",
        "configuration_pooled.py",
        "pooling.py",
    } <= names
    assert not [name for name in names if name.endswith((".bin", ".pt", ".pth", ".pkl"))]

    batch = minilm_tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        reloaded = AutoModelForSequenceClassification.from_pretrained(uploaded).eval()
        assert torch.equal(reloaded(**batch).logits, model(**batch).logits)

    script = f"""
        from transformers import AutoModelForSequenceClassification
        model = AutoModelForSequenceClassification.from_pretrained({str(uploaded)!r}, trust_remote_code=True)
        print(type(model).__name__, model.config.pooling)
    """
    result = run_without_package(script, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["PooledForSequenceClassification", "lstm"]


def test_weights_are_never_read_from_pickle(multi_label_folder, tmp_path):
    folder, _ = multi_label_folder
    with pytest.raises(ValueError, match="safetensors only"):
        PooledForSequenceClassification.from_pretrained(folder, use_safetensors=False)
    # A folder with only a pickled checkpoint does not load, even through the Auto class.
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    shutil.copy(folder / "config.json", pickled / "config.json")
    model = PooledForSequenceClassification.from_pretrained(folder)
    torch.save(model.state_dict(), pickled / "pytorch_model.bin")
    with pytest.raises(OSError, match=r"no file named model\.safetensors"):
        AutoModelForSequenceClassification.from_pretrained(pickled)


def test_from_backbone_refuses_trust_remote_code(minilm_path):
    with pytest.raises(ValueError, match="does not take trust_remote_code"):
        PooledForSequenceClassification.from_backbone(
            minilm_path, backbone_kwargs={"trust_remote_code": True}
        )
