"""How the vLLM plugin serves token classifiers and multi-task models, decided on the config alone (no vLLM needed:
make test-vllm serves them): a token classifier never has its unused pooling refused, and a multi-task checkpoint
serves the one task its engine names with the served_task override, refused with the way to name one otherwise."""

import copy

import pytest
from helpers import MULTITASK_TASKS, tiny_backbone_config

from pooled_models import PooledConfig, PooledMultiTaskConfig
from pooled_models.serving.multitask_support import SERVED_TASK, served_task, task_architecture
from pooled_models.serving.support import multitask_refusal, refusal, served_tasks

TOKEN = "PooledForTokenClassification"
MULTITASK = "PooledForMultiTask"


def multitask_config(backbone: str = "bert", served: str | None = None, tasks=None) -> PooledMultiTaskConfig:
    config = PooledMultiTaskConfig(
        backbone_config=tiny_backbone_config(backbone), tasks=copy.deepcopy(tasks or MULTITASK_TASKS)
    )
    if served is not None:
        config.update({SERVED_TASK: served})  # what vLLM's hf_overrides does
    return config


def test_a_token_classifier_serves_token_classify():
    assert served_tasks(TOKEN) == ("token_classify",)


@pytest.mark.parametrize("backbone", ["bert", "roberta", "llama"])
def test_a_token_classifier_is_served_whatever_its_unused_pooling(backbone):
    # The pooling of a token classifier's config only gives AutoModel's embeddings: a pooling refused for a sequence
    # classifier (label text whose labels attend to the text) does not stop the token head from being served.
    config = PooledConfig(
        backbone_config=tiny_backbone_config(backbone),
        pooling="label_text",
        label_text_layers=1,
        id2label={0: "joy", 1: "anger", 2: "fear"},
    )
    assert refusal(config, "PooledForSequenceClassification") is not None
    assert refusal(config, TOKEN) is None


def test_a_token_classifier_on_a_backbone_the_plugin_cannot_serve_is_refused_by_name():
    from transformers import FunnelConfig

    funnel = FunnelConfig(d_model=64, n_head=2, d_head=32, d_inner=96, block_sizes=[1, 1], vocab_size=100)
    config = PooledConfig(backbone_config=funnel, pooling="mean", num_labels=3)
    message = refusal(config, TOKEN)
    assert message is not None and "'funnel' backbone" in message and "ONNX Runtime" in message


@pytest.mark.parametrize("task", list(MULTITASK_TASKS))
def test_each_task_of_a_multitask_model_is_served_as_its_standalone_architecture(task):
    config = multitask_config(served=task)
    assert served_task(config) == task
    expected = TOKEN if MULTITASK_TASKS[task]["kind"] == "token" else "PooledForSequenceClassification"
    assert task_architecture(config, task) == expected
    assert refusal(config, MULTITASK) is None


def test_a_multitask_model_without_a_served_task_is_refused_with_the_override_to_give():
    message = refusal(multitask_config(), MULTITASK)
    assert message is not None
    for words in ("one task of a PooledForMultiTask per engine", "hf_overrides={'served_task': 'team'}",
                  "--hf-overrides '{\"served_task\": \"team\"}'", ", ".join(MULTITASK_TASKS)):  # fmt: skip
        assert words in message, (words, message)


def test_an_unknown_served_task_is_refused_naming_the_tasks():
    message = multitask_refusal(multitask_config(served="sentiment"))
    assert message is not None and "served_task='sentiment' is not a task" in message
    assert ", ".join(MULTITASK_TASKS) in message
    with pytest.raises(ValueError, match="served_task='sentiment'"):
        served_task(multitask_config(served="sentiment"))


def test_a_single_task_model_needs_no_override():
    config = multitask_config(tasks={"entities": MULTITASK_TASKS["entities"]})
    assert served_task(config) == "entities" and refusal(config, MULTITASK) is None


def test_a_task_that_cannot_be_served_exactly_is_refused_naming_the_task():
    team = {**MULTITASK_TASKS["team"], "pooling": "label_text", "label_text_layers": 1}
    tasks = {"team": team, "entities": MULTITASK_TASKS["entities"]}
    message = refusal(multitask_config("bert", served="team", tasks=tasks), MULTITASK)
    assert message is not None and message.startswith("PooledForMultiTask task 'team': ")
    assert "label_text_layers=1" in message and "new_common_attn_metadata.causal = False" in message
    # The token task of the same checkpoint: served.
    assert refusal(multitask_config("bert", served="entities", tasks=tasks), MULTITASK) is None


@pytest.mark.parametrize("pooling", ["label_text", "label_tokens"])
def test_a_label_pooling_task_is_served_as_its_standalone_checkpoint_would_be(pooling):
    team = {**MULTITASK_TASKS["team"], "pooling": pooling}
    if pooling == "label_tokens":
        team["label_token_init"] = "random"
    tasks = {"team": team, "entities": MULTITASK_TASKS["entities"]}
    assert refusal(multitask_config("bert", served="team", tasks=tasks), MULTITASK) is None
