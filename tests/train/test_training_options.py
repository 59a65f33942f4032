"""train.py's training options beyond the defaults: layer-wise learning-rate decay, label smoothing and the
label-token embeddings' own rate and weight decay. The options removed in 0.3: tests/train/test_removed_options.py."""

import json

import pytest
import torch
from helpers import (
    FAST,
    MULTITASK_TASKS,
    leftovers,
    multi_label_rows,
    random_batch,
    tiny_model,
    tiny_multitask_model,
    topic_rows,
    train,
    write_rows,
)
from torch import nn
from torch.nn import functional as F
from transformers import TrainerCallback
from transformers.trainer_pt_utils import LabelSmoother

from pooled_models.errors import UsageError
from pooled_models.modeling.losses import classification_loss
from pooled_models.train.arguments import PooledTrainingArguments, parse_arguments, parser
from pooled_models.train.cli import run
from pooled_models.train.options import head_parameters
from pooled_models.train.options.layerwise_decay import layerwise_learning_rates
from pooled_models.train.trainer import PooledTrainer, check_training_options

LEARNING_RATE, HEAD_LEARNING_RATE = 1e-3, 1e-2


def training_arguments(tmp_path, **settings) -> PooledTrainingArguments:
    settings = {"learning_rate": LEARNING_RATE, "head_learning_rate": HEAD_LEARNING_RATE, **settings}
    return PooledTrainingArguments(output_dir=str(tmp_path), report_to="none", **settings)


def optimizer_rates(model, args) -> dict[str, float]:
    """Parameter name -> the learning rate of its param group in the optimizer PooledTrainer builds."""
    optimizer = PooledTrainer(model=model, args=args).create_optimizer()
    rate_of = {
        id(parameter): group["lr"] for group in optimizer.param_groups for parameter in group["params"]
    }
    return {name: rate_of[id(parameter)] for name, parameter in model.named_parameters()}


# ----------------------------------------------------------------------------------------------------
# Layer-wise learning-rate decay
# ----------------------------------------------------------------------------------------------------

# Per family: where a layer's number sits in the backbone's parameter names, the embeddings' names, and the names
# above the last layer (which train at the full rate).
FAMILIES = {
    "bert": ("encoder.layer.{}.", ("embeddings.",), ()),
    "distilbert": ("transformer.layer.{}.", ("embeddings.",), ()),
    "modernbert": ("layers.{}.", ("embeddings.",), ("final_norm.",)),
    "gpt2": ("h.{}.", ("wte.", "wpe."), ("ln_f.",)),
    "llama": ("layers.{}.", ("embed_tokens.",), ("norm.",)),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_layerwise_decay_lowers_the_rate_one_step_per_layer_below_the_top(tmp_path, family):
    layer, embeddings, above = FAMILIES[family]
    pooling = "last_token" if family in ("gpt2", "llama") else "mean"
    model = tiny_model(pooling, backbone=family)  # two layers
    rates = optimizer_rates(model, training_arguments(tmp_path, layerwise_lr_decay=0.5))
    expected_kinds = set()
    for name, rate in rates.items():
        inner = name.removeprefix("backbone.")
        if name.startswith("classifier."):
            kind, expected = "head", HEAD_LEARNING_RATE
        elif inner.startswith(layer.format(1)):
            kind, expected = "top layer", LEARNING_RATE
        elif inner.startswith(layer.format(0)):
            kind, expected = "layer below", LEARNING_RATE * 0.5
        elif inner.startswith(embeddings):
            kind, expected = "embeddings", LEARNING_RATE * 0.25
        elif inner.startswith(above):
            kind, expected = "above the layers", LEARNING_RATE
        else:
            raise AssertionError(f"{name}: a parameter this test does not expect")
        assert rate == pytest.approx(expected), name
        expected_kinds.add(kind)
    assert {"head", "top layer", "layer below", "embeddings"} <= expected_kinds
    assert ("above the layers" in expected_kinds) == bool(above)


def test_no_layerwise_decay_keeps_one_backbone_rate_and_the_head_rate(tmp_path):
    model = tiny_model("mean")
    head = head_parameters(model)
    for args in (training_arguments(tmp_path), training_arguments(tmp_path, layerwise_lr_decay=1.0)):
        trainer = PooledTrainer(model=model, args=args)
        assert (
            set(trainer.parameter_learning_rates(model)) == head
        )  # only the head is given a rate of its own
        rates = optimizer_rates(model, args)
        assert {rate for name, rate in rates.items() if not name.startswith("classifier.")} == {LEARNING_RATE}


def test_layerwise_decay_runs_through_train_py(tiny_backbone_path, tmp_path, one_torch_thread):
    seen = {}

    class RecordRates(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
            # initial_lr: the rate the scheduler scales (warmup starts the current one at 0)
            seen["rates"] = sorted({group["initial_lr"] for group in optimizer.param_groups})

    data = write_rows(tmp_path / "train.csv", topic_rows(16))
    flags = [
        "--train_file",
        str(data),
        "--do_train",
        "--num_train_epochs",
        "1",
        "--layerwise_lr_decay",
        "0.5",
    ]
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        *flags,
        "--head_learning_rate",
        "1e-2",
        callbacks=[RecordRates()],
    )
    # FAST's learning rate 1e-3 for the top layer, halved per layer below (two layers), then the embeddings
    assert seen["rates"] == pytest.approx([2.5e-4, 5e-4, 1e-3, 1e-2])
    assert "| layer-wise learning-rate decay | 0.5 |" in (result.output_dir / "README.md").read_text()


@pytest.mark.parametrize("value", ["0", "-0.5", "1.5", "nan"])
def test_layerwise_decay_outside_its_range_is_refused(value):
    with pytest.raises(UsageError, match=r"layerwise_lr_decay must be a number in \(0, 1\], got"):
        parse_arguments(["--output_dir", "out", "--layerwise_lr_decay", value])


def test_layerwise_decay_refuses_a_backbone_without_numbered_layers(tmp_path):
    unnumbered = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 4))
    with pytest.raises(UsageError, match=r"layerwise_lr_decay=0.8 needs the backbone's layers numbered"):
        layerwise_learning_rates(unnumbered, 1e-3, 0.8)

    class Vanilla(nn.Module):  # what backbone_of takes for a model that is not a pooled one: its base_model
        base_model = unnumbered

    with pytest.raises(UsageError, match="Leave layerwise_lr_decay at 1.0"):
        check_training_options(Vanilla(), training_arguments(tmp_path, layerwise_lr_decay=0.8))
    check_training_options(Vanilla(), training_arguments(tmp_path))  # off: nothing to check


def test_layerwise_rates_follow_the_formula_for_deeper_backbones():
    backbone = nn.Module()
    backbone.embeddings = nn.Embedding(5, 4)
    backbone.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(6))
    backbone.final_norm = nn.LayerNorm(4)
    rates = layerwise_learning_rates(backbone, 1.0, 0.8)
    for number, layer in enumerate(backbone.layers):
        assert rates[id(layer.weight)] == pytest.approx(0.8 ** (5 - number))
    assert rates[id(backbone.embeddings.weight)] == pytest.approx(0.8**6)
    assert rates[id(backbone.final_norm.weight)] == 1.0


# ----------------------------------------------------------------------------------------------------
# The label-token embeddings' own learning rate and weight decay
# ----------------------------------------------------------------------------------------------------


def optimizer_groups(model, args) -> dict[str, tuple[float, float]]:
    """Parameter name -> (learning rate, weight decay) of its param group in the optimizer PooledTrainer builds."""
    optimizer = PooledTrainer(model=model, args=args).create_optimizer()
    group_of = {
        id(parameter): (group["lr"], group["weight_decay"])
        for group in optimizer.param_groups
        for parameter in group["params"]
    }
    return {name: group_of[id(parameter)] for name, parameter in model.named_parameters()}


LABEL_EMBEDDINGS = "classifier.pooler.label_embeddings.weight"


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({}, (HEAD_LEARNING_RATE, 0.01)),  # unset: the pooler's rate and the run's weight decay
        ({"label_embedding_learning_rate": 5e-4}, (5e-4, 0.01)),
        ({"label_embedding_weight_decay": 0.0}, (HEAD_LEARNING_RATE, 0.0)),
        ({"label_embedding_learning_rate": 0.0, "label_embedding_weight_decay": 0.5}, (0.0, 0.5)),
    ],
)
def test_the_label_embeddings_train_with_their_own_rate_and_weight_decay(tmp_path, settings, expected):
    model = tiny_model("label_tokens", label_token_init="random")
    groups = optimizer_groups(model, training_arguments(tmp_path, weight_decay=0.01, **settings))
    assert groups[LABEL_EMBEDDINGS] == pytest.approx(expected)
    # Everything else as without the settings: the rest of the head at its rate, the backbone at its own.
    assert groups["classifier.head.weight"] == pytest.approx((HEAD_LEARNING_RATE, 0.01))
    assert groups["backbone.encoder.layer.0.attention.self.query.weight"] == pytest.approx(
        (LEARNING_RATE, 0.01)
    )
    assert groups["backbone.encoder.layer.0.attention.self.query.bias"] == pytest.approx((LEARNING_RATE, 0.0))


def test_label_embedding_settings_name_the_pooling_they_need(tmp_path):
    args = training_arguments(tmp_path, label_embedding_learning_rate=1e-4, label_embedding_weight_decay=0.0)
    with pytest.raises(
        UsageError,
        match=r"label_embedding_learning_rate and label_embedding_weight_decay set how the label-token embeddings "
        r"train, but this model has none \(they come with pooling='label_tokens'\)",
    ):
        check_training_options(tiny_model("mean"), args)
    check_training_options(tiny_model("label_tokens", label_token_init="random"), args)


@pytest.mark.parametrize("name", ["label_embedding_learning_rate", "label_embedding_weight_decay"])
def test_a_negative_label_embedding_setting_is_refused(name):
    with pytest.raises(UsageError, match=rf"{name} must be a number >= 0 \(or unset\), got -0.1"):
        parse_arguments(["--output_dir", "out", f"--{name}", "-0.1"])


def test_the_label_embedding_rate_runs_through_train_py_and_the_card_says_so(
    tiny_backbone_path, tmp_path, one_torch_thread
):
    seen = {}

    class RecordRates(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
            seen["rates"] = sorted({group["initial_lr"] for group in optimizer.param_groups})

    data = write_rows(tmp_path / "train.csv", topic_rows(16))
    result = train(
        tiny_backbone_path,
        tmp_path / "out",
        *["--train_file", str(data), "--do_train", "--num_train_epochs", "1", "--pooling", "label_tokens"],
        *["--head_learning_rate", "1e-2", "--label_embedding_learning_rate", "1e-4"],
        callbacks=[RecordRates()],
    )
    assert seen["rates"] == pytest.approx([1e-4, 1e-3, 1e-2])  # label embeddings, backbone (FAST's), head
    assert "| learning rate (label embeddings) | 0.0001 |" in (result.output_dir / "README.md").read_text()


# ----------------------------------------------------------------------------------------------------
# Label smoothing
# ----------------------------------------------------------------------------------------------------

LENGTHS = [5, 3, 4, 6]


def smoothed_step(model, labels, tmp_path, epsilon=0.1, training=True, **inputs):
    """(loss, outputs) of PooledTrainer.compute_loss on a batch of four texts, in training or evaluation mode."""
    trainer = PooledTrainer(model=model, args=training_arguments(tmp_path, label_smoothing_factor=epsilon))
    model.train(training)
    batch = {**random_batch(LENGTHS), "labels": labels, **inputs}
    return trainer.compute_loss(model, batch, return_outputs=True)


def test_single_label_smoothing_is_smoothed_cross_entropy_in_training_only(tmp_path):
    model = tiny_model("mean", num_labels=3)
    labels = torch.tensor([0, 2, 1, 2])
    loss, outputs = smoothed_step(model, labels, tmp_path)
    assert loss.item() == pytest.approx(F.cross_entropy(outputs.logits, labels, label_smoothing=0.1).item())
    assert loss.item() != pytest.approx(F.cross_entropy(outputs.logits, labels).item())
    # what transformers' LabelSmoother computes for a single-label head: the same loss as before
    assert loss.item() == pytest.approx(LabelSmoother(epsilon=0.1)(outputs, labels).item())
    loss, outputs = smoothed_step(model, labels, tmp_path, training=False)
    assert loss.item() == pytest.approx(
        F.cross_entropy(outputs.logits, labels).item()
    )  # evaluation: unsmoothed


def test_multi_label_smoothing_pulls_each_target_towards_one_half(tmp_path):
    labels = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    model = tiny_model(
        "mean", num_labels=3, problem_type="multi_label_classification", multi_label_loss="bce"
    )
    loss, outputs = smoothed_step(model, labels, tmp_path)
    expected = F.binary_cross_entropy_with_logits(outputs.logits, labels * 0.9 + 0.05)
    assert loss.item() == pytest.approx(expected.item())
    # train.py's multi-label default, the asymmetric loss, is computed on the smoothed targets the same way
    model = tiny_model(
        "mean", num_labels=3, problem_type="multi_label_classification", multi_label_loss="asymmetric"
    )
    loss, outputs = smoothed_step(model, labels, tmp_path)
    expected = classification_loss(outputs.logits, labels * 0.9 + 0.05, model.config)
    assert loss.item() == pytest.approx(expected.item())
    assert loss.item() != pytest.approx(classification_loss(outputs.logits, labels, model.config).item())


def test_label_smoothing_in_a_multitask_model_follows_each_tasks_problem_type(tmp_path):
    model = tiny_multitask_model()
    check_training_options(
        model, training_arguments(tmp_path, label_smoothing_factor=0.1)
    )  # urgency is left as is

    labels = torch.tensor([0, 2, 1, 2])
    loss, outputs = smoothed_step(model, labels, tmp_path, task="team")
    assert loss.item() == pytest.approx(F.cross_entropy(outputs.logits, labels, label_smoothing=0.1).item())

    multi_hot = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    loss, outputs = smoothed_step(model, multi_hot, tmp_path, task="topics")
    expected = F.binary_cross_entropy_with_logits(
        outputs.logits, multi_hot * 0.9 + 0.05
    )  # the task's loss: BCE
    assert loss.item() == pytest.approx(expected.item())

    scores = torch.tensor([0.5, -1.0, 2.0, 0.0])
    loss, outputs = smoothed_step(model, scores, tmp_path, task="urgency")
    assert loss.item() == pytest.approx(F.mse_loss(outputs.logits.squeeze(-1), scores).item())

    tags = torch.tensor(
        [[1, 2, 0, 0, 3, -100], [0, 0, 4, -100, -100, -100], [3, 4, 0, 0, -100, -100], [0] * 6]
    )
    loss, outputs = smoothed_step(model, tags, tmp_path, task="entities")
    expected = F.cross_entropy(
        outputs.logits.flatten(0, 1), tags.flatten(), ignore_index=-100, label_smoothing=0.1
    )
    assert loss.item() == pytest.approx(expected.item())


def test_label_smoothing_is_refused_where_nothing_would_be_smoothed(tmp_path):
    args = training_arguments(tmp_path, label_smoothing_factor=0.1)
    regression = tiny_model("mean", num_labels=1, problem_type="regression")
    with pytest.raises(
        UsageError, match="label_smoothing_factor=0.1 smooths class targets, and this run's labels"
    ):
        check_training_options(regression, args)
    only_regression = tiny_multitask_model(tasks={"urgency": MULTITASK_TASKS["urgency"]})
    with pytest.raises(UsageError, match="every task of this run is a regression task"):
        check_training_options(only_regression, args)
    check_training_options(regression, training_arguments(tmp_path))  # off: nothing to refuse


@pytest.mark.parametrize("value", ["1", "-0.1", "1.5"])
def test_label_smoothing_outside_its_range_is_refused(value):
    with pytest.raises(UsageError, match=r"label_smoothing_factor must be a number in \[0, 1\), got"):
        parse_arguments(["--output_dir", "out", "--label_smoothing_factor", value])


def test_help_says_what_label_smoothing_does_for_each_kind_of_head():
    text = " ".join(parser().format_help().split())
    assert "--label_smoothing_factor" in text
    assert "multi-label runs train their multi-label loss on targets y * (1 - epsilon) + epsilon / 2" in text


def test_a_multi_label_train_py_run_is_smoothed_not_left_unsmoothed(
    tiny_backbone_path, tmp_path, one_torch_thread
):
    # transformers' Trainer turns smoothing off for a multi-label model: the two runs would train alike
    data = write_rows(tmp_path / "train.jsonl", multi_label_rows(32))
    flags = ["--train_file", str(data), "--do_train", "--num_train_epochs", "1"]
    plain = train(tiny_backbone_path, tmp_path / "plain", *flags)
    smoothed = train(tiny_backbone_path, tmp_path / "smoothed", *flags, "--label_smoothing_factor", "0.1")
    assert smoothed.metrics["train_loss"] != pytest.approx(plain.metrics["train_loss"])
    assert "| label smoothing | 0.1 |" in (smoothed.output_dir / "README.md").read_text()


def test_a_config_setting_of_a_value_its_type_refuses_stops_the_run_by_name(tiny_backbone_path, tmp_path):
    # the typed config raises huggingface_hub's StrictDataclassError, which is no ValueError: train.py must still
    # turn it into its one-line usage error, naming the setting and its choices, before anything is written
    data = write_rows(tmp_path / "train.jsonl", topic_rows(8))
    config = tmp_path / "run.json"
    config.write_text(
        json.dumps({"train_file": str(data), "do_train": True, "label_token_attention": "sideways"})
    )
    output_dir = tmp_path / "out"
    with pytest.raises(UsageError, match=r"(?s)label_token_attention.*'two_way', 'one_way'.*got sideways"):
        run([str(config), "--model_name_or_path", tiny_backbone_path, "--output_dir", str(output_dir), *FAST])
    assert leftovers(output_dir) == []


def test_the_document_gate_rate_is_an_option_and_the_card_gives_the_rate_the_optimizer_used():
    """first_plus_rest's gate trains at ten times its head's rate unless told (options/document_gate.py); the card
    reads the rate off the optimizer's group (its starting rate), not off the arguments (issue 54, item 3)."""
    from types import SimpleNamespace

    from helpers import tiny_model

    from pooled_models.modeling.window_pooling import document_gate_parameters
    from pooled_models.train.options import TRAINING_OPTIONS

    option = TRAINING_OPTIONS["document_gate_learning_rate"]
    model = tiny_model("mean", document_window=12)  # first_plus_rest, document mode's default
    (gate,) = document_gate_parameters(model)
    unset = SimpleNamespace(document_gate_learning_rate=None, learning_rate=1e-4)
    assert option.learning_rates(model, unset, {gate: 0.01}) == {gate: pytest.approx(0.1)}
    assert option.learning_rates(model, unset, {}) == {gate: pytest.approx(1e-3)}  # the run's rate, times ten
    given = SimpleNamespace(document_gate_learning_rate=0.02, learning_rate=1e-4)
    assert option.learning_rates(model, given, {gate: 0.01}) == {gate: 0.02}
    assert option.learning_rates(tiny_model("mean"), given, {}) == {}  # no gate, nothing to rate
    # The card: the gate's group's starting rate, though the schedule has moved it and the arguments say another.
    gate_parameter = next(p for p in model.parameters() if id(p) == gate)
    others = [p for p in model.parameters() if id(p) != gate]
    optimizer = torch.optim.AdamW([{"params": others, "lr": 1e-4}, {"params": [gate_parameter], "lr": 0.37}])
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    optimizer.step()  # no gradients: moves nothing, but steps in the order torch expects
    schedule.step()
    assert option.card_row(unset, model, optimizer) == {"learning rate (cross-window gate)": 0.37}
    assert option.card_row(unset, model, None) == {}  # not trained: no row
    assert option.card_row(given, tiny_model("mean"), optimizer) == {}  # no gate in the model
