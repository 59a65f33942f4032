"""One text length, carried by the model (``config.max_seq_length``, modeling/text_length.py): pipeline(...) and encode
cut a long text there, a 2,000-token text is answered rather than failing in the position table, the setting survives
saving, loading overrides and edits, and checkpoints saved before it follow the documented rule (docs/training.md,
"The text length")."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import tiny_multitask_model
from huggingface_hub.errors import StrictDataclassFieldValidationError
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertForSequenceClassification,
    TextClassificationPipeline,
    pipeline,
)

from pooled_models import PooledConfig, PooledForSequenceClassification, PooledMultiTaskConfig
from pooled_models.modeling.text_classification_pipeline import PooledTextClassificationPipeline

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LABELS = {0: "billing", 1: "delivery", 2: "password"}
# 2,000 tokens and more with the MiniLM tokenizer: far past the tiny backbone's 64 positions (and MiniLM's 512).
LONG = " ".join(f"parcel{index % 7} never came" for index in range(700))
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "v0_1_0"


def save_classifier(folder: Path, backbone: str, **settings) -> Path:
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(backbone, id2label=LABELS, **settings)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(backbone).save_pretrained(folder)
    return folder


def scores_at(model, tokenizer, text, length: int) -> torch.Tensor:
    """The model's probabilities for ``text`` cut at ``length`` tokens: the reference every path must give."""
    with torch.no_grad():
        logits = model(**tokenizer(text, truncation=True, max_length=length, return_tensors="pt")).logits
    return logits.softmax(-1)[0]


def pipeline_scores(classify, text, **call) -> torch.Tensor:
    answer = {item["label"]: item["score"] for item in classify(text, top_k=None, **call)}
    return torch.tensor([answer[LABELS[index]] for index in sorted(LABELS)])


@pytest.fixture(scope="module")
def unset_folder(tmp_path_factory, tiny_backbone_path):
    """A classifier saved without a length: the tiny backbone (64 positions) is no sentence-transformers folder."""
    return save_classifier(tmp_path_factory.mktemp("unset"), tiny_backbone_path)


@pytest.fixture(scope="module")
def short_folder(tmp_path_factory, tiny_backbone_path):
    """A classifier saved with max_seq_length=16."""
    return save_classifier(tmp_path_factory.mktemp("short"), tiny_backbone_path, max_seq_length=16)


def test_a_pooled_classifiers_pipeline_answers_a_2000_token_text(unset_folder, minilm_tokenizer):
    assert len(minilm_tokenizer(LONG)["input_ids"]) > 2000
    classify = pipeline("text-classification", model=str(unset_folder))
    assert isinstance(classify, PooledTextClassificationPipeline)
    model = classify.model
    # No saved length: the tokenizer's model_max_length (512), capped at the backbone's 64 positions.
    assert model.config.max_seq_length is None and model.max_text_length(classify.tokenizer) == 64
    torch.testing.assert_close(
        pipeline_scores(classify, LONG), scores_at(model, minilm_tokenizer, LONG, 64), atol=1e-6, rtol=0
    )
    # Controls: transformers' own class passes the whole text to the backbone, which fails in its position table; with
    # truncation=True it cuts at the tokenizer's 512, still past the backbone's positions.
    plain = TextClassificationPipeline(model=model, tokenizer=classify.tokenizer)
    with pytest.raises(IndexError, match="index out of range"):
        plain(LONG)
    with pytest.raises(IndexError, match="index out of range"):
        plain(LONG, truncation=True)


def test_the_pipeline_keeps_transformers_behaviour_for_other_models(tiny_backbone_path, minilm_tokenizer):
    torch.manual_seed(0)
    bert = BertForSequenceClassification.from_pretrained(tiny_backbone_path, num_labels=3).eval()
    classify = pipeline("text-classification", model=bert, tokenizer=minilm_tokenizer)
    assert isinstance(classify, PooledTextClassificationPipeline)  # the class registered for the task
    assert classify._preprocess_params == {}  # transformers' defaults: nothing added
    with pytest.raises((IndexError, RuntimeError)):  # BERT's embeddings: 64 positions for 2,802 tokens
        classify(LONG)


def test_pipeline_and_encode_cut_at_the_saved_length(short_folder, minilm_tokenizer):
    assert json.loads((short_folder / "sentence_bert_config.json").read_text())["max_seq_length"] == 16
    classify = pipeline("text-classification", model=str(short_folder))
    model = classify.model
    assert model.config.max_seq_length == 16 and model.max_text_length(minilm_tokenizer) == 16
    at_16 = scores_at(model, minilm_tokenizer, LONG, 16)
    assert float((at_16 - scores_at(model, minilm_tokenizer, LONG, 64)).abs().max()) > 1e-4  # the cut matters
    torch.testing.assert_close(pipeline_scores(classify, LONG), at_16, atol=1e-6, rtol=0)
    torch.testing.assert_close(pipeline_scores(classify, LONG, truncation=True), at_16, atol=1e-6, rtol=0)
    # The caller's keywords win, at the call or when the pipeline is built.
    torch.testing.assert_close(
        pipeline_scores(classify, LONG, max_length=32),
        scores_at(model, minilm_tokenizer, LONG, 32),
        atol=1e-6,
        rtol=0,
    )
    built_at_40 = pipeline("text-classification", model=str(short_folder), max_length=40)
    torch.testing.assert_close(
        pipeline_scores(built_at_40, LONG), scores_at(model, minilm_tokenizer, LONG, 40), atol=1e-6, rtol=0
    )
    # encode: the pooled vector of the same 16 tokens, which the head turns into the same scores.
    pooled = torch.as_tensor(model.encode(LONG, normalize_embeddings=False))
    with torch.no_grad():
        head_scores = model.classifier.logits(pooled[None]).softmax(-1)[0]
        direct = model.embed(**minilm_tokenizer(LONG, truncation=True, max_length=16, return_tensors="pt"))[0]
    torch.testing.assert_close(pooled, direct, atol=1e-5, rtol=0)
    torch.testing.assert_close(head_scores, at_16, atol=1e-5, rtol=0)


def test_the_length_survives_saving_loading_overrides_and_edits(short_folder, minilm_tokenizer, tmp_path):
    reloaded = AutoModelForSequenceClassification.from_pretrained(short_folder)
    assert reloaded.config.max_seq_length == 16
    overridden = AutoModelForSequenceClassification.from_pretrained(short_folder, max_seq_length=8)
    assert overridden.max_text_length(minilm_tokenizer) == 8
    classify = pipeline("text-classification", model=overridden, tokenizer=minilm_tokenizer)
    torch.testing.assert_close(
        pipeline_scores(classify, LONG), scores_at(overridden, minilm_tokenizer, LONG, 8), atol=1e-6, rtol=0
    )
    # A built model follows an edit (the length chooses no module), and saves it: config.json and the
    # sentence-transformers description vLLM reads.
    reloaded.config.max_seq_length = 24
    assert reloaded.max_text_length(minilm_tokenizer) == 24
    # save_pretrained returns what transformers' returns (None), not the length it wrote
    assert reloaded.save_pretrained(tmp_path / "edited") is None
    assert json.loads((tmp_path / "edited" / "config.json").read_text())["max_seq_length"] == 24
    assert json.loads((tmp_path / "edited" / "sentence_bert_config.json").read_text())["max_seq_length"] == 24
    # More than the backbone's positions: capped where the model reads it, with a warning.
    reloaded.config.max_seq_length = 1000
    assert reloaded.max_text_length(minilm_tokenizer) == 64


def test_a_lora_wrapped_classifiers_pipeline_cuts_at_the_models_length(short_folder, minilm_tokenizer):
    """PEFT's wrapper forwards max_text_length to the pooled model: its pipeline cuts where the model's does."""
    import peft

    model = AutoModelForSequenceClassification.from_pretrained(short_folder)
    lora = peft.LoraConfig(task_type="SEQ_CLS", target_modules=["query", "value"], init_lora_weights=False)
    wrapped = peft.get_peft_model(model, lora).eval()
    classify = pipeline("text-classification", model=wrapped, tokenizer=minilm_tokenizer)
    expected = scores_at(wrapped, minilm_tokenizer, LONG, 16)
    torch.testing.assert_close(pipeline_scores(classify, LONG), expected, atol=1e-6, rtol=0)
    # the adapters are live (not the plain model's scores), and the long text was cut, not refused
    with wrapped.disable_adapter():
        plain = scores_at(wrapped, minilm_tokenizer, LONG, 16)
    assert not torch.allclose(expected, plain, atol=1e-6)


@pytest.mark.parametrize("value", [0, -3, True, 2.5, "128"])
def test_a_length_that_is_not_a_positive_integer_is_refused(short_folder, value):
    refused = (ValueError, TypeError, StrictDataclassFieldValidationError)
    with pytest.raises(refused, match="max_seq_length"):
        PooledConfig(max_seq_length=value)
    with pytest.raises(refused, match="max_seq_length"):
        AutoModelForSequenceClassification.from_pretrained(short_folder, max_seq_length=value)
    # Set through its 0.3 name, which the type checks of assignment do not see: refused when a model is built from
    # the config or the config is saved, never used.
    config = PooledConfig.from_pretrained(short_folder)
    config.embedding_max_length = value
    with pytest.raises(ValueError, match="max_seq_length must be an integer >= 1"):
        PooledForSequenceClassification(config)


def test_a_0_3_checkpoints_embedding_max_length_is_read_as_its_length(
    short_folder, minilm_tokenizer, tmp_path
):
    """docs/training.md's rule for checkpoints saved before the setting: embedding_max_length is the length."""
    folder = tmp_path / "v0_3"
    AutoModelForSequenceClassification.from_pretrained(short_folder).save_pretrained(folder)
    minilm_tokenizer.save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    saved["embedding_max_length"] = saved.pop("max_seq_length") + 8  # as 0.3 wrote it: 24
    (folder / "config.json").write_text(json.dumps(saved))
    classify = pipeline("text-classification", model=str(folder))
    assert classify.model.config.max_seq_length == 24 and classify.model.config.embedding_max_length == 24
    torch.testing.assert_close(
        pipeline_scores(classify, LONG),
        scores_at(classify.model, minilm_tokenizer, LONG, 24),
        atol=1e-6,
        rtol=0,
    )
    assert "embedding_max_length" not in classify.model.config.to_dict()  # saved again under its name
    assert PooledConfig(embedding_max_length=12).max_seq_length == 12  # the keyword too


def test_a_checkpoint_without_a_length_reads_the_tokenizers_capped_at_the_positions():
    """A 0.1.0 checkpoint (no length saved): the tokenizer's model_max_length, capped at the backbone's positions."""
    model = AutoModelForSequenceClassification.from_pretrained(FIXTURES / "mean")
    positions = model.config.backbone_config.max_position_embeddings
    assert model.config.max_seq_length is None
    assert model.max_text_length(SimpleNamespace(model_max_length=20)) == 20
    assert model.max_text_length(SimpleNamespace(model_max_length=10**30)) == positions  # "no limit"
    assert model.max_text_length(SimpleNamespace(model_max_length=positions + 100)) == positions


def test_a_multi_task_model_carries_one_length_to_its_exported_heads(tmp_path, minilm_tokenizer):
    model = tiny_multitask_model(max_seq_length=20)
    assert model.max_text_length(minilm_tokenizer) == 20
    model.config.max_seq_length = 0
    with pytest.raises(ValueError, match="max_seq_length must be an integer >= 1"):
        model.config.ensure_valid()
    model.config.max_seq_length = 20
    model.export_head("team", tmp_path / "team", tokenizer=minilm_tokenizer)
    assert json.loads((tmp_path / "team" / "sentence_bert_config.json").read_text())["max_seq_length"] == 20
    assert PooledForSequenceClassification.from_pretrained(tmp_path / "team").config.max_seq_length == 20
    # A 0.3 multi-task config whose sequence task set embedding_max_length: the model's length.
    legacy = model.config.to_dict()
    legacy.pop("max_seq_length")
    legacy["tasks"]["team"]["embedding_max_length"] = 18
    assert PooledMultiTaskConfig.from_dict(legacy).max_seq_length == 18
