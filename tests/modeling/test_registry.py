"""One registration idiom for every part: the README's example of a new pooling and a new head, and the registries'
own rules."""

import pytest
import torch
from helpers import random_batch, tiny_backbone_config

from pooled_models import (
    HEADS,
    LABEL_TOKEN_INITS,
    MULTI_LABEL_LOSSES,
    POOLINGS,
    Head,
    PooledConfig,
    PooledForSequenceClassification,
    TokenPooler,
    register_head,
    register_pooler,
)
from pooled_models.modeling.pooling import reduce_max, reduce_mean


@pytest.fixture
def custom_parts():
    """The README's pooling and head, registered for one test and removed after it."""

    @register_pooler("mean_plus_max")
    class MeanPlusMaxPooler(TokenPooler):
        """mean + max, element-wise."""

        def reduce(self, hidden_states, mask):
            return reduce_mean(hidden_states, mask) + reduce_max(hidden_states, mask)

    @register_head("two_layer")
    class TwoLayerHead(Head):
        """A dense layer of classifier_hidden_size, GELU, and the output layer."""

        config_options = {"classifier_hidden_size": 256}

        def __init__(self, config, input_dim):
            super().__init__(config, input_dim)
            self.net = torch.nn.Sequential(
                torch.nn.Dropout(config.classifier_dropout),
                torch.nn.Linear(input_dim, config.classifier_hidden_size),
                torch.nn.GELU(),
                torch.nn.Linear(config.classifier_hidden_size, config.num_labels),
            )

        def forward(self, pooled):
            return self.net(pooled)

    yield MeanPlusMaxPooler, TwoLayerHead
    del POOLINGS["mean_plus_max"], HEADS["two_layer"]


def test_a_registered_pooling_and_head_build_train_save_and_reload(custom_parts, tmp_path):
    config = PooledConfig(
        backbone_config=tiny_backbone_config(),
        pooling="mean_plus_max",
        classifier_head="two_layer",
        num_labels=3,
    )
    assert config.classifier_hidden_size == 256  # the head's default, filled in and saved
    model = PooledForSequenceClassification(config).eval()
    assert (
        isinstance(model.classifier.head.net[1], torch.nn.Linear)
        and model.classifier.head.net[1].out_features == 256
    )
    batch = random_batch([4, 7])
    hidden = model.backbone(**batch).last_hidden_state
    mask = batch["attention_mask"].bool()
    expected = reduce_mean(hidden, mask) + reduce_max(hidden, mask)
    torch.testing.assert_close(model.embed(**batch), expected)
    model(**batch, labels=torch.tensor([0, 2])).loss.backward()
    model.save_pretrained(tmp_path)
    reloaded = PooledForSequenceClassification.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits)


def test_a_registered_parts_setting_is_refused_for_other_choices(custom_parts):
    with pytest.raises(
        ValueError,
        match=r"classifier_hidden_size=64 does not apply to classifier_head='linear'; it "
        r"is a setting of classifier_head='dense', classifier_head='two_layer'\.",
    ):
        PooledConfig(
            backbone_config=tiny_backbone_config(), classifier_head="linear", classifier_hidden_size=64
        )


@pytest.mark.parametrize(
    "registry",
    [POOLINGS, HEADS, MULTI_LABEL_LOSSES, LABEL_TOKEN_INITS],
    ids=lambda registry: registry.setting,
)
def test_every_registry_refuses_a_name_twice_and_names_the_choices(registry):
    name = next(iter(registry))
    with pytest.raises(ValueError, match=f"{registry.setting} {name!r} is already registered"):
        registry.register(name)(type("Again", (registry[name],), {}))
    with pytest.raises(
        ValueError,
        match=rf"Unknown {registry.setting} 'nope'\. Valid choices: " + ", ".join(sorted(registry)),
    ):
        registry.lookup("nope")
    with pytest.raises(TypeError, match="must be a Component subclass"):
        registry["not_a_part"] = object
