"""label_token_layers=k: the text runs alone through the lower layers, the label tokens join the top k layers.

The reference here is written without the layout, masks or batching of the model: one unpadded text, its embeddings
and lower layers called directly, the label vectors embedded and concatenated after the first token, the top layers
called on the result."""

import json

import pytest
import torch
import transformers
from helpers import (
    assert_padding_and_batching_invariant,
    random_batch,
    repad,
    run_without_package,
    tiny_backbone_config,
)
from huggingface_hub.errors import StrictDataclassFieldValidationError

from pooled_models import PooledConfig, PooledForSequenceClassification
from pooled_models.modeling.label_token_layers import LAYER_STACKS

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LATE_FAMILIES = ["bert", "roberta", "esm", "esm_absolute", "distilbert", "xlm-roberta", "camembert"]
# First position id of a real token: RoBERTa-style embeddings reserve padding_idx + 1 of them (padding id 0 here).
OFFSETS = {
    "bert": 0,
    "roberta": 1,
    "esm": 0,
    "esm_absolute": 1,
    "distilbert": 0,
    "xlm-roberta": 1,
    "camembert": 1,
}


def backbone_config(family: str, num_hidden_layers: int):
    if family in ("xlm-roberta", "camembert"):  # RoBERTa's code under other names
        config_class = {
            "xlm-roberta": transformers.XLMRobertaConfig,
            "camembert": transformers.CamembertConfig,
        }
        roberta = tiny_backbone_config("roberta").to_dict()
        roberta.pop("model_type")
        config = config_class[family](**roberta)
    else:
        config = tiny_backbone_config(family)
    config.num_hidden_layers = num_hidden_layers
    return config


def late_model(family="bert", layers=1, num_labels=5, num_hidden_layers=3, seed=0, **settings):
    torch.manual_seed(seed)
    config = PooledConfig(
        backbone_config=backbone_config(family, num_hidden_layers),
        pooling="label_tokens",
        num_labels=num_labels,
        label_token_init="random",  # labels that differ from each other
        label_token_layers=layers,
        **settings,
    )
    return PooledForSequenceClassification(config).eval()


def reference_logits(model, family: str, ids: list[int], top_layers: int) -> torch.Tensor:
    """The logits of one text, computed by hand."""
    backbone, config = model.backbone, model.config
    layers = backbone.transformer.layer if family == "distilbert" else backbone.encoder.layer
    split = len(layers) - top_layers
    offset, per_pass = OFFSETS[family], config.label_tokens_per_pass
    room = config.backbone_config.max_position_embeddings - offset - per_pass
    if len(ids) > room:  # truncated, keeping the last token
        ids = ids[: room - 1] + ids[-1:]

    def embed(positions, token_ids=None, vectors=None):
        if family == "distilbert":
            return backbone.embeddings(token_ids, vectors, positions)
        return backbone.embeddings(input_ids=token_ids, inputs_embeds=vectors, position_ids=positions)

    def run(hidden, positions, indices):
        extra = {}
        if family == "esm":  # rotary positions, in every layer
            extra["position_embeddings"] = backbone.rotary_embeddings(hidden, positions)
        for index in indices:
            hidden = layers[index](hidden, **extra)  # one text without padding: no mask
        return hidden

    text_positions = torch.arange(len(ids)).unsqueeze(0) + offset
    text = run(embed(text_positions, token_ids=torch.tensor([ids])), text_positions, range(split))
    weights, states = model.pooler.label_embeddings.weight, []
    for start in range(0, config.num_labels, per_pass):
        group = weights[start : start + per_pass].unsqueeze(0)
        label_positions = (
            torch.arange(group.shape[1]).unsqueeze(0) + 1 + offset
        )  # right after the first token
        joined = torch.cat([text[:, :1], embed(label_positions, vectors=group), text[:, 1:]], dim=1)
        positions = torch.cat([text_positions[:, :1], label_positions, text_positions[:, 1:]], dim=1)
        out = run(joined, positions, range(split, len(layers)))
        if family.startswith("esm"):
            out = backbone.encoder.emb_layer_norm_after(out)
        states.append(out[0, 1 : 1 + group.shape[1]])
    return model.classifier.head(torch.cat(states).unsqueeze(0))[0]


def real_ids(batch, row: int) -> list[int]:
    return batch["input_ids"][row][batch["attention_mask"][row] == 1].tolist()


# ----------------------------------------------------------------------------------------------------
# What the option computes
# ----------------------------------------------------------------------------------------------------


def test_every_family_the_option_supports_is_tested():
    assert set(LAYER_STACKS) == {"bert", "roberta", "xlm-roberta", "camembert", "esm", "distilbert"}


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_all_layers_is_full_insertion_and_the_default(family):
    default = late_model(family, layers=None)
    assert default.config.label_token_layers == "all" and default.pooler.top_layers is None
    batch = random_batch([6, 3, 9])
    expected = default(**batch).logits
    for layers in ("all", 3):
        model = late_model(family, layers=layers)
        torch.testing.assert_close(model(**batch).logits, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", LATE_FAMILIES)
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("per_pass", [5, 2])
def test_late_insertion_matches_the_hand_computed_reference(family, layers, per_pass):
    model = late_model(family, layers=layers, label_tokens_per_pass=per_pass)
    batch = random_batch([7, 62, 3], seed=3)  # the 62-token text leaves no room for the labels: truncated
    with torch.no_grad():
        logits = model(**batch).logits
        for row in range(3):
            expected = reference_logits(model, family, real_ids(batch, row), layers)
            torch.testing.assert_close(logits[row], expected, atol=1e-5, rtol=1e-5, msg=f"row {row}")


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_late_insertion_differs_from_full_insertion(family):
    full, late = late_model(family, layers="all"), late_model(family, layers=1)
    full_weights = full.state_dict()
    assert all(torch.equal(tensor, full_weights[name]) for name, tensor in late.state_dict().items())
    batch = random_batch([6, 9])
    assert not torch.allclose(full(**batch).logits, late(**batch).logits, atol=1e-4)


def test_the_real_minilm_is_a_bert_the_option_runs(minilm_path, minilm_tokenizer):
    names = {0: "sports", 1: "science fiction", 2: "politics"}
    model = PooledForSequenceClassification.from_backbone(
        minilm_path, pooling="label_tokens", id2label=names, label_token_layers=2
    ).eval()
    assert model.pooler.top_layers == 2
    batch = minilm_tokenizer(
        ["the match ended in a draw", "a vote in parliament"], padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        logits = model(**batch).logits
        for row in range(2):
            expected = reference_logits(model, "bert", real_ids(batch, row), 2)
            torch.testing.assert_close(logits[row], expected, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------------
# Padding, batching, empty texts, given embeddings, hidden states
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["bert", "roberta", "esm", "distilbert"])
@pytest.mark.parametrize("position", [1, -1])
def test_padding_and_batching_invariance(family, position):
    assert_padding_and_batching_invariant(
        late_model(family, layers=1, label_tokens_per_pass=2, label_token_position=position)
    )


@pytest.mark.parametrize("family", ["bert", "esm"])
def test_a_text_without_tokens_gives_finite_logits_and_gradients(family):
    model = late_model(family, layers=1).train()
    batch = random_batch([4, 6])
    batch["attention_mask"][1] = 0
    out = model(**batch, labels=torch.tensor([1, 3]))
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss)
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits[0], model(**repad(batch, 0, 4, "right")).logits[0])
        assert torch.isfinite(model(**{key: value[1:] for key, value in batch.items()}).logits).all()


@pytest.mark.parametrize("family", ["bert", "esm"])
def test_eager_and_sdpa_attention_give_the_same_logits(family):
    # The masks come from transformers' create_bidirectional_mask, in the form each implementation reads.
    model = late_model(family, layers=1, label_tokens_per_pass=2)
    batch = random_batch([7, 5, 3], seed=3)
    batch["attention_mask"][2] = 0
    with torch.no_grad():
        sdpa = model(**batch).logits
        model.set_attn_implementation("eager")
        assert model.backbone.config._attn_implementation == "eager"
        torch.testing.assert_close(model(**batch).logits, sdpa, atol=1e-5, rtol=1e-5)


def test_given_embeddings_give_the_logits_of_the_ids():
    model = late_model("bert", layers=2)
    batch = random_batch([5, 8])
    embeds = model.get_input_embeddings()(batch["input_ids"])
    with torch.no_grad():
        torch.testing.assert_close(
            model(inputs_embeds=embeds, attention_mask=batch["attention_mask"]).logits,
            model(**batch).logits,
            atol=1e-6,
            rtol=1e-6,
        )


def test_token_type_ids_reach_the_text():
    model = late_model("bert", layers=1)
    batch = random_batch([6, 8])
    types = torch.zeros_like(batch["input_ids"])
    types[:, 3:] = 1
    assert not torch.allclose(model(**batch, token_type_ids=types).logits, model(**batch).logits)


def test_hidden_states_hold_the_label_tokens_from_the_layer_they_join_on():
    model = late_model("bert", layers=1, num_labels=3)  # 3 layers: the labels join the last one
    batch = random_batch([5, 8])
    states = model(**batch, output_hidden_states=True).hidden_states
    # The embeddings' and every layer's output, in the rows with the label tokens (slots 1 to 3).
    assert len(states) == 4 and all(state.shape == (2, 11, 32) for state in states)
    assert torch.count_nonzero(states[0][:, 1:4]) == 0 and torch.count_nonzero(states[1][:, 1:4]) == 0
    assert torch.all(states[2][:, 1:4].abs().sum(-1) > 0)  # the input of the last layer: the labels joined
    torch.testing.assert_close(states[3][:, 1:4], model.embed(**batch))  # what the head reads
    selected = model(**batch, output_hidden_states=[-1]).hidden_states
    assert selected[:3] == (None, None, None) and torch.equal(selected[3], states[3])


def test_output_attentions_is_refused_by_name():
    model = late_model("bert", layers=1)
    with pytest.raises(ValueError, match=r"label_token_layers=1 runs the backbone's layers itself, without "):
        model(**random_batch([5]), output_attentions=True)


# ----------------------------------------------------------------------------------------------------
# Training, saving, loading, compiling
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_every_parameter_gets_a_gradient_the_label_embeddings_included(family):
    model = late_model(family, layers=1, label_tokens_per_pass=2).train()
    out = model(**random_batch([6, 3, 9]), labels=torch.tensor([0, 4, 2]))
    out.loss.backward()
    missing = [name for name, param in model.named_parameters() if param.requires_grad and param.grad is None]
    assert not missing, f"parameters without a gradient: {missing}"
    assert model.pooler.label_embeddings.weight.grad.abs().sum(dim=1).gt(0).all()  # every label's row


def test_save_and_load_keep_the_option_and_the_logits(tmp_path):
    model = late_model("roberta", layers=2)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["label_token_layers"] == 2
    reloaded = PooledForSequenceClassification.from_pretrained(tmp_path).eval()
    assert reloaded.config.label_token_layers == 2 and reloaded.pooler.top_layers == 2
    batch = random_batch([5, 9])
    assert torch.equal(reloaded(**batch).logits, model(**batch).logits)
    # The same weights loaded with another k: what a model built with that k gives.
    other = PooledForSequenceClassification.from_pretrained(tmp_path, label_token_layers=1).eval()
    torch.testing.assert_close(other(**batch).logits, late_model("roberta", layers=1)(**batch).logits)


@pytest.mark.slow  # a fresh interpreter without the package
def test_trust_remote_code_load_without_the_package(tmp_path):
    model = late_model("bert", layers=1, label_tokens_per_pass=2)
    model.save_pretrained(tmp_path / "model")
    batch = random_batch([5, 3])
    expected = model(**batch).logits
    script = f"""
        import json, torch
        from transformers import AutoModelForSequenceClassification
        model = AutoModelForSequenceClassification.from_pretrained({str(tmp_path / "model")!r}, trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        with torch.no_grad():
            logits = model(input_ids=torch.tensor({batch["input_ids"].tolist()}),
                           attention_mask=torch.tensor({batch["attention_mask"].tolist()})).logits
        print(json.dumps([model.config.label_token_layers, logits.tolist()]))
    """
    result = run_without_package(script, tmp_path)
    assert result.returncode == 0, result.stderr
    layers, logits = json.loads(result.stdout.strip().splitlines()[-1])
    assert layers == 1
    torch.testing.assert_close(torch.tensor(logits), expected)


def test_fullgraph_compilation():
    import torch._dynamo

    model = late_model("bert", layers=1, label_tokens_per_pass=2)
    batch, labels = random_batch([5, 8]), torch.tensor([0, 2])
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        got, expected = compiled(**batch, labels=labels), model(**batch, labels=labels)
    torch.testing.assert_close(got.logits, expected.logits)
    torch.testing.assert_close(got.loss, expected.loss)


def test_lora_trains_the_label_embeddings_and_an_adapter_reproduces_the_logits(tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    model = get_peft_model(
        late_model("bert", layers=1), LoraConfig(task_type="SEQ_CLS", target_modules=["query", "value"], r=4)
    )
    batch, labels = random_batch([5, 8]), torch.tensor([0, 2])
    trained = [param for name, param in model.named_parameters() if name.endswith("label_embeddings.weight")]
    trained = [param for param in trained if param.requires_grad]
    assert len(trained) == 1
    before = trained[0].detach().clone()
    optimizer = torch.optim.AdamW([param for param in model.parameters() if param.requires_grad], lr=1e-2)
    model.train()
    for _ in range(2):
        model(**batch, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert not torch.equal(trained[0], before)
    model.eval()
    with torch.no_grad():
        logits = model(**batch).logits
    model.save_pretrained(tmp_path / "adapter")
    reloaded = PeftModel.from_pretrained(late_model("bert", layers=1), tmp_path / "adapter").eval()
    with torch.no_grad():
        assert torch.equal(reloaded(**batch).logits, logits)


# ----------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 4, -1])
def test_a_bad_value_names_the_option_and_the_valid_range(value):
    with pytest.raises(
        ValueError, match=r"label_token_layers must be 'all' or an integer in \[1, num_hidden_layers=3\].*got"
    ):
        late_model("bert", layers=value)


@pytest.mark.parametrize("value", ["half", "2", True, 1.5])
def test_a_value_of_another_type_is_refused_when_set(value):
    # The field is typed int | Literal["all"]: @strict refuses the value as it is set, as for a built-in config.
    with pytest.raises(StrictDataclassFieldValidationError, match=r"field 'label_token_layers'"):
        late_model("bert", layers=value)


def test_the_option_belongs_to_label_tokens_only():
    with pytest.raises(ValueError, match=r"label_token_layers=2 does not apply to pooling='mean'"):
        PooledConfig(backbone_config=tiny_backbone_config("bert"), pooling="mean", label_token_layers=2)


@pytest.mark.parametrize(
    "family, name",
    [("deberta-v2", "DebertaV2Model"), ("modernbert", "ModernBertModel"), ("gpt2", "GPT2Model")],
)
def test_a_backbone_whose_layers_it_cannot_run_is_refused_by_name(family, name):
    settings = {"label_token_position": -1} if family == "gpt2" else {}
    with pytest.raises(
        ValueError,
        match=rf"label_token_layers=1 runs the backbone's layers one by one.*{name} \(model type '{family}'\) is "
        r"not one of them\. Valid choice for this backbone: label_token_layers='all'",
    ):
        late_model(family, layers=1, num_hidden_layers=2, **settings)
    late_model(family, layers="all", num_hidden_layers=2, **settings)  # full insertion works with it


def test_a_bert_built_as_a_decoder_is_refused():
    config = backbone_config("bert", 2)
    config.is_decoder = True
    with pytest.raises(ValueError, match=r"BertModel \(model type 'bert', as a decoder\) is not one of them"):
        PooledForSequenceClassification(
            PooledConfig(
                backbone_config=config,
                pooling="label_tokens",
                num_labels=2,
                label_token_init="random",
                label_token_layers=1,
            )
        )
