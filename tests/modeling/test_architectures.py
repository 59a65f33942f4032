"""Every architecture transformers can classify: each model type with a built-in ``*ForSequenceClassification``
(``*ForTokenClassification``) in the installed transformers, on a tiny random config, gets every pooling (the token
head) as a built-in classifier of that type behaves: it builds, runs, trains (gradients reach every pooler and head),
keeps the built-in model's padding invariance, and saves and reloads through the Auto classes with equal logits. Where
a pooling cannot work it is refused when the model is built, by a message naming the reason and the poolings that do
work (REFUSED). Types that even the built-in classifier cannot build or run from a tiny config are expected failures
with the reason (BUILT_IN_FAILS), strict: a fix upstream makes them fail here, to be moved into the checked types.

Every pooling runs on every type within the suite's time because one model per type carries them all: a
``PooledForMultiTask`` with one sequence head per pooling on one backbone. Each head is the ``PooledClassifier`` a
``PooledForSequenceClassification`` holds, run on the same backbone call (label tokens in a pass of their own), so one
forward checks every pooling's logits and padding, one backward every pooling's gradients, one save and reload
every pooling's weights. A ``PooledForSequenceClassification`` per type (label tokens, else a pooling in rotation)
checks the single-task class through ``AutoModelForSequenceClassification``. The last test asserts how many types and
poolings each check covered.

The tiny configs are built generically (SMALL: every size field a config class has, in its sub-configs too), with
the per-type settings in OVERRIDES.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import textwrap
import warnings
from collections import defaultdict

import pytest
import torch
from helpers import run_without_package
from huggingface_hub.errors import StrictDataclassClassValidationError
from transformers import AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
    MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES,
)

from pooled_models import (
    POOLINGS,
    PooledConfig,
    PooledForMultiTask,
    PooledForSequenceClassification,
    PooledForTokenClassification,
    PooledMultiTaskConfig,
)

# Sizes set wherever a config class (or one of its sub-configs) has the field.
SMALL = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 37,
    "max_position_embeddings": 64,
    "head_dim": 8,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "n_shared_experts": 1,
    "embedding_size": 32,
    "d_model": 32,
    "d_kv": 8,
    "d_ff": 37,
    "num_layers": 2,
    "num_heads": 4,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 37,
    "decoder_ffn_dim": 37,
    "image_size": 16,
    "patch_size": 8,
    "projection_dim": 32,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
EOS = 2
# Mixture-of-experts kernels want 16-byte aligned widths; multi-head latent attention has its own head sizes.
MOE = {"intermediate_size": 32, "moe_intermediate_size": 16}
LATENT_ATTENTION = {
    "num_key_value_heads": 4,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 8,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
}
HYBRID = {"layer_types": ["linear_attention", "full_attention"]}  # one attention layer among the linear ones
OVERRIDES = {
    **dict.fromkeys(["axk1", "axk2", "deepseek_v2", "deepseek_v3", "minicpm3", "mistral4"], LATENT_ATTENTION),
    **dict.fromkeys(["gpt_oss", "hunyuan_v1_moe", "minimax", "mixtral", "phimoe"], MOE),
    "jamba": {
        **MOE,
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
    },
    "qwen3_next": HYBRID,
    "qwen3_5_text": HYBRID,
    "qwen3_5": {"text_config": HYBRID},
    "esmc": {"num_key_value_heads": 4},  # no grouped-query attention
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    "gptj": {"rotary_dim": 4},
    "layoutlmv3": {"coordinate_size": 6, "shape_size": 4, "input_size": 16},
    "luke": {"entity_vocab_size": 10, "entity_emb_size": 16},
    "perceiver": {
        "d_latents": 32,
        "num_latents": 8,
        "num_self_attends_per_block": 1,
        "num_self_attention_heads": 2,
    },
    "reformer": {
        "axial_pos_shape": [8, 8],
        "axial_pos_embds_dim": [16, 16],
        "attn_layers": ["local", "local"],
        "attention_head_size": 8,
        "feed_forward_size": 37,
        "local_attn_chunk_length": 8,
    },
    "roc_bert": {"pronunciation_vocab_size": 10, "shape_vocab_size": 10, "pronunciation_embed_dim": 8},
    "squeezebert": {"intermediate_size": 32},  # divisible by its groups
    **dict.fromkeys(["t5", "mt5", "umt5"], {"decoder_start_token_id": 0}),
    "xlnet": {"d_head": 8},
    "xmod": {"default_language": "en_XX"},
    "zamba2": {"layers_block_type": ["mamba", "hybrid"], "hybrid_layer_ids": [1]},
}

# Types whose built-in classifier itself cannot build or run from a tiny config: type -> (the exception it raises, why).
# Expected failures, strict and of that exception only: a fix upstream, or a different failure, fails the test.
BUILT_IN_FAILS = {
    "cohere_compass_text": (KeyError, "CohereCompassTextModel: KeyError 'full_attention' in its forward"),
    "layoutlmv2": (ImportError, "LayoutLMv2Model needs the detectron2 library"),
    "lilt": (
        RuntimeError,
        "LiltModel: its layout embeddings do not match a hidden size of 32 (mat1 and mat2 shapes)",
    ),
    "zamba": (
        # huggingface_hub's validation error of the config dataclass (a ValueError where a config validates by hand)
        (StrictDataclassClassValidationError, ValueError),
        "ZambaConfig needs 3 layers or more (its layer_types), and with 3 the tied keys of ZambaModel's shared "
        "transformer do not resolve",
    ),
    "bros": (ValueError, "BrosModel needs bounding boxes (bbox) in every forward"),
}

# Pooling refusals: type -> (poolings refused, what the message must say). Every other pooling works.
EVERY = "every"
LAYER_POOLINGS = ("concat_layers", "lstm", "weighted_layer")
REFUSED = {
    "canine": (
        ("label_tokens", "label_text", *LAYER_POOLINGS),
        r"(CanineModel has no input embedding table|CanineModel downsamples the characters).*Poolings that work "
        r"with CanineModel: .*mean",
    ),
    "funnel": (
        ("label_tokens", "label_text", *LAYER_POOLINGS),
        r"(FunnelBaseModel pools its states to a shorter sequence|FunnelBaseModel pools the sequence to fewer states)"
        r".*Poolings that work with FunnelBaseModel",
    ),
    "ibert": (
        ("label_tokens", "label_text"),
        r"IBertModel embeds ids with QuantEmbedding.*Poolings that work with IBertModel: .*mean",
    ),
    "perceiver": (
        EVERY,
        r"(PerceiverModel takes no input_ids .*Poolings that work with it: none|has no num_hidden_layers"
        r"|defaults to a size the backbone's config does not have.*hidden_size)",
    ),
    "reformer": (
        ("label_text", *LAYER_POOLINGS),
        r"(ReformerModel gives its layers' states one residual stream wide|ReformerModel trains only on sequences "
        r"exactly as long).*Poolings that work with ReformerModel",
    ),
}

# Backbones whose token states themselves move with padding: a convolution over the sequence reads the padding next
# to the real tokens. Their built-in classifiers read the first token only, far from the padding, so the built-in's
# invariance says nothing of the other tokens'.
STATES_MOVE_WITH_PADDING = {
    "canine": "downsamples the characters with a strided convolution before its deep layers",
    "convbert": "its span-based dynamic convolution reads the neighbouring positions, padding included",
    # Measured on transformers 5.16 and 5.24 alike (random weights): cls 1.5e-4, last_token 1.2e-4, mean 6e-5.
    "nystromformer": "its Nystrom landmarks are means over segments of the padded sequence, so padding moves every "
    "state a little",
}
PADDING_TOLERANCE = 1e-4
# Reformer trains only on sequences exactly as long as its axial position shape multiplies out to (its own classifier
# too): 8 * 8 here.
TRAINING_LENGTHS = {"reformer": (64, 64)}

POOLINGS_SORTED = sorted(POOLINGS)
# What each check covered: check -> {(model_type, pooling or side)}, filled by the tests above the last one.
COVERED: dict[str, set] = defaultdict(set)


def _field_names(config_class) -> set[str]:
    names = (
        {field.name for field in dataclasses.fields(config_class)}
        if dataclasses.is_dataclass(config_class)
        else set()
    )
    return names | set(getattr(config_class, "attribute_map", None) or {})


def _tiny_kwargs(config_class, default=None) -> dict:
    kwargs = {key: value for key, value in SMALL.items() if key in _field_names(config_class)}
    if getattr(config_class, "sub_configs", None):
        default = default if default is not None else config_class()
        for name in config_class.sub_configs:
            sub = getattr(default, name, None)
            if hasattr(sub, "to_dict"):
                kwargs[name] = {**_tiny_kwargs(type(sub), sub), "model_type": sub.model_type}
    return kwargs


def _merge(base: dict, changes: dict) -> dict:
    merged = copy.deepcopy(base)
    for key, value in changes.items():
        merged[key] = (
            _merge(merged[key], value)
            if isinstance(value, dict) and isinstance(merged.get(key), dict)
            else value
        )
    return merged


def tiny_config(model_type: str):
    config_class = CONFIG_MAPPING[model_type]
    return config_class(**_merge(_tiny_kwargs(config_class), OVERRIDES.get(model_type, {})))


def _with_labels(backbone_config):
    config = copy.deepcopy(backbone_config)
    config.num_labels = 3
    return config


def _batch(lengths, side="right", seed=0):
    """Texts of ``lengths`` tokens, each ending with the one EOS token the seq2seq classifiers read, padded."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        text = torch.randint(5, SMALL["vocab_size"], (length,), generator=generator)
        text[-1] = EOS
        span = slice(0, length) if side == "right" else slice(width - length, width)
        ids[row, span], mask[row, span] = text, 1
    return {"input_ids": ids, "attention_mask": mask}


def _padding_drift(model, lengths=(5, 3)) -> dict[str, float]:
    """How far the first text's output moves when it is batched with a longer one, padded right or left."""
    alone = _batch(lengths[:1])
    with torch.no_grad():
        reference = model(**alone).logits[0]
        drift = {}
        for side in ("right", "left"):
            batch = _batch((lengths[0], lengths[0] + 4), side=side)
            batch["input_ids"][0, batch["attention_mask"][0] == 1] = alone["input_ids"][0]
            got = model(**batch).logits[0]
            if got.shape != reference.shape:  # token logits: the text's own tokens
                got = got[batch["attention_mask"][0] == 1]
            drift[side] = float((got - reference).abs().max())
    return drift


def _cases(mapping, fails):
    # strict: a type the built-in classifier learns to run makes the test fail, to be moved into the checked types;
    # raises: a failure other than the one named fails the test too.
    return [
        pytest.param(
            model_type,
            marks=pytest.mark.xfail(raises=fails[model_type][0], reason=fails[model_type][1], strict=True),
        )
        if model_type in fails
        else model_type
        for model_type in sorted(mapping)
    ]


# Label text: each label's own words (ids every tiny vocabulary holds), so that the three labels score differently.
LABEL_TEXT_IDS = [[1, 10, 11, 2], [1, 12, 2], [1, 13, 14, 15, 2]]


def _settings(pooling: str) -> dict:
    extra = {"label_text_ids": LABEL_TEXT_IDS} if pooling == "label_text" else {}
    return {"pooling": pooling, "num_labels": 3, **extra}


def _refused(model_type: str, pooling: str) -> str | None:
    poolings, message = REFUSED.get(model_type, ((), None))
    return message if poolings == EVERY or pooling in poolings else None


SEQUENCE_TYPES = sorted(MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _working_poolings(model_type: str) -> list[str]:
    return [pooling for pooling in POOLINGS_SORTED if not _refused(model_type, pooling)]


def _every_pooling_model(backbone_config, poolings: list[str]) -> PooledForMultiTask:
    """One backbone with a sequence head per pooling (``by_<pooling>``), each as a classifier of that pooling has it."""
    tasks = {f"by_{pooling}": {"kind": "sequence", **_settings(pooling)} for pooling in poolings}
    torch.manual_seed(0)
    return PooledForMultiTask(PooledMultiTaskConfig(backbone_config=backbone_config, tasks=tasks)).eval()


def _check_padding(model_type, built_in_drift, drift, what, check="padding") -> None:
    """Invariant on each side where the built-in classifier of the type is (the first text alone against batched)."""
    for side, moved in drift.items():
        if built_in_drift[side] < PADDING_TOLERANCE and model_type not in STATES_MOVE_WITH_PADDING:
            assert moved < PADDING_TOLERANCE, f"{what}: {side} padding moves the logits by {moved}"
            COVERED[f"{check}_{side}"].add((model_type, what))


def _every_head_drift(model, lengths=(5, 3)) -> dict[str, dict[str, float]]:
    """``_padding_drift`` of every head at once: task -> side -> how far its logits move."""
    alone = _batch(lengths[:1])
    with torch.no_grad():
        reference = model(**alone)
        drift = defaultdict(dict)
        for side in ("right", "left"):
            batch = _batch((lengths[0], lengths[0] + 4), side=side)
            batch["input_ids"][0, batch["attention_mask"][0] == 1] = alone["input_ids"][0]
            got = model(**batch)
            for task in reference:
                drift[task][side] = float((got[task].logits[0] - reference[task].logits[0]).abs().max())
    return drift


@pytest.mark.parametrize(
    "model_type", _cases(MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES, BUILT_IN_FAILS)
)
def test_every_pooling_on_every_sequence_classification_type(model_type, tmp_path):
    torch.manual_seed(0)
    backbone_config = tiny_config(model_type)
    built_in = AutoModelForSequenceClassification.from_config(_with_labels(backbone_config)).eval()
    built_in_drift = _padding_drift(built_in)
    for side, moved in built_in_drift.items():
        if moved < PADDING_TOLERANCE and model_type not in STATES_MOVE_WITH_PADDING:
            COVERED[f"built_in_invariant_{side}"].add(model_type)
    for pooling in POOLINGS_SORTED:
        refusal = _refused(model_type, pooling)
        if refusal:
            with pytest.raises(ValueError, match=refusal):  # by the config or, at the latest, the model
                PooledForSequenceClassification(
                    PooledConfig(backbone_config=backbone_config, **_settings(pooling))
                )
            COVERED["refused"].add((model_type, pooling))
    poolings = _working_poolings(model_type)
    if not poolings:
        return
    model = _every_pooling_model(backbone_config, poolings)
    batch = _batch((5, 3))
    with torch.no_grad():
        outputs = model(**batch)
    for pooling in poolings:
        logits = outputs[f"by_{pooling}"].logits
        assert logits.shape == (2, 3) and torch.isfinite(logits).all(), pooling
        COVERED["runs"].add((model_type, pooling))
    for task, drift in _every_head_drift(model).items():
        _check_padding(model_type, built_in_drift, drift, task.removeprefix("by_"))
    # Training: a loss over every head's logits gives every pooler's and head's parameters a gradient.
    model.train()
    train_batch = _batch(TRAINING_LENGTHS.get(model_type, (5, 3)))
    trained = model(**train_batch)
    labels = torch.tensor([0, 2])
    sum(torch.nn.functional.cross_entropy(out.logits, labels) for out in trained.values()).backward()
    for pooling in poolings:
        head = model.classifier.heads[f"by_{pooling}"]
        without = [name for name, p in head.named_parameters() if p.grad is None]
        assert not without, f"{pooling}: no gradient for {without}"
        COVERED["gradients"].add((model_type, pooling))
    # Save and reload every pooling at once, through AutoModel, to the same logits.
    model.eval().save_pretrained(tmp_path / "every_pooling")
    reloaded = AutoModel.from_pretrained(tmp_path / "every_pooling").eval()
    assert type(reloaded) is PooledForMultiTask
    with torch.no_grad():
        again = reloaded(**batch)
        expected = model(**batch)
    for pooling in poolings:
        task = f"by_{pooling}"
        torch.testing.assert_close(again[task].logits, expected[task].logits, msg=pooling)
        COVERED["save_reload"].add((model_type, pooling))
    _check_the_classifier_class(model_type, backbone_config, poolings, built_in_drift, tmp_path)


def _check_the_classifier_class(model_type, backbone_config, poolings, built_in_drift, tmp_path) -> None:
    """The single-task class itself, built, padded, saved and reloaded through AutoModelForSequenceClassification:
    with label tokens (the pooling with most behind it) where they work, else with a pooling in rotation."""
    rotating = POOLINGS_SORTED[SEQUENCE_TYPES.index(model_type) % len(POOLINGS_SORTED)]
    for pooling in [next(p for p in ("label_tokens", rotating, *poolings) if p in poolings)]:
        torch.manual_seed(0)
        model = PooledForSequenceClassification(
            PooledConfig(backbone_config=backbone_config, **_settings(pooling))
        ).eval()
        _check_padding(model_type, built_in_drift, _padding_drift(model), pooling, check="classifier_padding")
        batch = _batch((5, 3))
        model.save_pretrained(tmp_path / pooling)
        reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / pooling).eval()
        assert type(reloaded) is PooledForSequenceClassification and reloaded.config.pooling == pooling
        with torch.no_grad():
            torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits)
        COVERED["classifier_save_reload"].add((model_type, pooling))


TOKEN_TYPES = sorted(MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES)


@pytest.mark.parametrize("model_type", _cases(MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES, BUILT_IN_FAILS))
def test_every_token_classification_type(model_type, tmp_path):
    torch.manual_seed(0)
    backbone_config = tiny_config(model_type)
    if _refused(model_type, "mean"):
        with pytest.raises(ValueError, match=REFUSED[model_type][1]):
            PooledForTokenClassification(PooledConfig(backbone_config=backbone_config, num_labels=3))
        COVERED["token_refused"].add((model_type, "token"))
        return
    built_in = AutoModelForTokenClassification.from_config(_with_labels(backbone_config)).eval()
    built_in_drift = _padding_drift(built_in)
    model = PooledForTokenClassification(PooledConfig(backbone_config=backbone_config, num_labels=3)).eval()
    batch = _batch((5, 3))
    logits = model(**batch).logits
    assert logits.shape == (2, 5, 3) and torch.isfinite(logits).all()
    for side, drift in _padding_drift(model).items():
        if built_in_drift[side] < PADDING_TOLERANCE:
            assert drift < PADDING_TOLERANCE, f"{side} padding moves the token logits by {drift}"
            COVERED[f"token_padding_{side}"].add((model_type, "token"))
    model.train()
    labels = torch.where(batch["attention_mask"] == 1, 1, -100)
    model(**batch, labels=labels).loss.backward()
    assert all(p.grad is not None for p in model.classifier.parameters())
    model.eval().save_pretrained(tmp_path)
    reloaded = AutoModelForTokenClassification.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, model.eval()(**batch).logits)
    COVERED["token_save_reload"].add((model_type, "token"))


# A decoder with a nested text config, a seq2seq model read through its encoder, one without input embeddings, one with
# narrower token embeddings, one without a position limit: loaded from the checkpoint's own code, without the package.
REMOTE_SAMPLE = ("gemma3", "bart", "canine", "rembert", "xlnet")


def test_remote_code_reload_of_a_sample_of_types(tmp_path):
    batch = _batch((5, 3))
    expected = {}
    for model_type in REMOTE_SAMPLE:
        pooling = "mean" if model_type == "canine" else "label_tokens"
        torch.manual_seed(0)
        config = PooledConfig(backbone_config=tiny_config(model_type), **_settings(pooling))
        model = PooledForSequenceClassification(config).eval()
        model.save_pretrained(tmp_path / model_type)
        with torch.no_grad():
            expected[model_type] = model(**batch).logits.tolist()
    script = f"""
        import json, torch
        from transformers import AutoModelForSequenceClassification
        batch = {{"input_ids": torch.tensor({batch["input_ids"].tolist()}),
                  "attention_mask": torch.tensor({batch["attention_mask"].tolist()})}}
        got = {{}}
        for name in {list(REMOTE_SAMPLE)!r}:
            model = AutoModelForSequenceClassification.from_pretrained(name, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            with torch.no_grad():
                got[name] = model(**batch).logits.tolist()
        print(json.dumps(got))
    """
    result = run_without_package(textwrap.dedent(script), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    for model_type in REMOTE_SAMPLE:
        torch.testing.assert_close(torch.tensor(got[model_type]), torch.tensor(expected[model_type]))


def test_the_lists_name_only_types_of_the_installed_transformers():
    known = set(MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES) | set(
        MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES
    )
    assert set(BUILT_IN_FAILS) | set(REFUSED) | set(OVERRIDES) <= known


def _expected(types, fails) -> list[str]:
    return [model_type for model_type in types if model_type not in fails]


def test_what_the_checks_covered():
    """Runs last in this file: how many types and poolings each check really covered, asserted and reported."""
    sequence = _expected(SEQUENCE_TYPES, BUILT_IN_FAILS)
    ran = {model_type for model_type, _ in COVERED["runs"] | COVERED["refused"]}
    if ran != set(sequence):
        pytest.skip("a part of the file ran (-k, a single test): the counts are those of the whole file")
    every = {(model_type, pooling) for model_type in sequence for pooling in POOLINGS_SORTED}
    refused = {(t, p) for t, p in every if _refused(t, p)}
    working = every - refused
    # Every pooling on every type: runs, gets gradients and reloads, or is refused by name.
    assert COVERED["refused"] == refused
    for check in ("runs", "gradients", "save_reload"):
        assert COVERED[check] == working, (check, sorted(working - COVERED[check])[:10])
    assert {t for t, _ in COVERED["classifier_save_reload"]} == {t for t, _ in working}
    token = _expected(TOKEN_TYPES, BUILT_IN_FAILS)
    assert {t for t, _ in COVERED["token_save_reload"] | COVERED["token_refused"]} == set(token)
    counts = {
        "sequence types": len(sequence),
        "poolings": len(POOLINGS_SORTED),
        "type x pooling pairs run, trained and reloaded": len(working),
        "refused by name": len(refused),
        "types the built-in classifier cannot run (expected failures)": len(BUILT_IN_FAILS),
        **{
            f"padding checked, {side}": f"{len(COVERED[f'built_in_invariant_{side}'])} types (where the built-in is "
            f"invariant), {len(COVERED[f'padding_{side}'])} type x pooling pairs"
            for side in ("right", "left")
        },
        **{
            f"single-task classifier padding checked, {side}": len(COVERED[f"classifier_padding_{side}"])
            for side in ("right", "left")
        },
        "token types reloaded": len(COVERED["token_save_reload"]),
        **{
            f"token padding checked, {side}": len(COVERED[f"token_padding_{side}"])
            for side in ("right", "left")
        },
    }
    # Wherever the built-in classifier is padding-invariant, every working pooling was checked to be, and the
    # single-task class of every type with a working pooling.
    for side in ("right", "left"):
        invariant = COVERED[f"built_in_invariant_{side}"]
        assert COVERED[f"padding_{side}"] == {(t, p) for t, p in working if t in invariant}, side
        classified = {t for t, _ in COVERED[f"classifier_padding_{side}"]}
        assert classified == invariant & {t for t, _ in working}, side
        # Each padding check asserted on a good part of the types: not emptied by a change upstream (on
        # transformers 5.24: right 114 and left 59 of 123 sequence types, right 93 and left 68 of 99 token types).
        assert len(invariant) >= 0.4 * len(sequence), counts
        assert len(classified) >= 0.4 * len(sequence), counts
        assert len(COVERED[f"token_padding_{side}"]) >= 0.4 * len(token), counts
    warnings.warn(f"architecture coverage: {json.dumps(counts)}", UserWarning, stacklevel=1)
