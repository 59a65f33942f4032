"""Every way Transformers lets a user change a saved model leaves it valid or raises a clear ValueError at once:
load-time keywords (from_pretrained(folder, pooling=..., num_labels=...)), re-heading with ignore_mismatched_sizes,
and attribute edits (config.pooling = ...). Each change is followed by a save and a reload that gives the same
logits: no checkpoint that saves but does not load back."""

import pytest
import torch
from helpers import random_batch
from huggingface_hub.errors import StrictDataclassFieldValidationError

from pooled_models import POOLINGS, PooledConfig, PooledForSequenceClassification
from pooled_models.modeling.config_validation import chosen_part
from pooled_models.modeling.configuration_pooled import CHOICES

LABELS = {0: "sport", 1: "food", 2: "music"}


@pytest.fixture(scope="module")
def saved(tiny_backbone_path, minilm_tokenizer, tmp_path_factory):
    """folder(pooling, **settings): a classifier built from the tiny backbone and saved with its tokenizer."""
    folders = {}

    def folder(pooling: str, **settings) -> str:
        key = repr((pooling, sorted(settings.items())))
        if key not in folders:
            torch.manual_seed(0)
            model = PooledForSequenceClassification.from_backbone(
                tiny_backbone_path, pooling=pooling, id2label=settings.pop("id2label", LABELS), **settings
            )
            path = tmp_path_factory.mktemp(pooling)
            model.save_pretrained(path)
            minilm_tokenizer.save_pretrained(path)
            folders[key] = str(path)
        return folders[key]

    return folder


def only_settings_that_apply(config: PooledConfig) -> None:
    """Every setting the config holds is one its pooling, head and loss read (nothing stale was kept)."""
    every = {name for registry in CHOICES for name in registry.every_option()}
    chosen = [chosen_part(config, registry) for registry in CHOICES]
    read = {name for part in chosen if part is not None for name in part.options_for(config)}
    stale = sorted(name for name in every - read if getattr(config, name) is not None)
    assert stale == [], stale


def round_trip(model, tmp_path, batch, labels=None) -> None:
    """The model runs (with a finite loss when labels are given), saves, and reloads to the same logits."""
    model.eval()
    with torch.no_grad():
        output = model(**batch, labels=labels)
    if labels is not None:
        assert torch.isfinite(output.loss)
    model.save_pretrained(tmp_path / "again")
    reloaded = PooledForSequenceClassification.from_pretrained(tmp_path / "again").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, output.logits)
    only_settings_that_apply(reloaded.config)
    return reloaded


def pooling_pairs(sources):
    return [(source, target) for source in sources for target in sorted(POOLINGS) if target != source]


@pytest.mark.parametrize("source, target", pooling_pairs(["mean", "label_tokens"]))
def test_a_saved_model_loads_with_another_pooling(saved, tmp_path, source, target):
    # A pooling of another width gives the head another input size: re-heading, as transformers does it.
    model = PooledForSequenceClassification.from_pretrained(
        saved(source), pooling=target, ignore_mismatched_sizes=True
    )
    assert model.config.pooling == target and model.pooler.name == target
    only_settings_that_apply(model.config)
    reloaded = round_trip(model, tmp_path, random_batch([5, 9]), labels=torch.tensor([0, 2]))
    assert reloaded.config.pooling == target and reloaded.pooler.name == target


@pytest.mark.slow
@pytest.mark.parametrize("source, target", pooling_pairs(sorted(set(POOLINGS) - {"mean", "label_tokens"})))
def test_every_pooling_loads_as_every_other(saved, tmp_path, source, target):
    model = PooledForSequenceClassification.from_pretrained(
        saved(source), pooling=target, ignore_mismatched_sizes=True
    )
    assert model.config.pooling == target and model.pooler.name == target
    only_settings_that_apply(model.config)
    reloaded = round_trip(model, tmp_path, random_batch([5, 9]), labels=torch.tensor([0, 2]))
    assert reloaded.config.pooling == target and reloaded.pooler.name == target


def test_settings_given_with_the_new_pooling_are_kept_and_checked(saved):
    model = PooledForSequenceClassification.from_pretrained(
        saved("mean"), pooling="attention", attention_heads=2, ignore_mismatched_sizes=True
    )
    assert model.config.attention_heads == 2 and model.pooler.output_dim == 2 * model.config.hidden_size
    with pytest.raises(
        ValueError, match=r"attention_heads=2 does not apply to pooling='mean'; it is a setting of"
    ):
        PooledForSequenceClassification.from_pretrained(saved("mean"), attention_heads=2)
    with pytest.raises(
        StrictDataclassFieldValidationError,
        match=r"Unknown pooling 'average'\. Valid choices: attention, cls",
    ):
        PooledForSequenceClassification.from_pretrained(saved("mean"), pooling="average")


@pytest.mark.parametrize("new_count", [5, 2])
def test_label_tokens_follow_a_new_number_of_labels(saved, tmp_path, new_count):
    names = {
        index: name for index, name in enumerate(["sport", "food", "music", "travel", "money"][:new_count])
    }
    model, info = PooledForSequenceClassification.from_pretrained(
        saved("label_tokens"), id2label=names, ignore_mismatched_sizes=True, output_loading_info=True
    )
    config = model.config
    assert config.num_labels == new_count and len(config.label_token_init_ids) == new_count
    # All labels in one pass: a text is encoded once, not once per group of the old size.
    assert config.label_tokens_per_pass == new_count and model.pooler.num_passes == 1
    assert any("label_embeddings" in key for key, *_ in info["mismatched_keys"])
    # New labels start from their names' tokens, read with the tokenizer saved in the folder.
    table = model.get_input_embeddings().weight
    travel_ids = config.label_token_init_ids[new_count - 1]
    expected = table[torch.tensor(travel_ids)].mean(0)
    torch.testing.assert_close(model.pooler.label_embeddings.weight[new_count - 1], expected)
    round_trip(model, tmp_path, random_batch([5, 9]), labels=torch.tensor([0, new_count - 1]))


@pytest.mark.parametrize("source, target", [("all", 1), (1, "all"), (1, 2)])
def test_label_token_layers_at_load_time(saved, tmp_path, source, target):
    folder = saved("label_tokens", label_token_layers=source)
    model = PooledForSequenceClassification.from_pretrained(folder, label_token_layers=target)
    assert model.config.label_token_layers == target
    assert model.pooler.top_layers == (
        None if target in ("all", 2) else target
    )  # 2 = all of the tiny backbone's
    round_trip(model, tmp_path, random_batch([5, 9]), labels=torch.tensor([0, 2]))
    with pytest.raises(
        ValueError, match=r"label_token_layers must be 'all' or an integer in \[1, num_hidden_layers=2\]"
    ):
        PooledForSequenceClassification.from_pretrained(folder, label_token_layers=3)


def test_label_token_layers_is_dropped_with_the_label_tokens(saved, tmp_path):
    model = PooledForSequenceClassification.from_pretrained(
        saved("label_tokens", label_token_layers=1), pooling="mean", ignore_mismatched_sizes=True
    )
    assert model.config.label_token_layers is None
    only_settings_that_apply(model.config)
    round_trip(model, tmp_path, random_batch([5, 9]))


def test_per_label_settings_are_dropped_when_the_labels_change(saved, tmp_path):
    folder = saved(
        "mean",
        problem_type="multi_label_classification",
        pos_weight=[1.0, 2.0, 3.0],
        decision_threshold=[0.3, 0.4, 0.5],
    )
    kept = PooledForSequenceClassification.from_pretrained(folder)
    assert kept.config.pos_weight == [1.0, 2.0, 3.0] and kept.config.decision_threshold == [0.3, 0.4, 0.5]
    model = PooledForSequenceClassification.from_pretrained(
        folder, num_labels=4, ignore_mismatched_sizes=True
    )
    assert (model.config.pos_weight, model.config.decision_threshold) == (None, None)
    round_trip(model, tmp_path, random_batch([5, 9]), labels=torch.tensor([[1.0, 0, 0, 1], [0, 1, 0, 0]]))
    one_threshold = saved("mean", problem_type="multi_label_classification", decision_threshold=0.3)
    again = PooledForSequenceClassification.from_pretrained(
        one_threshold, num_labels=4, ignore_mismatched_sizes=True
    )
    assert again.config.decision_threshold == 0.3  # one threshold for every label still fits


@pytest.mark.parametrize(
    "loss, filled",
    [
        ("bce", {}),
        ("focal", {"focal_gamma": 2.0}),
        ("asymmetric", {"asymmetric_gamma_neg": 4.0, "asymmetric_clip": 0.05}),
    ],
)
def test_each_multi_label_loss_at_load_time(saved, tmp_path, loss, filled):
    folder = saved("mean", problem_type="multi_label_classification", multi_label_loss="asymmetric")
    model = PooledForSequenceClassification.from_pretrained(folder, multi_label_loss=loss)
    assert model.config.multi_label_loss == loss
    assert {name: getattr(model.config, name) for name in filled} == filled
    round_trip(model, tmp_path, random_batch([5, 9]), labels=torch.tensor([[1.0, 0, 1], [0, 1, 0]]))


def test_a_new_problem_type_drops_the_multi_label_settings(saved, tmp_path):
    folder = saved(
        "mean",
        problem_type="multi_label_classification",
        multi_label_loss="focal",
        decision_threshold=[0.3, 0.4, 0.5],
    )
    model = PooledForSequenceClassification.from_pretrained(
        folder, problem_type="single_label_classification"
    )
    config = model.config
    assert (config.multi_label_loss, config.focal_gamma, config.decision_threshold) == ("bce", None, None)
    round_trip(model, tmp_path, random_batch([5, 9]), labels=torch.tensor([0, 2]))


# ----------------------------------------------------------------------------------------------------
# Attribute edits
# ----------------------------------------------------------------------------------------------------


def test_an_edited_config_builds_saves_and_reloads(saved, tmp_path):
    config = PooledConfig.from_pretrained(saved("attention"))
    config.pooling = "weighted_layer"
    config.layer_token_pooling = "mean"
    assert config.has_pending_changes
    model = PooledForSequenceClassification(config)  # validated before its modules are built
    assert (config.attention_heads, config.layer_start, config.layer_token_pooling) == (None, 1, "mean")
    round_trip(model, tmp_path, random_batch([5, 9]))
    config.save_pretrained(tmp_path / "config_only")
    assert PooledConfig.from_pretrained(tmp_path / "config_only").pooling == "weighted_layer"


def test_an_edited_label_token_layers_builds_saves_and_reloads(saved, tmp_path):
    config = PooledConfig.from_pretrained(saved("label_tokens"))
    assert config.label_token_layers == "all"
    config.label_token_layers = 1
    model = PooledForSequenceClassification(config)
    assert model.pooler.top_layers == 1
    round_trip(model, tmp_path, random_batch([5, 9]))
    with pytest.raises(StrictDataclassFieldValidationError, match=r"field 'label_token_layers'"):
        config.label_token_layers = "half"  # neither an integer nor 'all': refused as it is set
    config.label_token_layers = 3
    with pytest.raises(
        ValueError,
        match=r"label_token_layers must be 'all' or an integer in \[1, num_hidden_layers=2\].*got 3",
    ):
        PooledForSequenceClassification(config)


def test_an_unknown_choice_is_refused_at_once():
    config = PooledConfig(
        backbone_config={
            "model_type": "bert",
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 37,
        }
    )
    for name, value in (
        ("pooling", "average"),
        ("classifier_head", "mlp"),
        ("multi_label_loss", "hinge"),
        ("label_token_init", "zeros"),
    ):
        with pytest.raises(
            StrictDataclassFieldValidationError, match=rf"Unknown {name} {value!r}\. Valid choices:"
        ):
            setattr(config, name, value)
        assert getattr(config, name) != value
    assert not config.has_pending_changes


def test_a_live_model_follows_run_time_settings_and_refuses_structural_ones(saved, tmp_path):
    model = PooledForSequenceClassification.from_pretrained(
        saved("mean", problem_type="multi_label_classification")
    )
    batch, labels = random_batch([5, 9]), torch.tensor([[1.0, 0, 1], [0, 1, 0]])
    bce = model(**batch, labels=labels).loss
    model.config.multi_label_loss = "focal"  # read when the loss is computed: takes effect
    focal = model(**batch, labels=labels).loss
    assert model.config.focal_gamma == 2.0 and not torch.allclose(bce, focal)
    round_trip(model, tmp_path, batch, labels=labels)

    model.config.pooling = "attention"  # the model keeps its mean pooler: refused, with the way to do it
    with pytest.raises(
        ValueError, match=r"pooling='attention' \(built with 'mean'\).*from_pretrained\(folder, pooling"
    ):
        model(**batch)
    with pytest.raises(ValueError, match="model.config was changed after the model was built"):
        model.save_pretrained(tmp_path / "mismatched")
    assert not (tmp_path / "mismatched").exists()


def test_a_live_label_token_model_refuses_a_new_label_token_layers(saved, tmp_path):
    model = PooledForSequenceClassification.from_pretrained(saved("label_tokens"))
    model.config.label_token_layers = (
        1  # the pooler was built for full insertion: refused, with the way to do it
    )
    with pytest.raises(
        ValueError,
        match=r"label_token_layers=1 \(built with 'all'\).*from_pretrained\(folder, label_token_layers",
    ):
        model(**random_batch([5, 9]))


# ----------------------------------------------------------------------------------------------------
# resize_token_embeddings, and from_pretrained on a checkpoint that is not a pooled one
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pooling, settings",
    [
        ("mean", {}),
        ("label_tokens", {"label_token_init": "random"}),
        # Label tokens joining the top layer only: their markers' ids sit past the vocabulary, which resizing moves.
        ("label_tokens", {"label_token_init": "random", "label_token_layers": 1}),
    ],
    ids=["mean", "label_tokens", "label_tokens_top_layer"],
)
@pytest.mark.parametrize("new_size", [130, 110])
def test_resizing_the_vocabulary_keeps_both_configs_consistent_and_reloads_exactly(
    saved, tmp_path, pooling, settings, new_size
):
    model = PooledForSequenceClassification.from_pretrained(saved(pooling, **settings))
    labels_before = model.pooler.label_embeddings.weight.clone() if pooling == "label_tokens" else None
    model.resize_token_embeddings(new_size)
    assert model.config.backbone_config.vocab_size == new_size == model.backbone.config.vocab_size
    assert "vocab_size" not in model.config.to_dict()  # written on the backbone's config, not beside it
    if labels_before is not None:
        assert torch.equal(model.pooler.label_embeddings.weight, labels_before)
    batch = random_batch([5, 9])
    batch["input_ids"][0, 1] = new_size - 1  # a token only the new table has (or the last of the smaller one)
    model.save_pretrained(tmp_path / "resized")
    reloaded, info = PooledForSequenceClassification.from_pretrained(
        tmp_path / "resized", output_loading_info=True
    )
    assert not any(info.values()), info
    with torch.no_grad():
        assert torch.equal(reloaded.eval()(**batch).logits, model.eval()(**batch).logits)


def test_resizing_below_the_label_tokens_starting_ids_keeps_their_vectors_and_drops_the_ids(saved, tmp_path):
    # As a built-in model, a label-token model resizes to any size. The label tokens' vectors are parameters of their
    # own, which resizing leaves alone; the token ids they started from no longer name tokens of the smaller
    # vocabulary, so they are dropped (new labels of a later re-heading start from the vocabulary mean).
    model = PooledForSequenceClassification.from_pretrained(saved("label_tokens")).eval()
    highest = max(token for label in model.config.label_token_init_ids for token in label)
    vectors = model.pooler.label_embeddings.weight.detach().clone()
    model.resize_token_embeddings(highest)
    assert model.get_input_embeddings().num_embeddings == model.config.vocab_size == highest
    assert model.config.label_token_init_ids is None
    assert torch.equal(model.pooler.label_embeddings.weight, vectors)
    batch = random_batch([5, 9])
    batch["input_ids"].clamp_(max=highest - 1)
    with torch.no_grad():
        logits = model(**batch).logits
    model.save_pretrained(tmp_path / "smaller")
    reloaded, info = PooledForSequenceClassification.from_pretrained(
        tmp_path / "smaller", output_loading_info=True
    )
    assert not any(info.values()), info
    with torch.no_grad():
        assert torch.equal(reloaded.eval()(**batch).logits, logits)


def test_from_pretrained_on_a_plain_backbone_builds_the_pooled_model_around_it(tiny_backbone_path, caplog):
    model, info = PooledForSequenceClassification.from_pretrained(
        tiny_backbone_path,
        pooling="attention",
        id2label=LABELS,
        classifier_head="dense",
        output_loading_info=True,
    )
    assert (model.config.pooling, model.config.classifier_head, model.num_labels) == ("attention", "dense", 3)
    # As transformers reports a new head: every weight the backbone folder did not hold (the attention pooler's and
    # the dense head's), as a set.
    assert info["missing_keys"] == {
        name for name, _ in model.named_parameters() if not name.startswith("backbone.")
    }
    assert any(name.startswith("classifier.pooler.") for name in info["missing_keys"])
    assert "is not a pooled checkpoint" in caplog.text and "newly initialized" in caplog.text
    reference = PooledForSequenceClassification.from_backbone(
        tiny_backbone_path, pooling="attention", id2label=LABELS, classifier_head="dense"
    )
    for name, tensor in reference.backbone.state_dict().items():
        assert torch.equal(model.backbone.state_dict()[name], tensor), name  # the pretrained weights, loaded
