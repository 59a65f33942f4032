"""Label text and label tokens on every backbone family the plugin serves, against transformers in float32 (1e-4):
vLLM's own XLM-RoBERTa, ModernBERT, Qwen2, Qwen3, Gemma 3 (text and composite) and Llama, and the transformers route
(DeBERTa-v3, DistilBERT, ELECTRA and ALBERT with their factorised embeddings, MPNet). vLLM's BERT: test_labels.py.

Each family serves a label-text checkpoint (train.py's few-example default: per_label with a description, mean label
vectors, single-label; or the shared scorer with a description, marker vectors, multi-label: LABEL_TEXT_CASES) through
``LLM.classify`` against transformers and through the open label set (the zero-shot plugin, single- and multi-label
requests) against ``pipeline("zero-shot-classification")``; and a label-token classifier with its defaults through the
serving tokenizer, the label tokens where the tokenizer's leading special tokens end (1 after MiniLM's ``[CLS]``, 0 for
a tokenizer that puts none, as Qwen's) or after the text (-1). One decoder over HTTP; the label tasks of a multi-task
model.
"""

from __future__ import annotations

import json

import pytest
import torch
from backbone_helpers import save, served_route
from label_helpers import (
    UNSEEN,
    ZERO_SHOT_TEXTS,
    assert_same_answer,
    ensure_zero_shot_entry_point,
    own_label_text_ids,
    zero_shot_pipeline_answer,
)
from transformers import AutoTokenizer, PreTrainedTokenizerFast, pipeline
from vllm_helpers import (
    LABELS,
    TEXTS,
    TOLERANCE,
    Server,
    classify,
    move_parameters,
    offline_engine,
    tiny_backbone,
    transformers_logits,
)

from pooled_models import PooledForMultiTask, PooledMultiTaskConfig
from pooled_models.serving.label_tokens import write_serving_tokenizer
from pooled_models.serving.zero_shot import PLUGIN_NAME

# Backbone -> the implementation that serves it (vLLM's class, or the transformers route).
FAMILIES = {
    "xlm-roberta": "XLMRobertaModel",
    "modernbert": "ModernBertModel",
    "qwen2": "Qwen2Model",
    "qwen3": "Qwen3Model",
    "gemma3_text": "Gemma3Model",
    "gemma3": "Gemma3Model",
    "llama": "LlamaModel",
    "deberta-v2": "transformers",
    "distilbert": "transformers",
    "electra": "transformers",
    "albert": "transformers",
    "mpnet": "transformers",
}
DECODERS = ("qwen2", "qwen3", "gemma3_text", "gemma3", "llama")
DESCRIPTIONS = {"fear": "being afraid of something"}
LABEL_TEXT = {
    "per_label": {"label_text_scorer": "per_label", "label_descriptions": DESCRIPTIONS},
    "shared": {
        "label_text_scorer": "shared",
        "label_text_pooling": "marker",
        "problem_type": "multi_label_classification",
        "label_descriptions": DESCRIPTIONS,
    },
}


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return AutoTokenizer.from_pretrained(minilm_path)


def label_text_checkpoint(folder, tokenizer, backbone: str, settings: dict):
    """A label-text classifier whose labels are read as their words (label_text_ids from the tokenizer, as
    from_backbone and train.py give them), not as bare markers."""
    ids = own_label_text_ids(tokenizer, LABELS, settings.get("label_descriptions"))
    if backbone in DECODERS and settings.get("label_text_pooling") == "marker":
        # A causal decoder's marker (first in its segment) attends to itself alone: every label would get the same
        # vector, in transformers as in vLLM. Its labels are read as the mean over their segment.
        settings = {**settings, "label_text_pooling": "mean"}
    return save(folder, tokenizer, backbone, "label_text", label_text_ids=ids, **settings)


# The label-text checkpoints: each family with one scorer, each scorer on vLLM's decoders and on the transformers route
# (ModernBERT with both; XLM-RoBERTa, vLLM's BERT with RoBERTa's positions, shared: BERT's in test_labels.py); the scorer, the label vectors and the activation are the pooler's
# and the head's, the same code on every family, and the families differ in the input path they all run.
LABEL_TEXT_CASES = [
    ("xlm-roberta", "shared"),
    ("modernbert", "per_label"),
    ("modernbert", "shared"),
    ("qwen2", "shared"),
    ("qwen3", "per_label"),
    ("gemma3_text", "shared"),
    ("gemma3", "per_label"),
    ("llama", "shared"),
    ("deberta-v2", "per_label"),
    ("distilbert", "shared"),
    ("electra", "per_label"),
    ("albert", "shared"),
    ("mpnet", "per_label"),
]


@pytest.fixture(scope="module", params=LABEL_TEXT_CASES, ids=lambda param: "-".join(param))
def served(request, tokenizer, tmp_path_factory):
    """(backbone, scorer, checkpoint folder, vLLM's LLM on it with the zero-shot plugin): one engine per checkpoint."""
    backbone, scorer = request.param
    ensure_zero_shot_entry_point(tmp_path_factory.mktemp("entry_point"))
    folder = label_text_checkpoint(
        tmp_path_factory.mktemp(f"{backbone}-{scorer}"), tokenizer, backbone, LABEL_TEXT[scorer]
    )
    with offline_engine(folder, io_processor_plugin=PLUGIN_NAME) as llm:
        yield backbone, scorer, folder, llm


def test_label_text_classifies_as_transformers(served):
    backbone, scorer, folder, llm = served
    assert served_route(llm) == FAMILIES[backbone]
    logits = transformers_logits(folder)
    assert (
        logits.std(dim=-1).min() > 1e-3
    )  # the labels' words tell them apart (a label of markers alone would not)
    torch.testing.assert_close(classify(llm, use_activation=False), logits, atol=TOLERANCE, rtol=0)
    multi_label = LABEL_TEXT[scorer].get("problem_type") == "multi_label_classification"
    expected = logits.sigmoid() if multi_label else logits.softmax(-1)
    torch.testing.assert_close(classify(llm), expected, atol=TOLERANCE, rtol=0)


def test_the_open_label_set_answers_as_the_zero_shot_pipeline(served):
    _, scorer, folder, llm = served
    # The shared scorer reads labels the model never saw; per_label scores its own (described "fear" included).
    labels = UNSEEN if scorer == "shared" else [LABELS[2], LABELS[0]]
    for multi_label in (False, True):
        expected = zero_shot_pipeline_answer(folder, ZERO_SHOT_TEXTS, labels, multi_label)
        (output,) = llm.encode(
            {"data": {"texts": ZERO_SHOT_TEXTS, "candidate_labels": labels, "multi_label": multi_label}},
            pooling_task="plugin",
            use_tqdm=False,
        )
        assert_same_answer(output.outputs, expected, TOLERANCE)


def without_special_tokens(tokenizer, folder):
    """The tokenizer with no special tokens around a text (as Qwen's puts none), saved to ``folder``."""
    tokenizer.save_pretrained(folder)
    saved = json.loads((folder / "tokenizer.json").read_text())
    saved["post_processor"] = None
    (folder / "tokenizer.json").write_text(json.dumps(saved))
    plain = PreTrainedTokenizerFast.from_pretrained(folder)
    assert plain("x")["input_ids"] == tokenizer("x", add_special_tokens=False)["input_ids"]
    return plain


# (backbone, label_token_position, whether the tokenizer puts special tokens around a text); the defaults of every
# family (after MiniLM's [CLS]), then the two other places a tokenizer's template can put the label tokens: first, with
# a tokenizer that puts no special token (Qwen's default; its vocabulary padded past the tokenizer, as Qwen's is), and
# after the text.
LABEL_TOKEN_CASES = {
    **{backbone: (backbone, 1, True) for backbone in FAMILIES},
    "qwen3-no_special_tokens-padded_vocabulary": ("qwen3", 0, False),
    "llama-after_the_text": ("llama", -1, True),
}


@pytest.mark.parametrize("case", sorted(LABEL_TOKEN_CASES))
def test_label_tokens_with_the_serving_tokenizer_classify_as_transformers(case, tokenizer, tmp_path):
    backbone, position, specials = LABEL_TOKEN_CASES[case]
    if not specials:
        tokenizer = without_special_tokens(tokenizer, tmp_path / "plain_tokenizer")
    folder = save(
        tmp_path / "model",
        tokenizer,
        backbone,
        "label_tokens",
        padded_vocabulary=0 if specials else 7,
        label_token_init="random",
        label_token_position=position,
    )
    serving_tokenizer = write_serving_tokenizer(folder, tmp_path / "serving_tokenizer")
    texts = [text for text in TEXTS if text]  # without special tokens, an empty text is an empty prompt
    logits = transformers_logits(folder, texts)
    with offline_engine(folder, tokenizer=str(serving_tokenizer)) as llm:
        assert served_route(llm) == FAMILIES[backbone]
        torch.testing.assert_close(classify(llm, texts, use_activation=False), logits, atol=TOLERANCE, rtol=0)
        torch.testing.assert_close(classify(llm, texts), logits.softmax(-1), atol=TOLERANCE, rtol=0)


def test_label_tokens_refuse_a_tokenizer_without_them_and_none_is_written_inside_the_text(
    tokenizer, tmp_path
):
    folder = save(tmp_path / "model", tokenizer, "qwen3", "label_tokens", label_token_init="random")
    with pytest.raises(ValueError, match="python -m pooled_models.serving.label_tokens FOLDER") as refused:
        with offline_engine(folder):  # the checkpoint's own tokenizer: no label tokens in its prompts
            pass
    assert "label_token_position=1" in str(refused.value) and "pipeline(" in str(refused.value)
    inside = save(
        tmp_path / "inside",
        tokenizer,
        "qwen3",
        "label_tokens",
        label_token_init="random",
        label_token_position=2,
    )
    with pytest.raises(
        ValueError, match="label_token_position=2 puts the label tokens after 2 tokens, inside"
    ) as refused:
        write_serving_tokenizer(inside, tmp_path / "serving_tokenizer")
    assert "TemplateProcessing" in str(refused.value) and "1 special token(s) before a text" in str(
        refused.value
    )


def test_a_decoder_serves_label_text_over_http(tokenizer, tmp_path):
    """Qwen3 with the shared scorer behind the server: /classify as pipeline("text-classification"), /pooling's open
    label set as pipeline("zero-shot-classification")."""
    env = ensure_zero_shot_entry_point(tmp_path / "entry_point")
    settings = {"label_text_scorer": "shared", "label_descriptions": DESCRIPTIONS}
    folder = label_text_checkpoint(tmp_path / "model", tokenizer, "qwen3", settings)
    expected = pipeline("text-classification", model=str(folder), top_k=None)(TEXTS)
    zero_shot = zero_shot_pipeline_answer(folder, ZERO_SHOT_TEXTS, UNSEEN, False)
    args = ["--io-processor-plugin", PLUGIN_NAME]
    with Server(folder, tmp_path / "server.log", extra_env=env, extra_args=args) as server:
        answer = server.post("/classify", {"input": TEXTS})
        open_set = server.post("/pooling", {"data": {"texts": ZERO_SHOT_TEXTS, "candidate_labels": UNSEEN}})
    for text_scores, item in zip(expected, answer["data"], strict=True):
        served = {LABELS[index]: score for index, score in enumerate(item["probs"])}
        assert served == pytest.approx(
            {entry["label"]: entry["score"] for entry in text_scores}, abs=TOLERANCE
        )
    assert_same_answer(open_set["data"], zero_shot, TOLERANCE)


@pytest.fixture(scope="module")
def multitask(tokenizer, tmp_path_factory):
    """A multi-task checkpoint with a label-text task, a label-token task and a plain one, and transformers' logits of
    every task for TEXTS."""
    folder = tmp_path_factory.mktemp("multitask")
    topic = {"kind": "sequence", "pooling": "label_text", "label_text_scorer": "shared", "id2label": LABELS}
    topic["label_text_ids"] = own_label_text_ids(tokenizer, LABELS, None)
    intent = {
        "kind": "sequence",
        "pooling": "label_tokens",
        "label_token_init": "random",
        "id2label": {0: "a", 1: "b"},
    }
    tasks = {
        "topic": topic,
        "intent": intent,
        "team": {"kind": "sequence", "pooling": "mean", "num_labels": 2},
    }
    backbone = tiny_backbone("bert", len(tokenizer), tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = PooledForMultiTask(PooledMultiTaskConfig(backbone_config=backbone, tasks=tasks)).eval()
    move_parameters(model)
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    with torch.no_grad():
        outputs = model(**tokenizer(TEXTS, padding=True, return_tensors="pt"))
    model.export_head("topic", folder / "topic", tokenizer=tokenizer)
    return folder, {task: output.logits for task, output in outputs.items()}


def test_a_label_text_task_of_a_multitask_model_is_served_as_its_exported_head(multitask, tmp_path):
    """classify as transformers; the open label set as the zero-shot pipeline answers on the task's export_head."""
    folder, logits = multitask
    ensure_zero_shot_entry_point(tmp_path / "entry_point")
    zero_shot = zero_shot_pipeline_answer(folder / "topic", ZERO_SHOT_TEXTS, UNSEEN, True)
    served = {"hf_overrides": {"served_task": "topic"}, "io_processor_plugin": PLUGIN_NAME}
    with offline_engine(folder / "model", **served) as llm:
        torch.testing.assert_close(
            classify(llm, use_activation=False), logits["topic"], atol=TOLERANCE, rtol=0
        )
        data = {"texts": ZERO_SHOT_TEXTS, "candidate_labels": UNSEEN, "multi_label": True}
        (output,) = llm.encode({"data": data}, pooling_task="plugin", use_tqdm=False)
    assert_same_answer(output.outputs, zero_shot, TOLERANCE)


def test_a_label_token_task_of_a_multitask_model_is_served_with_its_serving_tokenizer(multitask, tmp_path):
    folder, logits = multitask
    with pytest.raises(ValueError, match="name the label-token task with --task"):
        write_serving_tokenizer(folder / "model", tmp_path / "serving_tokenizer")
    serving_tokenizer = write_serving_tokenizer(
        folder / "model", tmp_path / "serving_tokenizer", task="intent"
    )
    served = {"hf_overrides": {"served_task": "intent"}, "tokenizer": str(serving_tokenizer)}
    with offline_engine(folder / "model", **served) as llm:
        torch.testing.assert_close(
            classify(llm, use_activation=False), logits["intent"], atol=TOLERANCE, rtol=0
        )
