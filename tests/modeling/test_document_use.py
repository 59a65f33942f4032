"""Document mode in use: texts cut into windows by the tokenizer, the collator with Trainer, the text-classification
and zero-shot pipelines on whole documents, encode, ONNX, and the seams (PEFT, torch.compile, bf16, gradient
checkpointing, trust_remote_code)."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import PAD_ID, rendered_card, run_without_package, tiny_backbone_config, tiny_model
from transformers import AutoModel, AutoTokenizer, Trainer, TrainingArguments, pipeline
from transformers.trainer_pt_utils import find_batch_size

from pooled_models import (
    DocumentCollator,
    PooledConfig,
    PooledForSequenceClassification,
    PooledModel,
    document_gate_parameters,
    export_onnx,
    tokenize_documents,
)
from pooled_models.modeling.documents import document_batch, select_windows
from pooled_models.modeling.label_text import label_text_token_ids, pad_label_ids

SHORT = ["a short text about cats", "dogs bark at night"]


def long_text(words: int) -> str:
    return " ".join(f"word{index % 97} the cat sat" for index in range(words // 4))


@pytest.fixture(scope="module")
def tokenizer(tiny_backbone_path):
    return AutoTokenizer.from_pretrained(tiny_backbone_path)


def saved_document_model(folder, tokenizer, model_class=PooledForSequenceClassification, **settings):
    """A tiny BERT with the MiniLM tokenizer's vocabulary in document mode, saved with the tokenizer."""
    config = tiny_backbone_config("bert")
    config.vocab_size = len(tokenizer)
    settings = {"document_window": 24, "document_stride": 4, "num_labels": 3, **settings}
    torch.manual_seed(0)
    model = model_class(PooledConfig(backbone_config=config, **settings)).eval()
    with torch.no_grad():  # the cross-window pooler off its start (the transformer starts as the identity)
        for parameter in model.document_pooler.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


# -- texts into windows ---------------------------------------------------------------------------------------------


def test_windows_overlap_by_the_stride_with_special_tokens_in_each(tokenizer):
    text = long_text(60)
    windows = tokenize_documents(tokenizer, [text, SHORT[0]], window=16, stride=3)["input_ids"]
    content = tokenizer(text, add_special_tokens=False)["input_ids"]
    first, second = windows[0][0], windows[0][1]
    assert first[0] == second[0] == tokenizer.cls_token_id and first[-1] == tokenizer.sep_token_id
    assert len(first) == 16 and first[1:-1] == content[:14]
    assert second[1:4] == first[-4:-1]  # 3 tokens shared
    # every token of the text is in a window, in order
    read = windows[0][0][1:-1] + [token for window in windows[0][1:] for token in window[1:-1][3:]]
    assert read == content
    # a text that fits in one window: exactly the ids tokenizing gives today
    assert windows[1] == [tokenizer(SHORT[0])["input_ids"]]


def test_texts_without_a_window_to_read_are_refused_by_row(tokenizer):
    for bad in ("", tokenizer.sep_token):
        with pytest.raises(
            ValueError, match=r"texts\[1\] = .* has no token besides the tokenizer's special tokens"
        ):
            tokenize_documents(tokenizer, [SHORT[0], bad], window=16, stride=2)
    with pytest.raises(
        ValueError,
        match=r"document_stride=14 must be smaller .* document_window=16 less the tokenizer's 2 special",
    ):
        tokenize_documents(tokenizer, SHORT, window=16, stride=14)


def test_a_left_truncating_tokenizer_still_reads_from_the_start(tokenizer):
    left = AutoTokenizer.from_pretrained(tokenizer.name_or_path, truncation_side="left")
    text = long_text(60)
    assert tokenize_documents(left, [text], 16, 3) == tokenize_documents(tokenizer, [text], 16, 3)
    assert left.truncation_side == "left"


def test_capped_documents_keep_the_windows_asked_for():
    assert select_windows(10, None) == list(range(10))
    assert select_windows(10, 4, "start") == [0, 1, 2, 3]
    assert select_windows(10, 4, "start_end") == [0, 1, 8, 9]
    assert select_windows(10, 4, "spread") == [0, 3, 6, 9]
    assert select_windows(3, 4, "spread") == [0, 1, 2]
    with pytest.raises(ValueError, match="Unknown keep='middle'. Valid choices: start, start_end, spread"):
        select_windows(10, 2, "middle")


# -- training with Trainer ------------------------------------------------------------------------------------------


def test_trainer_with_the_collator_learns_and_trains_backbone_and_cross_window_pooler(tokenizer, tmp_path):
    model = saved_document_model(tmp_path / "start", tokenizer, document_pooling="attention").train()
    # the label is decided by a word at the end of long documents: past the first window
    texts = [long_text(24) + (" alpha" if index % 2 else " omega") for index in range(8)]
    windows = tokenize_documents(tokenizer, texts, 24, 4)["input_ids"]
    rows = [{"input_ids": windows[i], "labels": i % 2} for i in range(len(texts))]
    collator = DocumentCollator(tokenizer)
    batch = collator(rows[:4])
    assert batch["labels"].dtype == torch.long and batch["document_windows"].shape[0] == 4
    # Trainer counts a batch's rows from its first tensor (the evaluation loss is weighted by them): documents, not
    # the windows of input_ids, which are more.
    assert batch["input_ids"].shape[0] > 4 and find_batch_size(batch) == 4
    model(**batch).loss.backward()
    for part in (
        model.backbone.embeddings.word_embeddings,
        model.classifier.document_pooler.across.scorer[0],
    ):
        assert part.weight.grad is not None and part.weight.grad.abs().sum() > 0
    model.zero_grad()
    arguments = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        num_train_epochs=3,
        learning_rate=3e-3,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
        remove_unused_columns=False,
    )
    trainer = Trainer(model=model, args=arguments, train_dataset=rows, data_collator=collator)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2


# -- prediction -----------------------------------------------------------------------------------------------------


def test_the_pipeline_reads_a_20000_token_text_batched_with_short_ones(tokenizer, tmp_path):
    model = saved_document_model(tmp_path, tokenizer, document_pooling="transformer")
    classify = pipeline("text-classification", model=str(tmp_path), top_k=None)
    texts = [SHORT[0], long_text(16000), SHORT[1]]
    assert len(tokenizer(texts[1])["input_ids"]) > 20000
    batched = classify(texts, batch_size=3)
    alone = [classify([text])[0] for text in texts]
    for together, single in zip(batched, alone, strict=True):
        assert [entry["label"] for entry in together] == [entry["label"] for entry in single]
        torch.testing.assert_close(
            torch.tensor([entry["score"] for entry in together]),
            torch.tensor([entry["score"] for entry in single]),
        )
    windows = tokenize_documents(tokenizer, texts, 24, 4)
    with torch.no_grad():
        logits = model(**document_batch([{"input_ids": ids} for ids in windows["input_ids"]], PAD_ID)).logits
    expected = logits.softmax(dim=-1)[1]
    got = {entry["label"]: entry["score"] for entry in batched[1]}
    torch.testing.assert_close(
        torch.tensor([got[f"LABEL_{i}"] for i in range(3)]), expected, atol=1e-5, rtol=1e-5
    )
    with pytest.raises(
        ValueError, match="max_length, truncation: a model in document mode .* reads the whole text"
    ):
        classify(texts[1], truncation=True, max_length=24)
    # control: the text cut at one window scores otherwise
    cut = tokenizer(texts[1], truncation=True, max_length=24, return_tensors="pt")
    with torch.no_grad():
        assert not torch.allclose(model(**cut).logits.softmax(dim=-1)[0], expected, atol=1e-4)


def test_encode_gives_one_vector_per_document_in_input_order(tokenizer, tmp_path):
    saved_document_model(tmp_path, tokenizer, model_class=PooledModel, document_pooling="max")
    model = AutoModel.from_pretrained(tmp_path)
    texts = [SHORT[0], long_text(200), SHORT[1], long_text(90)]
    vectors = torch.from_numpy(model.encode(texts, batch_size=5))  # 5 windows a batch: the long ones alone
    assert vectors.shape == (4, 32)
    for index, text in enumerate(texts):
        windows = tokenize_documents(tokenizer, [text], 24, 4)["input_ids"][0]
        with torch.no_grad():
            expected = model(**document_batch([{"input_ids": windows}], PAD_ID)).pooler_output[0]
        torch.testing.assert_close(vectors[index], expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="max_length=16: a model in document mode reads the whole text"):
        model.encode(texts, max_length=16)


def test_the_zero_shot_pipeline_scores_a_documents_vector_against_label_texts(tokenizer, tmp_path):
    model = saved_document_model(tmp_path, tokenizer, pooling="label_text", document_pooling="mean")
    classify = pipeline("zero-shot-classification", model=str(tmp_path))
    texts = [long_text(200) + " sports", SHORT[0]]
    results = classify(texts, candidate_labels=["sports", "cooking"], batch_size=2)
    labels, label_mask = pad_label_ids(label_text_token_ids(["sports", "cooking"], tokenizer), device="cpu")
    windows = tokenize_documents(tokenizer, texts, 24, 4)["input_ids"]
    with torch.no_grad():
        logits = model(
            **document_batch([{"input_ids": ids} for ids in windows], PAD_ID),
            label_input_ids=labels,
            label_attention_mask=label_mask,
        ).logits
    for result, row in zip(results, logits.softmax(dim=-1), strict=True):
        got = dict(zip(result["labels"], result["scores"], strict=True))
        torch.testing.assert_close(torch.tensor([got["sports"], got["cooking"]]), row, atol=1e-5, rtol=1e-5)


# -- export and seams -----------------------------------------------------------------------------------------------

# The poolings whose start hides part of them (the transformer starts as the identity, first_plus_rest's gate at
# zero): each seam is tried with them moved off their start, where a lost or mistyped parameter changes the scores.
STARTS_HIDE_PARTS = ["transformer", "first_plus_rest"]


def moved_document_model(document_pooling: str):
    """A tiny document model, its cross-window pooler moved off its start by a seeded draw."""
    model = tiny_model("mean", document_window=12, document_pooling=document_pooling)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for parameter in model.document_pooler.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return model


@pytest.mark.parametrize("document_pooling", STARTS_HIDE_PARTS)
def test_onnx_exports_window_encoder_and_cross_window_pooling_exactly(document_pooling, tmp_path):
    import onnxruntime

    model = moved_document_model(document_pooling)
    path = export_onnx(model, tmp_path / "model.onnx")  # verified on batches of 1 to 3 documents
    batch = document_batch(
        [{"input_ids": [[7, 8, 9, 10], [11, 12], [13, 14, 15]]}, {"input_ids": [[20, 21, 22]]}], PAD_ID
    )
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [node.name for node in session.get_inputs()]
    assert names == ["input_ids", "attention_mask", "token_type_ids", "document_windows"]
    batch["token_type_ids"] = torch.zeros_like(batch["input_ids"])
    (logits,) = session.run(None, {name: batch[name].numpy() for name in names})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(logits), model(**batch).logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("document_pooling", STARTS_HIDE_PARTS)
def test_compiled_bf16_and_checkpointed_document_models_give_the_eager_scores(document_pooling):
    model = moved_document_model(document_pooling)
    batch = document_batch([{"input_ids": [[7, 8, 9], [10, 11]]}, {"input_ids": [[20, 21, 22, 23]]}], PAD_ID)
    with torch.no_grad():
        expected = model(**batch).logits
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        torch.testing.assert_close(compiled(**batch).logits, expected, atol=1e-5, rtol=1e-5)
        half = moved_document_model(document_pooling).to(torch.bfloat16)
        torch.testing.assert_close(half(**batch).logits.float(), expected, atol=5e-2, rtol=5e-2)
    model.train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model(**batch, labels=torch.tensor([0, 2])).loss.backward()
    assert model.backbone.encoder.layer[0].attention.self.query.weight.grad is not None


@pytest.mark.parametrize("document_pooling", STARTS_HIDE_PARTS)
def test_fp16_and_a_resized_vocabulary_keep_a_document_models_scores(document_pooling):
    model = moved_document_model(document_pooling)
    batch = document_batch([{"input_ids": [[7, 8, 9], [10, 11]]}, {"input_ids": [[20, 21, 22, 23]]}], PAD_ID)
    with torch.no_grad():
        expected = model(**batch).logits
        half = moved_document_model(document_pooling).to(torch.float16)
        torch.testing.assert_close(half(**batch).logits.float(), expected, atol=2e-2, rtol=2e-2)
        vocabulary = model.get_input_embeddings().num_embeddings
        model.resize_token_embeddings(vocabulary + 8)
        assert model.get_input_embeddings().num_embeddings == vocabulary + 8
        # the documents' tokens keep their vectors, and the cross-window pooler is untouched
        torch.testing.assert_close(model(**batch).logits, expected)


@pytest.mark.parametrize("document_pooling", ["attention", "first_plus_rest"])
def test_lora_saves_the_cross_window_pooler_with_the_adapter(document_pooling, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    def fresh():
        return tiny_model("mean", document_window=12, document_pooling=document_pooling)

    model = get_peft_model(fresh(), LoraConfig(task_type="SEQ_CLS", target_modules=["query", "value"], r=4))
    trainable = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
    assert any(".document_pooler.across.scorer." in name for name in trainable)
    trained_gates = {
        id(p) for n, p in model.named_parameters() if p.requires_grad and n.endswith("across.gate")
    }
    # document_gate_parameters names PEFT's trained copy of the gate (the one an optimizer group must hold)
    assert len(trained_gates) == (document_pooling == "first_plus_rest")
    assert trained_gates <= document_gate_parameters(model)
    batch = document_batch([{"input_ids": [[7, 8, 9], [10, 11]]}, {"input_ids": [[20, 21, 22, 23]]}], PAD_ID)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(2):
        model(**batch, labels=torch.tensor([0, 2])).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        logits = model(**batch).logits
    model.save_pretrained(tmp_path)
    reloaded = PeftModel.from_pretrained(fresh(), tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, logits, atol=1e-6, rtol=1e-6)
        assert not torch.allclose(
            fresh()(**batch).logits, logits, atol=1e-4
        )  # control: the training mattered


@pytest.mark.slow  # a fresh interpreter without the package
@pytest.mark.parametrize("document_pooling", STARTS_HIDE_PARTS)
def test_a_document_checkpoint_reads_whole_texts_without_the_package(document_pooling, tokenizer, tmp_path):
    saved_document_model(tmp_path / "model", tokenizer, document_pooling=document_pooling)
    texts = [long_text(300), SHORT[0]]
    expected = pipeline("text-classification", model=str(tmp_path / "model"), top_k=None)(texts, batch_size=2)
    script = f"""
        import json
        from transformers import pipeline
        classify = pipeline("text-classification", model={str(tmp_path / "model")!r}, trust_remote_code=True,
                            top_k=None)
        print(json.dumps({{"module": type(classify.model).__module__, "scores": classify({texts!r}, batch_size=2)}}))
    """
    result = run_without_package(script, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["module"].startswith("transformers_modules.")
    for got, want in zip(report["scores"], expected, strict=True):
        assert [entry["label"] for entry in got] == [entry["label"] for entry in want]
        torch.testing.assert_close(
            torch.tensor([entry["score"] for entry in got]), torch.tensor([entry["score"] for entry in want])
        )


def test_the_model_card_states_the_window_settings(tmp_path):
    def card_of(**settings) -> str:
        backbone = tiny_backbone_config("bert")
        config = PooledConfig(
            backbone_config=backbone, num_labels=2, problem_type="single_label_classification", **settings
        )
        return rendered_card(config, tmp_path)

    card = card_of(document_window=48, document_stride=6, document_pooling="transformer")
    for row in (
        "| `document_window` | `48` |",
        "| `document_stride` | `6` |",
        "| `document_pooling` | `transformer` |",
    ):
        assert row in card
    assert "| `document_transformer_layers` | `2` |" in card
    assert "document_window" not in card_of()


def test_a_text_cut_to_one_window_outside_the_document_route_is_warned_of(tokenizer, tmp_path):
    """sentence-transformers cuts a text at max_seq_length and calls forward without document_windows: the model
    reads the first window only, which it says (once), while encode reads the whole text."""
    from sentence_transformers import SentenceTransformer
    from transformers.testing_utils import CaptureLogger

    from pooled_models.modeling import window_pooling

    saved_document_model(tmp_path, tokenizer, model_class=PooledModel, document_pooling="mean")
    text = long_text(200)
    with CaptureLogger(window_pooling.logger) as short_call:
        SentenceTransformer(str(tmp_path), device="cpu").encode([SHORT[0]])
    assert "document mode" not in short_call.out
    loaded = SentenceTransformer(str(tmp_path), device="cpu")
    with CaptureLogger(window_pooling.logger) as long_call:
        cut = torch.from_numpy(loaded.encode([text, text]))
    assert long_call.out.count("read from its first window only") == 1  # once per model
    model = AutoModel.from_pretrained(tmp_path)
    first_window = tokenize_documents(tokenizer, [text], 24, 4)["input_ids"][0][:1]
    with torch.no_grad():
        expected = model(**document_batch([{"input_ids": first_window}], PAD_ID)).pooler_output[0]
    torch.testing.assert_close(cut[0], expected, atol=1e-5, rtol=1e-5)
    whole = torch.from_numpy(model.encode([text]))[0]
    assert not torch.allclose(cut[0], whole, atol=1e-3)
