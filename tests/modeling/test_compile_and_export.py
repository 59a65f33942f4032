"""torch.compile(fullgraph=True), ONNX export with dynamic axes, and accelerate's disk offload, for every pooling.

Compilation uses the "eager" backend: fullgraph=True fails on any graph break whatever the backend, and the eager
backend skips code generation (one test compiles with inductor too)."""

import tempfile

import pytest
import torch
import torch._dynamo
from helpers import ENTITY_LABELS, HIDDEN_STATE_POOLERS, random_batch, tiny_model, tiny_multitask_model

from pooled_models import POOLERS, PooledForTokenClassification, PooledModel, export_onnx
from pooled_models.modeling.layer_pooling import LayerPooler

FAST = ("mean", "label_tokens", "label_text")
# Three labels' texts as a BERT tokenizer gives them ([CLS] words [SEP]), of different lengths.
LABEL_TEXT_IDS = [[1, 10, 2], [1, 11, 12, 2], [1, 13, 14, 15, 2]]
SETTINGS = {
    "label_tokens": {"label_token_init": "random"},
    # The labels read the text in the top layer (runs the layers one by one, with its edited mask).
    "label_text": {"label_text_ids": LABEL_TEXT_IDS, "label_text_layers": 1},
}


def model_for(pooling: str, model_class=None):
    return tiny_model(pooling, model_class=model_class, **SETTINGS.get(pooling, {}))


def every_pooling(fast=FAST):
    return [pytest.param(name, marks=() if name in fast else pytest.mark.slow) for name in sorted(POOLERS)]


@pytest.mark.parametrize("pooling", every_pooling())
def test_fullgraph_compilation_with_labels(pooling):
    model = model_for(pooling)
    batch, labels = random_batch([5, 8]), torch.tensor([0, 2])
    if isinstance(model.pooler, LayerPooler):
        # Asked for hidden states, the backbone installs its output-capturing hooks on its first call, under a
        # lock dynamo cannot enter: vanilla BertModel(output_hidden_states=True) has the same break. Once it has
        # run, the layer strategies add none of their own.
        model(**batch)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    # torch traces nn.LSTM only with its experimental RNN support switched on (torch's limit, for any model).
    with torch._dynamo.config.patch(allow_rnn=pooling == "lstm"), torch.no_grad():
        got, expected = compiled(**batch, labels=labels), model(**batch, labels=labels)
    torch.testing.assert_close(got.logits, expected.logits)
    torch.testing.assert_close(got.loss, expected.loss)


@pytest.mark.slow
def test_inductor_compiles_a_pooled_classifier():
    model = model_for("attention")
    batch = random_batch([5, 8])
    torch._dynamo.reset()
    with torch.no_grad():
        torch.testing.assert_close(
            torch.compile(model, fullgraph=True)(**batch).logits, model(**batch).logits
        )


def test_bad_labels_are_still_caught_outside_compiled_graphs():
    # Compiled graphs skip the checks that read label values; eager calls keep them.
    model = model_for("mean")
    with pytest.raises(ValueError, match=r"labels\[1\] = 7 is not a class id"):
        model(**random_batch([5, 8]), labels=torch.tensor([0, 7]))


def token_model():
    return tiny_model(
        "mean",
        model_class=PooledForTokenClassification,
        id2label=ENTITY_LABELS,
        num_labels=len(ENTITY_LABELS),
    )


def test_a_token_classifier_compiles_fullgraph_with_labels():
    model = token_model()
    batch = random_batch([5, 8])
    labels = torch.randint(0, len(ENTITY_LABELS), (2, 8)).masked_fill(batch["attention_mask"] == 0, -100)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        got, expected = compiled(**batch, labels=labels), model(**batch, labels=labels)
    torch.testing.assert_close(got.logits, expected.logits)
    torch.testing.assert_close(got.loss, expected.loss)


def test_a_multitask_model_compiles_fullgraph_for_one_task_and_for_every_head():
    # The default tiny multi-task model has a head of every kind and problem type (attention, mean, cls, token).
    model = tiny_multitask_model()
    batch = random_batch([5, 8])
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        got, expected = compiled(**batch), model(**batch)
        assert list(got) == list(model.config.tasks)
        for task in model.config.tasks:
            torch.testing.assert_close(got[task].logits, expected[task].logits)
        labels = torch.tensor([0, 2])
        one, reference = (
            compiled(**batch, task="team", labels=labels),
            model(**batch, task="team", labels=labels),
        )
    torch.testing.assert_close(one.logits, reference.logits)
    torch.testing.assert_close(one.loss, reference.loss)


def onnx_outputs(path, batch: dict[str, torch.Tensor]) -> list:
    """What onnxruntime gives for ``batch`` (token types of zeros where the batch has none)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {
        item.name: batch.get(item.name, torch.zeros_like(batch["input_ids"])).numpy()
        for item in session.get_inputs()
    }
    return session.run(None, feed)


# Batches of shapes the export never saw (the sample export_onnx traces is 2 x 16), each with a padded row.
OTHER_SHAPES = [
    random_batch([23, 4, 11], seed=1),
    random_batch([7], seed=2),
    random_batch([30, 30, 2, 9], seed=3),
]


@pytest.fixture(scope="module")
def mean_export(tmp_path_factory):
    """A mean-pooling classifier's ONNX file (export_onnx verifies it): exported once for the two tests that read it."""
    return export_onnx(model_for("mean"), tmp_path_factory.mktemp("mean_export") / "model.onnx")


# One pooling is enough for the single-model export path: every pooling, label tokens in three variants included, is
# exported and compared the same way by the multi-task export below (one export instead of one per pooling).
def test_onnx_export_with_dynamic_axes_matches_pytorch_on_other_shapes(mean_export):
    model, path = model_for("mean").eval(), mean_export
    for batch in OTHER_SHAPES:
        (logits,) = onnx_outputs(path, batch)
        with torch.no_grad():
            expected = model(**batch).logits
        torch.testing.assert_close(torch.from_numpy(logits), expected, atol=1e-5, rtol=1e-5)


def test_a_token_classifier_exports_to_onnx(tmp_path):
    import onnx

    path = export_onnx(token_model(), tmp_path / "model.onnx")  # verified against PyTorch as above
    assert [output.name for output in onnx.load(str(path)).graph.output] == ["logits"]


def test_every_pooling_exports_to_onnx_in_one_multitask_model(tmp_path):
    # One export covers every registered pooling (and a token head): a multi-task model with a sequence head per
    # pooling, every head's output verified with onnxruntime against PyTorch on three batch shapes. One export of
    # the shared backbone instead of one per pooling keeps this fast; the poolings run the same code either way.
    import onnx

    tasks = {
        f"by_{name}": {"kind": "sequence", "pooling": name, "num_labels": 3} | SETTINGS.get(name, {})
        for name in sorted(POOLERS)
    }
    tasks["entities"] = {"kind": "token", "id2label": ENTITY_LABELS}
    # Label tokens joining the top layer only (train.py's default runs them in the top layers): the backbone's
    # layers run one by one, inserted vectors and all, in the exported graph too.
    tasks["by_label_tokens_top_layer"] = {**tasks["by_label_tokens"], "label_token_layers": 1}
    # One-way attention: the text does not attend to the label tokens (a mask edited in the graph).
    tasks["by_label_tokens_one_way"] = {
        **tasks["by_label_tokens"],
        "label_token_layers": 1,
        "label_token_attention": "one_way",
    }
    # Label text read apart from the text (label_text_layers=0: text and labels each through the backbone's own
    # forward), and scored per label with one label per pass (three joined rows per text).
    tasks["by_label_text_apart"] = {**tasks["by_label_text"], "label_text_layers": 0}
    tasks["by_label_text_per_label"] = {
        **tasks["by_label_text"],
        "label_text_scorer": "per_label",
        "label_tokens_per_pass": 1,
    }
    # Multi-sample dropout exports as the single evaluation pass (classifier_dropout_samples only acts in training).
    tasks["by_mean"] |= {"classifier_dropout": 0.1, "classifier_dropout_samples": 3}
    model = tiny_multitask_model(tasks=tasks).eval()
    path = export_onnx(model, tmp_path / "model.onnx")
    assert [output.name for output in onnx.load(str(path)).graph.output] == [
        f"{task}_logits" for task in tasks
    ]
    for batch in OTHER_SHAPES:
        with torch.no_grad():
            expected = model(**batch)
        for task, logits in zip(tasks, onnx_outputs(path, batch), strict=True):
            torch.testing.assert_close(torch.from_numpy(logits), expected[task].logits, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["label_tokens", "weighted_layer"])
def test_a_pooled_model_exports_its_embeddings(pooling, tmp_path):
    import onnxruntime

    model = model_for(pooling, model_class=PooledModel)
    path = export_onnx(model, tmp_path / "embeddings.onnx")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [output.name for output in session.get_outputs()] == ["embeddings"]
    assert {item.name for item in session.get_inputs()} == {"input_ids", "attention_mask", "token_type_ids"}


def test_an_export_that_does_not_match_is_refused(mean_export):
    model, path = model_for("mean"), mean_export  # the model the file was exported from (the same seed)
    from pooled_models import export

    def verify():
        export._verify(
            export._Exported(model, True),
            path,
            ["input_ids", "attention_mask", "token_type_ids"],
            [export._sample_batch(model, 2, 16, 0)],
            atol=1e-4,
        )

    verify()  # the control: the file matches the model it was exported from
    with torch.no_grad():
        model.classifier.head.out_proj.bias += 1.0  # the PyTorch model no longer matches the file
    with pytest.raises(
        ValueError, match=r"differs from the PyTorch model by .* on a batch of shape \(2, 16\)"
    ):
        verify()


# The poolings whose pooler holds parameters, which offloading moves to disk (test_the_offload_list_is_complete).
POOLINGS_WITH_PARAMETERS = ["attention", "gem", "label_text", "label_tokens", "lstm", "weighted_layer"]


def test_an_export_prints_none_of_the_exporters_notes_and_keeps_every_other_warning(tmp_path, capfd):
    """Issue 48: about eight lines on every export (torchvision's skipped operators, torch's pytree FutureWarning, the
    shared axis names) that the user cannot act on. Silenced inside the export only, each by its category and message:
    a warning the model itself gives during the export still shows, and so do the same notes outside the export."""
    import warnings

    import pooled_models.export as export_module

    model = tiny_model("mean")
    original = export_module._Exported.forward

    def forward_with_a_note(self, *tensors):
        warnings.warn("the user's own note", UserWarning, stacklevel=1)
        return original(self, *tensors)

    export_module._Exported.forward = forward_with_a_note
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            export_onnx(model, tmp_path / "model.onnx", verify=False)
            # control: outside the export, a note of the same kind is shown
            warnings.warn(
                "# The axis name: batch will not be used, since it shares the same shape constraints",
                UserWarning,
                stacklevel=1,
            )
    finally:
        export_module._Exported.forward = original
    messages = [str(warning.message) for warning in caught]
    assert "the user's own note" in messages
    assert [message for message in messages if "axis name" in message or "LeafSpec" in message] == [
        "# The axis name: batch will not be used, since it shares the same shape constraints"
    ]
    printed = capfd.readouterr()
    assert "torchvision" not in printed.err + printed.out


def test_the_offload_list_is_complete():
    assert [
        name for name in sorted(POOLERS) if list(model_for(name).pooler.parameters())
    ] == POOLINGS_WITH_PARAMETERS


@pytest.mark.parametrize("pooling", POOLINGS_WITH_PARAMETERS)
def test_disk_offload_runs_every_pooling_with_parameters(pooling):
    from accelerate import disk_offload

    batch = random_batch([5, 9])
    with torch.no_grad():
        expected = model_for(pooling)(**batch).logits
        offloaded = model_for(pooling)
        with tempfile.TemporaryDirectory() as folder:
            disk_offload(offloaded, folder, execution_device="cpu")
            # The weights wait on disk (meta tensors) until a forward call brings them: label embeddings included.
            assert offloaded.classifier.pooler.parameters().__next__().device.type == "meta"
            torch.testing.assert_close(offloaded(**batch).logits, expected)


def test_every_pooler_is_covered():
    assert set(HIDDEN_STATE_POOLERS) | {"label_tokens", "label_text"} == set(POOLERS)


@pytest.mark.slow
def test_the_readme_onnx_snippet_runs_on_a_tokenizers_output(tiny_backbone_path, minilm_tokenizer, tmp_path):
    import onnxruntime

    from pooled_models import PooledForSequenceClassification

    model = PooledForSequenceClassification.from_backbone(
        tiny_backbone_path, pooling="attention", num_labels=3
    )
    export_onnx(model, tmp_path / "model.onnx")
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"))
    batch = minilm_tokenizer(["a text", "another, longer text"], padding=True, return_tensors="np")
    logits = session.run(
        None, {name: batch[name] for name in ("input_ids", "attention_mask", "token_type_ids")}
    )[0]
    with torch.no_grad():
        expected = model(
            **minilm_tokenizer(["a text", "another, longer text"], padding=True, return_tensors="pt")
        )
    assert abs(logits - expected.logits.numpy()).max() < 1e-4
