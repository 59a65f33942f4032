"""PooledForMultiTask: the config's checks, one task or every head per forward, every problem type's loss, saving,
loading, the Hub and trust_remote_code, exported standalone heads in pipeline(), PEFT, padding and dtypes."""

import json

import pytest
import torch
from helpers import (
    ENTITY_LABELS,
    MULTITASK_TASKS,
    random_batch,
    repad,
    run_without_package,
    tiny_backbone_config,
    tiny_multitask_model,
    use_fake_hub,
)
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    pipeline,
)
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput

from pooled_models import (
    MultiTaskOutput,
    PooledForMultiTask,
    PooledForSequenceClassification,
    PooledForTokenClassification,
    PooledMultiTaskConfig,
)

TASK_LABELS = {
    "team": torch.tensor([0, 2, 1]),
    "topics": torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]),
    "urgency": torch.tensor([0.5, -1.0, 2.0]),
}


def token_labels(batch):
    labels = torch.randint(
        0, len(ENTITY_LABELS), batch["input_ids"].shape, generator=torch.Generator().manual_seed(1)
    )
    return labels.masked_fill(batch["attention_mask"] == 0, -100)


def config(tasks, **settings):
    return PooledMultiTaskConfig(backbone_config=tiny_backbone_config(), tasks=tasks, **settings)


# ----------------------------------------------------------------------------------------------------
# The config
# ----------------------------------------------------------------------------------------------------


def test_every_task_is_saved_with_its_defaults_filled_in(tmp_path):
    built = config(MULTITASK_TASKS)
    assert built.tasks["team"]["attention_heads"] == 1 and built.tasks["team"]["classifier_head"] == "linear"
    assert built.tasks["entities"] == {
        "kind": "token",
        "id2label": ENTITY_LABELS,
        "problem_type": "single_label_classification",
        "classifier_head": "linear",
        "classifier_dropout": 0.1,
        "classifier_dropout_samples": 1,
    }
    built.save_pretrained(tmp_path / "first")
    reloaded = AutoConfig.from_pretrained(tmp_path / "first")
    assert isinstance(reloaded, PooledMultiTaskConfig)
    assert reloaded.tasks == built.tasks  # id2label ids are integers again
    reloaded.save_pretrained(tmp_path / "second")
    assert (tmp_path / "first" / "config.json").read_text() == (
        tmp_path / "second" / "config.json"
    ).read_text()


@pytest.mark.parametrize(
    "tasks, message",
    [
        (None, "tasks must be a mapping of task names"),
        ({}, "tasks must be a mapping of task names"),
        (
            {"team": {"id2label": {0: "a", 1: "b"}}},
            r"tasks\['team'\] needs a kind: one of 'sequence', 'token'",
        ),
        ({"team": {"kind": "sentence", "num_labels": 2}}, "needs a kind.*got 'sentence'"),
        ({"team": {"kind": "sequence"}}, r"tasks\['team'\] needs its labels: id2label \(or num_labels\)"),
        (
            {"team": {"kind": "sequence", "pooling": "median", "num_labels": 2}},
            r"tasks\['team'\]: Unknown pooling 'median'. Valid choices: .*attention",
        ),
        (
            {"team": {"kind": "sequence", "pooling": "mean", "gem_p": 2.0, "num_labels": 2}},
            r"tasks\['team'\]: gem_p=2.0 does not apply to pooling='mean'",
        ),
        (
            {"ner": {"kind": "token", "pooling": "attention", "num_labels": 3}},
            r"tasks\['ner'\]: 'pooling' does not apply to a token task",
        ),
        (
            {"ner": {"kind": "token", "problem_type": "multi_label_classification", "num_labels": 3}},
            r"tasks\['ner'\] is a token task: each token gets one label",
        ),
        ({"ner": {"kind": "token", "num_labels": 1}}, r"tasks\['ner'\]: .*num_labels > 1"),
        (
            {"team": {"kind": "sequence", "num_labels": 2, "backbone_config": {}}},
            "'backbone_config' is a setting of the whole model",
        ),
        ({"team": {"kind": "sequence", "num_labels": 2, "colour": "red"}}, "'colour' is not a setting"),
        ({"my team": {"kind": "sequence", "num_labels": 2}}, "Task name 'my team' is not allowed"),
        ({"mean": {"kind": "sequence", "num_labels": 2}}, "Task name 'mean' is not allowed"),
    ],
)
def test_bad_task_settings_are_refused_naming_the_task_and_the_choices(tasks, message):
    with pytest.raises(ValueError, match=message):
        config(tasks)


def test_task_config_is_the_pooled_config_of_the_task():
    built = config(MULTITASK_TASKS)
    team = built.task_config("team")
    assert team.pooling == "attention" and team.num_labels == 3 and team.id2label[2] == "tech"
    assert built.task_config("urgency").num_labels == 1
    with pytest.raises(ValueError, match="Unknown task 'nope'. This model's tasks are: team, topics"):
        built.task_config("nope")


# ----------------------------------------------------------------------------------------------------
# Forward: one task, every head, every problem type
# ----------------------------------------------------------------------------------------------------


def test_without_a_task_every_head_answers_for_the_same_texts():
    model = tiny_multitask_model()
    batch = random_batch([5, 3, 7])
    out = model(**batch)
    assert isinstance(out, MultiTaskOutput) and list(out) == ["team", "topics", "urgency", "entities"]
    assert out["team"].logits.shape == (3, 3) and out.topics.logits.shape == (3, 3)
    assert out["urgency"].logits.shape == (3, 1) and out["entities"].logits.shape == (3, 7, 5)
    assert isinstance(out["entities"], TokenClassifierOutput) and isinstance(
        out["team"], SequenceClassifierOutput
    )
    for task in out:  # the shared pass gives what each task's own forward gives
        torch.testing.assert_close(model(**batch, task=task).logits, out[task].logits)


def test_every_problem_type_and_the_token_task_have_their_loss():
    model = tiny_multitask_model()
    batch = random_batch([5, 3, 7])
    team = model(**batch, task="team", labels=TASK_LABELS["team"])
    torch.testing.assert_close(team.loss, torch.nn.functional.cross_entropy(team.logits, TASK_LABELS["team"]))
    topics = model(**batch, task="topics", labels=TASK_LABELS["topics"])
    expected = torch.nn.functional.binary_cross_entropy_with_logits(topics.logits, TASK_LABELS["topics"])
    torch.testing.assert_close(topics.loss, expected)
    urgency = model(**batch, task="urgency", labels=TASK_LABELS["urgency"])
    torch.testing.assert_close(
        urgency.loss, torch.nn.functional.mse_loss(urgency.logits[:, 0], TASK_LABELS["urgency"])
    )
    labels = token_labels(batch)
    entities = model(**batch, task="entities", labels=labels)
    kept = labels != -100
    torch.testing.assert_close(
        entities.loss, torch.nn.functional.cross_entropy(entities.logits[kept], labels[kept])
    )


def test_an_unset_problem_type_is_inferred_from_the_first_labels_and_saved(tmp_path):
    model = tiny_multitask_model(tasks={"team": {"kind": "sequence", "id2label": {0: "a", 1: "b", 2: "c"}}})
    assert model.config.tasks["team"]["problem_type"] is None
    model(**random_batch([4, 6]), task="team", labels=torch.tensor([[1, 0, 1], [0, 1, 0]]))
    assert model.config.tasks["team"]["problem_type"] == "multi_label_classification"
    model.save_pretrained(tmp_path)
    assert PooledMultiTaskConfig.from_pretrained(tmp_path).tasks["team"]["problem_type"] == (
        "multi_label_classification"
    )


def test_each_task_trains_its_own_head_and_the_backbone_only():
    model = tiny_multitask_model().train()
    batch = random_batch([5, 3])
    model(**batch, task="topics", labels=TASK_LABELS["topics"][:2]).loss.backward()
    with_gradient = {name for name, param in model.named_parameters() if param.grad is not None}
    heads = {name.split(".")[2] for name in with_gradient if name.startswith("classifier.")}
    assert heads == {"topics"}
    assert all(param.grad is not None for param in model.backbone.parameters() if param.requires_grad)


@pytest.mark.parametrize(
    "call, message",
    [
        ({"labels": torch.tensor([0, 1])}, "labels belong to one task: pass task="),
        ({"task": "nope"}, "Unknown task 'nope'"),
        ({"task": ["team", "topics"]}, "task must be the name of one task"),
        ({"task": "entities", "labels": torch.tensor([0, 1])}, r"token labels have shape \(2,\)"),
        ({"task": "team", "labels": torch.tensor([0, 7])}, r"labels\[1\] = 7 is not a class id"),
    ],
)
def test_mistakes_in_a_call_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        tiny_multitask_model()(**random_batch([4, 6]), **call)


def test_a_task_given_once_per_row_is_one_task():
    model = tiny_multitask_model()
    batch = random_batch([4, 6])
    torch.testing.assert_close(
        model(**batch, task=["team", "team"]).logits, model(**batch, task="team").logits
    )


def test_label_tokens_task_runs_its_own_pass_next_to_the_shared_one():
    tasks = {
        "tags": {
            "kind": "sequence",
            "pooling": "label_tokens",
            "label_token_init": "random",
            "num_labels": 3,
        },
        "layers": {"kind": "sequence", "pooling": "weighted_layer", "num_labels": 2},
        "entities": {"kind": "token", "id2label": ENTITY_LABELS},
    }
    model = tiny_multitask_model(tasks=tasks)
    assert model.added_tokens == 3
    batch = random_batch([5, 3])
    out = model(**batch)
    for task in tasks:
        torch.testing.assert_close(model(**batch, task=task).logits, out[task].logits)
    assert out["entities"].logits.shape == (2, 5, 5)  # the text's own tokens, without the label tokens


@pytest.mark.parametrize("backbone", ["bert", "roberta", "modernbert"])
def test_right_left_padding_and_batching_leave_every_heads_logits_unchanged(backbone):
    model = tiny_multitask_model(backbone)
    batch = random_batch([5, 9, 2], seed=3)
    alone = model(**repad(batch, 0, 5, "right"))
    batched = model(**batch)
    left = model(**repad(batch, 0, 12, "left"))
    for task in ("team", "topics", "urgency"):
        torch.testing.assert_close(batched[task].logits[0], alone[task].logits[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(left[task].logits[0], alone[task].logits[0], atol=1e-5, rtol=1e-5)
    entities = alone["entities"].logits[0]
    torch.testing.assert_close(batched["entities"].logits[0, :5], entities, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(left["entities"].logits[0, -5:], entities, atol=1e-5, rtol=1e-5)


def test_batch_size_one_and_half_precision():
    model = tiny_multitask_model().to(torch.bfloat16)
    batch = {"input_ids": torch.tensor([[7]]), "attention_mask": torch.tensor([[1]])}
    out = model(**batch)
    assert all(
        output.logits.dtype == torch.bfloat16 and torch.isfinite(output.logits).all()
        for output in out.values()
    )
    loss = model(**batch, task="team", labels=torch.tensor([1])).loss
    assert loss.dtype == torch.float32 and torch.isfinite(loss)


def test_return_dict_false_gives_tuples():
    model = tiny_multitask_model()
    out = model(**random_batch([4, 6]), task="team", labels=torch.tensor([0, 1]), return_dict=False)
    assert isinstance(out, tuple) and out[0].ndim == 0 and out[1].shape == (2, 3)


# ----------------------------------------------------------------------------------------------------
# Saving, loading, the Hub, trust_remote_code
# ----------------------------------------------------------------------------------------------------


def test_save_and_load_give_identical_logits_for_every_head(tmp_path):
    model = tiny_multitask_model()
    batch = random_batch([4, 6])
    model.save_pretrained(tmp_path)
    assert not list(tmp_path.glob("*.bin"))
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["auto_map"] == {
        "AutoConfig": "configuration_multitask.PooledMultiTaskConfig",
        "AutoModel": "modeling_multitask.PooledForMultiTask",
    }
    for loader in (PooledForMultiTask, AutoModel):
        reloaded = loader.from_pretrained(tmp_path).eval()
        assert type(reloaded) is PooledForMultiTask
        expected, got = model(**batch), reloaded(**batch)
        # config.json sorts the keys of tasks; the order (of outputs, tuples, metrics) is the one given.
        assert list(got) == list(expected) == ["team", "topics", "urgency", "entities"]
        for task in expected:
            torch.testing.assert_close(got[task].logits, expected[task].logits, atol=1e-6, rtol=1e-6)


def test_from_pretrained_overrides_reach_the_heads(tmp_path):
    tiny_multitask_model().save_pretrained(tmp_path)
    reloaded = PooledForMultiTask.from_pretrained(tmp_path, position_ids_from_mask=False)
    assert reloaded.config.position_ids_from_mask is False
    assert all(config.position_ids_from_mask is False for config in reloaded.task_configs.values())


def test_resize_token_embeddings_saves_and_reloads(tmp_path):
    model = tiny_multitask_model()
    model.resize_token_embeddings(128)
    model.save_pretrained(tmp_path)
    reloaded = PooledForMultiTask.from_pretrained(tmp_path)
    assert reloaded.get_input_embeddings().num_embeddings == 128


def test_update_task_changes_runtime_settings_only():
    model = tiny_multitask_model()
    model.update_task("topics", decision_threshold=0.3)
    assert model.config.tasks["topics"]["decision_threshold"] == 0.3
    assert model.task_configs["topics"].decision_threshold == 0.3
    with pytest.raises(ValueError, match="'pooling' shapes the head of task 'team'"):
        model.update_task("team", pooling="max")
    with pytest.raises(ValueError, match=r"tasks\['team'\]: decision_threshold=0.3 applies to problem_type"):
        model.update_task("team", problem_type="single_label_classification", decision_threshold=0.3)


def test_config_edits_are_validated_and_runtime_ones_reach_the_loss():
    model = tiny_multitask_model()
    batch = random_batch([4, 6, 3])
    before = model(**batch, task="topics", labels=TASK_LABELS["topics"]).loss
    # A nested edit of a runtime setting (no __setattr__ sees it): validated and read by the next loss.
    model.config.tasks["topics"]["multi_label_loss"] = "focal"
    after = model(**batch, task="topics", labels=TASK_LABELS["topics"]).loss
    assert model.config.tasks["topics"]["focal_gamma"] == 2.0 and not torch.isclose(before, after)
    model.config.tasks["topics"]["multi_label_loss"] = "nope"
    with pytest.raises(ValueError, match=r"tasks\['topics'\]: .*'nope'"):
        model(**batch)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda tasks: tasks["team"].update(pooling="max"),
            r"tasks\['team'\]\['pooling'\]='max' \(built with 'attention'\)",
        ),
        (
            lambda tasks: tasks["entities"].update(id2label={0: "O", 1: "B-X", 2: "I-X"}),
            r"'num_labels'\]=3 \(built with 5\)",
        ),
        (lambda tasks: tasks.pop("urgency"), r"tasks \['team', 'topics', 'entities'\] \(built with"),
    ],
)
def test_config_edits_the_heads_cannot_follow_are_refused_with_the_way_out(edit, message, tmp_path):
    model = tiny_multitask_model()
    edit(model.config.tasks)
    with pytest.raises(ValueError, match=message):
        model(**random_batch([4, 6]))
    with pytest.raises(ValueError, match="update_task"):
        model.save_pretrained(tmp_path)


def test_from_pretrained_tasks_keyword_is_validated_like_the_constructor(tmp_path):
    tiny_multitask_model().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"tasks\['team'\] needs a kind"):
        PooledMultiTaskConfig.from_pretrained(tmp_path, tasks={"team": {"num_labels": 2}})


@pytest.mark.slow  # uploads through a fake Hub, then loads in a fresh interpreter without the package
def test_push_to_hub_and_trust_remote_code_without_the_package(monkeypatch, tmp_path):
    fake_hub = use_fake_hub(monkeypatch, tmp_path / "uploaded")
    model = tiny_multitask_model()
    batch = random_batch([4, 6])
    model.push_to_hub("someone/multitask")
    uploaded = fake_hub.destination
    assert {"config.json", "model.safetensors", "modeling_multitask.py", "configuration_multitask.py"} <= {
        path.name for path in uploaded.iterdir()
    }
    expected = {task: output.logits.tolist() for task, output in model(**batch).items()}
    script = f"""
        import json, torch
        from transformers import AutoModel
        model = AutoModel.from_pretrained({str(uploaded)!r}, trust_remote_code=True).eval()
        batch = {{"input_ids": torch.tensor({batch["input_ids"].tolist()}),
                 "attention_mask": torch.tensor({batch["attention_mask"].tolist()})}}
        with torch.no_grad():
            out = model(**batch)
        print(json.dumps({{"class": type(model).__module__ + "." + type(model).__name__,
                           "logits": {{task: output.logits.tolist() for task, output in out.items()}}}}))
    """
    result = run_without_package(script, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["class"].startswith("transformers_modules.") and report["class"].endswith(
        "PooledForMultiTask"
    )
    for task, logits in expected.items():
        torch.testing.assert_close(
            torch.tensor(report["logits"][task]), torch.tensor(logits), atol=1e-6, rtol=1e-6
        )


# ----------------------------------------------------------------------------------------------------
# Exported heads: standalone checkpoints that work in pipeline()
# ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_looking_model(tiny_backbone_path):
    torch.manual_seed(0)
    model = PooledForMultiTask.from_backbone(tiny_backbone_path, tasks=MULTITASK_TASKS).eval()
    return model, AutoTokenizer.from_pretrained(tiny_backbone_path)


TEXTS = ["Where is order 4471?", "The app crashes when I open my photos, please help."]


def test_export_head_writes_a_standalone_sequence_classifier_for_pipeline(trained_looking_model, tmp_path):
    model, tokenizer = trained_looking_model
    model.export_head("team", tmp_path / "team")  # the tokenizer comes from the backbone's folder
    assert (tmp_path / "team" / "tokenizer.json").is_file()
    standalone = AutoModelForSequenceClassification.from_pretrained(tmp_path / "team").eval()
    assert type(standalone) is PooledForSequenceClassification and standalone.config.pooling == "attention"
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch, task="team").logits
        torch.testing.assert_close(standalone(**batch).logits, expected)
    results = pipeline("text-classification", model=str(tmp_path / "team"))(TEXTS)
    for row, result in enumerate(results):
        assert result["label"] == model.config.tasks["team"]["id2label"][int(expected[row].argmax())]


def test_export_head_writes_a_standalone_token_classifier_for_pipeline(trained_looking_model, tmp_path):
    model, tokenizer = trained_looking_model
    model.export_head("entities", tmp_path / "ner", tokenizer=tokenizer)
    standalone = AutoModelForTokenClassification.from_pretrained(tmp_path / "ner").eval()
    assert type(standalone) is PooledForTokenClassification
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(standalone(**batch).logits, model(**batch, task="entities").logits)
    # Biased towards B-PRODUCT, the head's answer is known (every word a PRODUCT entity of its own), and the pipeline
    # must report exactly that: a result that is empty or holds another type fails.
    with torch.no_grad():
        standalone.classifier.token_head.out_proj.bias[3] += 100.0
    standalone.save_pretrained(tmp_path / "ner_product")
    tokenizer.save_pretrained(tmp_path / "ner_product")
    groups = pipeline(
        "token-classification", model=str(tmp_path / "ner_product"), aggregation_strategy="simple"
    )(TEXTS[0])
    assert groups and {group["entity_group"] for group in groups} == {"PRODUCT"}
    assert [group["word"] for group in groups] == tokenizer.tokenize(TEXTS[0])
    # Exporting shares, and never changes, the multi-task model's own weights.
    assert model(**batch, task="entities").logits.shape[-1] == 5


def test_export_head_of_a_multi_label_task_keeps_its_problem_type(trained_looking_model, tmp_path):
    model, _ = trained_looking_model
    model.export_head("topics", tmp_path / "topics")
    assert AutoConfig.from_pretrained(tmp_path / "topics").problem_type == "multi_label_classification"


# ----------------------------------------------------------------------------------------------------
# PEFT: every head is under the module named classifier
# ----------------------------------------------------------------------------------------------------


def test_peft_lora_trains_and_saves_every_head(tmp_path):
    import peft

    model = tiny_multitask_model().train()
    lora = peft.get_peft_model(
        model, peft.LoraConfig(task_type=peft.TaskType.SEQ_CLS, target_modules=["query", "value"], r=4)
    )
    trainable = {name for name, param in lora.named_parameters() if param.requires_grad}
    for task in MULTITASK_TASKS:
        assert any(f".heads.{task}." in name for name in trainable), task
    batch = random_batch([5, 3])
    lora(**batch, task="entities", labels=token_labels(batch)).loss.backward()
    out = lora(**batch)  # every head, through the wrapper PEFT puts around the classifier
    assert set(out) == set(MULTITASK_TASKS)
    lora.save_pretrained(tmp_path)
    from safetensors.torch import load_file

    saved = load_file(tmp_path / "adapter_model.safetensors")
    for task in MULTITASK_TASKS:
        assert any(f"heads.{task}." in key for key in saved), task
