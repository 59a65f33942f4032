"""One long text, one length: a model train.py trained on the packaged MiniLM at a short --max_seq_length (32, where
the MiniLM folder says 256 and its tokenizer 512) gives the same scores for a 2,000-token text through train.py's
--do_predict, pipeline(...), encode, ONNX Runtime and vLLM (the HTTP server started with docs/serving.md's command, and
the offline LLM), each called as docs/serving.md and docs/training.md say (issue 42, "One length everywhere")."""

import json
import urllib.error
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from helpers import topic_rows, train, write_rows
from transformers import AutoTokenizer, pipeline
from vllm_helpers import TOLERANCE, Server, offline_engine

from pooled_models import PooledForSequenceClassification, export_onnx

LENGTH = 32
LONG = "The football match went on and on, and the team kept scoring goals until night. " * 120
TEXTS = [LONG, "We watched the football match."]


@pytest.fixture(scope="module")
def trained(minilm_path, tmp_path_factory):
    """train.py's model and the scores of its --do_predict, label by label in id order."""
    data = tmp_path_factory.mktemp("data")
    flags = [
        "--train_file", str(write_rows(data / "train.jsonl", topic_rows(24))),
        "--test_file", str(write_rows(data / "test.jsonl", [{"text": text} for text in TEXTS])),
        "--do_train", "--do_predict", "--pooling", "mean", "--max_seq_length", str(LENGTH),
        "--num_train_epochs", "1",
    ]  # fmt: skip
    folder = train(minilm_path, tmp_path_factory.mktemp("run") / "out", *flags).output_dir
    config = json.loads((folder / "config.json").read_text())
    labels = [config["id2label"][str(index)] for index in range(len(config["id2label"]))]
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    return folder, labels, torch.tensor([[row["scores"][label] for label in labels] for row in rows])


def test_every_path_gives_train_pys_scores_for_a_long_text(trained, tmp_path):
    folder, labels, predicted = trained
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert len(tokenizer(LONG)["input_ids"]) > 2000
    assert json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"] == LENGTH
    # pipeline, as users call it
    answers = pipeline("text-classification", model=str(folder))(TEXTS, top_k=None)
    piped = torch.tensor(
        [[{a["label"]: a["score"] for a in row}[label] for label in labels] for row in answers]
    )
    torch.testing.assert_close(piped, predicted, atol=TOLERANCE, rtol=0)
    # encode's pooled vectors, through the head
    model = PooledForSequenceClassification.from_pretrained(folder).eval()
    pooled = torch.as_tensor(model.encode(TEXTS, normalize_embeddings=False))
    with torch.no_grad():
        torch.testing.assert_close(
            model.classifier.logits(pooled).softmax(-1), predicted, atol=TOLERANCE, rtol=0
        )
    # ONNX Runtime, fed by the saved tokenizer with truncation=True
    session = onnxruntime.InferenceSession(str(export_onnx(model, tmp_path / "model.onnx")))
    names = [item.name for item in session.get_inputs()]
    onnx_scores = []
    for text in TEXTS:
        batch = tokenizer(text, truncation=True, return_tensors="np")
        (logits,) = session.run(None, {name: batch[name].astype(np.int64) for name in names})
        onnx_scores.append(torch.from_numpy(logits[0]).softmax(-1))
    torch.testing.assert_close(torch.stack(onnx_scores), predicted, atol=TOLERANCE, rtol=0)
    # vLLM offline, asked to cut as docs/serving.md shows
    with offline_engine(folder) as llm:
        outputs = llm.classify(TEXTS, tokenization_kwargs={"truncation": True}, use_tqdm=False)
        assert llm.llm_engine.model_config.max_model_len == LENGTH
    served = torch.tensor([output.outputs.probs for output in outputs])
    torch.testing.assert_close(served, predicted, atol=TOLERANCE, rtol=0)


def test_the_server_cuts_a_long_text_when_asked_and_refuses_it_otherwise(trained, tmp_path):
    folder, _, predicted = trained
    with Server(Path(folder), tmp_path / "server.log") as server:
        answer = server.post("/classify", {"input": TEXTS, "truncate_prompt_tokens": -1})
        served = torch.tensor([item["probs"] for item in answer["data"]])
        torch.testing.assert_close(served, predicted, atol=TOLERANCE, rtol=0)
        with pytest.raises(urllib.error.HTTPError) as refused:
            server.post("/classify", {"input": TEXTS})
    assert refused.value.code == 400
    assert (
        f"maximum context length is {LENGTH} tokens" in json.loads(refused.value.read())["error"]["message"]
    )
