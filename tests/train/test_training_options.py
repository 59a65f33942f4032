"""train.py's training options beyond the defaults: layer-wise learning-rate decay, label smoothing, a linear probe
before fine-tuning (LP-FT) and an exponential moving average of the weights (EMA)."""

import pytest
from helpers import tiny_model, topic_rows, train, write_rows
from torch import nn
from transformers import TrainerCallback

from pooled_models.train.arguments import PooledTrainingArguments, parse_arguments
from pooled_models.train.errors import UsageError
from pooled_models.train.learning_rates import layerwise_learning_rates
from pooled_models.train.trainer import PooledTrainer, check_training_options, head_parameters

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
