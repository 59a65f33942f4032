"""Multi-sample dropout (classifier_dropout_samples): in training the head's logits are the mean of K runs with their
own dropout masks; in evaluation one run without dropout. A model setting: checked, saved, reloaded, overridden at
load time, refused as an edit of a built model, and available to every kind of head (sequence, label tokens, token,
multi-task)."""

import json

import pytest
import torch
from helpers import (
    ENTITY_LABELS,
    MULTITASK_TASKS,
    random_batch,
    tiny_backbone_config,
    tiny_model,
    tiny_multitask_model,
)
from huggingface_hub.errors import StrictDataclassFieldValidationError
from torch.nn import functional as F

from pooled_models import (
    PooledConfig,
    PooledForSequenceClassification,
    PooledForTokenClassification,
)

SAMPLES = 4
DROPOUT = 0.5  # large, so that one sample differs clearly from another


def msd_model(samples: int = SAMPLES, **settings):
    settings.setdefault("classifier_dropout", DROPOUT)
    return tiny_model("mean", classifier_dropout_samples=samples, **settings)


def hand_linear(head, pooled: torch.Tensor) -> torch.Tensor:
    """One run of a linear head, its dropout applied by hand."""
    return head.out_proj(F.dropout(pooled, DROPOUT, training=True))


def hand_dense(head, pooled: torch.Tensor) -> torch.Tensor:
    """One run of a dense head: dropout, dense, activation, dropout, projection."""
    hidden = head.activation(head.dense(F.dropout(pooled, DROPOUT, training=True)))
    return head.out_proj(F.dropout(hidden, DROPOUT, training=True))


def mean_of_hand_runs(run, head, features: torch.Tensor, samples: int = SAMPLES) -> torch.Tensor:
    return torch.stack([run(head, features) for _ in range(samples)]).mean(dim=0)


def forward_recording(model, head, **inputs):
    """``model(**inputs)``, the features ``head`` was given in it, and the random state before its first run: the
    state from which it drew its dropout masks."""
    seen = {}

    def record(_head, args):
        if not seen:  # the first of the K runs
            seen.update(features=args[0], random_state=torch.get_rng_state())

    handle = head.register_forward_pre_hook(record)
    try:
        output = model(**inputs)
    finally:
        handle.remove()
    return output, seen["features"], seen["random_state"]


def hand_runs_from(random_state, run, head, features, samples: int = SAMPLES) -> torch.Tensor:
    """The mean of ``samples`` hand-made runs, drawing their masks from ``random_state`` on (as the head did)."""
    torch.set_rng_state(random_state)
    return mean_of_hand_runs(run, head, features, samples)


# ----------------------------------------------------------------------------------------------------
# What the head computes
# ----------------------------------------------------------------------------------------------------


def head_runs(model, **inputs) -> int:
    """How many times the model's head ran in ``model(**inputs)``."""
    calls = []
    handle = model.classifier.head.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        model(**inputs)
    finally:
        handle.remove()
    return len(calls)


def test_evaluation_runs_the_head_once_without_dropout_as_with_one_sample():
    batch = random_batch([5, 8, 3])
    model = msd_model()
    with torch.no_grad():
        one, several = msd_model(samples=1)(**batch).logits, model(**batch).logits
        assert head_runs(model, **batch) == 1
    torch.testing.assert_close(several, one, rtol=0, atol=0)
    assert head_runs(model.train(), **batch) == SAMPLES


@pytest.mark.parametrize(("head", "run"), [("linear", hand_linear), ("dense", hand_dense)])
def test_training_logits_are_the_mean_of_the_samples_each_with_its_own_masks(head, run):
    model = msd_model(classifier_head=head).train()
    output, pooled, random_state = forward_recording(model, model.classifier.head, **random_batch([5, 8, 3]))
    torch.testing.assert_close(
        output.logits, hand_runs_from(random_state, run, model.classifier.head, pooled)
    )
    torch.set_rng_state(random_state)
    assert not torch.allclose(output.logits, run(model.classifier.head, pooled))  # K masks, not one


def test_one_sample_in_training_is_the_plain_head():
    model = msd_model(samples=1).train()
    output, pooled, random_state = forward_recording(model, model.classifier.head, **random_batch([5, 8]))
    torch.set_rng_state(random_state)
    torch.testing.assert_close(output.logits, hand_linear(model.classifier.head, pooled))


def test_gradients_reach_the_head_and_the_backbone_as_those_of_the_averaged_runs():
    model = msd_model().train()
    reference = msd_model().train()
    batch, labels = random_batch([5, 8, 3]), torch.tensor([0, 2, 1])
    torch.manual_seed(1)
    model(**batch, labels=labels).loss.backward()
    torch.manual_seed(1)
    pooled = reference.embed(**batch)
    F.cross_entropy(mean_of_hand_runs(hand_linear, reference.classifier.head, pooled), labels).backward()
    for (name, parameter), expected in zip(model.named_parameters(), reference.parameters(), strict=True):
        if expected.grad is None:
            assert parameter.grad is None, name
            continue
        torch.testing.assert_close(parameter.grad, expected.grad, msg=name)
    assert model.classifier.head.out_proj.weight.grad.abs().sum() > 0
    assert model.backbone.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_label_token_heads_average_their_samples_too():
    settings = {"label_token_init": "random", "classifier_dropout": DROPOUT}
    several = tiny_model("label_tokens", classifier_dropout_samples=SAMPLES, **settings)
    one = tiny_model("label_tokens", **settings)
    batch = random_batch([5, 8])
    with torch.no_grad():
        torch.testing.assert_close(several(**batch).logits, one(**batch).logits, rtol=0, atol=0)

    def run(head, states):  # states [B, L, H]: each label's final state
        return (F.dropout(states, DROPOUT, training=True) * head.weight).sum(dim=-1) + head.bias

    several.train()
    output, states, random_state = forward_recording(several, several.classifier.head, **batch)
    torch.testing.assert_close(
        output.logits, hand_runs_from(random_state, run, several.classifier.head, states)
    )


def test_a_token_classifier_averages_its_samples_over_every_token():
    model = tiny_model(
        "mean",
        model_class=PooledForTokenClassification,
        id2label=ENTITY_LABELS,
        classifier_dropout=DROPOUT,
        classifier_dropout_samples=SAMPLES,
    ).train()
    output, hidden, random_state = forward_recording(
        model, model.classifier.token_head, **random_batch([5, 8])
    )
    expected = hand_runs_from(random_state, hand_linear, model.classifier.token_head, hidden)
    torch.testing.assert_close(output.logits, expected)


def test_multitask_sequence_and_token_tasks_take_their_own_number_of_samples(tmp_path):
    tasks = json.loads(json.dumps(MULTITASK_TASKS))  # a deep copy
    tasks["team"].update(classifier_dropout=DROPOUT, classifier_dropout_samples=3)
    tasks["entities"].update(classifier_dropout=DROPOUT, classifier_dropout_samples=2)
    model = tiny_multitask_model(tasks=tasks)
    heads = model.classifier.heads
    assert (heads["team"].dropout_samples, heads["entities"].dropout_samples) == (3, 2)
    assert heads["topics"].dropout_samples == 1
    batch = random_batch([5, 8])
    model.train()
    # With a task and without one (every head from one shared backbone pass), the team head averages its samples.
    for task in ("team", None):
        output, pooled, random_state = forward_recording(model, heads["team"].head, **batch, task=task)
        logits = (output if task else output["team"]).logits
        torch.testing.assert_close(
            logits, hand_runs_from(random_state, hand_linear, heads["team"].head, pooled, 3)
        )
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())["tasks"]
    assert (saved["team"]["classifier_dropout_samples"], saved["entities"]["classifier_dropout_samples"]) == (
        3,
        2,
    )
    reloaded = type(model).from_pretrained(tmp_path)
    assert reloaded.classifier.heads["team"].dropout_samples == 3
    assert reloaded.classifier.heads["entities"].dropout_samples == 2
    # A built head keeps its number of samples: an edit is refused, with the way out.
    with pytest.raises(ValueError, match=r"'classifier_dropout_samples' shapes the head of task 'team'"):
        reloaded.update_task("team", classifier_dropout_samples=2)
    reloaded.config.tasks["team"]["classifier_dropout_samples"] = 2
    with pytest.raises(ValueError, match=r"\['classifier_dropout_samples'\]=2 \(built with 3\)"):
        reloaded(**batch)


# ----------------------------------------------------------------------------------------------------
# The setting: checked, saved, reloaded, overridden
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -2])
def test_a_number_of_samples_below_one_is_refused(value):
    with pytest.raises(ValueError, match=r"classifier_dropout_samples must be an integer >= 1 \(1: off"):
        PooledConfig(backbone_config=tiny_backbone_config(), classifier_dropout_samples=value)


@pytest.mark.parametrize("value", [2.0, "4", True, None])
def test_a_number_of_samples_that_is_not_an_integer_is_refused_when_set(value):
    with pytest.raises(StrictDataclassFieldValidationError, match=r"field 'classifier_dropout_samples'"):
        PooledConfig(backbone_config=tiny_backbone_config(), classifier_dropout_samples=value)


def test_samples_without_dropout_are_refused_with_the_way_out():
    with pytest.raises(ValueError, match=r"classifier_dropout_samples=4 .* classifier_dropout is 0.*above 0"):
        PooledConfig(
            backbone_config=tiny_backbone_config(), classifier_dropout_samples=4, classifier_dropout=0.0
        )


def test_a_bad_edit_of_the_config_is_refused_when_validated():
    config = PooledConfig(backbone_config=tiny_backbone_config())
    config.classifier_dropout_samples = 0
    with pytest.raises(ValueError, match="classifier_dropout_samples must be an integer >= 1"):
        config.ensure_valid()


def test_a_multitask_task_with_a_bad_number_of_samples_is_refused_naming_the_task():
    tasks = json.loads(json.dumps(MULTITASK_TASKS))
    tasks["entities"]["classifier_dropout_samples"] = 0
    with pytest.raises(
        ValueError, match=r"tasks\['entities'\]: classifier_dropout_samples must be an integer"
    ):
        tiny_multitask_model(tasks=tasks)


def test_saved_reloaded_overridden_at_load_time_and_saved_again(tmp_path):
    model = msd_model()
    batch = random_batch([5, 8])
    model.save_pretrained(tmp_path / "first")
    assert (
        json.loads((tmp_path / "first" / "config.json").read_text())["classifier_dropout_samples"] == SAMPLES
    )
    reloaded = PooledForSequenceClassification.from_pretrained(tmp_path / "first").eval()
    assert reloaded.config.classifier_dropout_samples == SAMPLES
    assert reloaded.classifier.dropout_samples == SAMPLES
    overridden = PooledForSequenceClassification.from_pretrained(
        tmp_path / "first", classifier_dropout_samples=2
    )
    assert overridden.classifier.dropout_samples == 2
    overridden.save_pretrained(tmp_path / "second")
    again = PooledForSequenceClassification.from_pretrained(tmp_path / "second").eval()
    assert again.config.classifier_dropout_samples == 2 and again.classifier.dropout_samples == 2
    with torch.no_grad():  # evaluation is one run whatever the setting: the same logits all along
        torch.testing.assert_close(again(**batch).logits, model(**batch).logits)
    with pytest.raises(ValueError, match="classifier_dropout_samples must be an integer >= 1"):
        PooledForSequenceClassification.from_pretrained(tmp_path / "first", classifier_dropout_samples=0)


def test_an_edit_of_a_built_model_is_refused_with_the_way_out(tmp_path):
    model = msd_model()
    model.config.classifier_dropout_samples = 2
    with pytest.raises(ValueError, match=r"classifier_dropout_samples=2 \(built with 4\).*from_pretrained"):
        model(**random_batch([5, 8]))
    with pytest.raises(ValueError, match="changed after the model was built"):
        model.save_pretrained(tmp_path)


# ----------------------------------------------------------------------------------------------------
# Compiled and exported graphs
# ----------------------------------------------------------------------------------------------------


def test_training_mode_compiles_fullgraph_and_draws_the_same_masks():
    import torch._dynamo

    model = msd_model().train()
    batch, labels = random_batch([5, 8]), torch.tensor([0, 2])
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    torch.manual_seed(1)
    got = compiled(**batch, labels=labels)
    torch.manual_seed(1)
    expected = model(**batch, labels=labels)
    torch.testing.assert_close(got.logits, expected.logits)
    torch.testing.assert_close(got.loss, expected.loss)


# ONNX export: tests/modeling/test_compile_and_export.py's multi-task export gives one head multi-sample dropout.
