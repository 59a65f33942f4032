"""Document models (document_window set) over vLLM, started as the docs start it: /classify and /pooling answer a whole
document, a 20,000-token one batched with short ones, as pipeline("text-classification") answers it (the plugin sends
each window as a prompt and pools the windows' vectors with the checkpoint's own cross-window pooler and head);
LLM.embed answers a document embedder as encode does; the offline LLM.classify as the pipeline. An empty document
or one past the stated window limit gets HTTP 400 naming it, and the server goes on; concurrent clients under one
X-Request-Id each get their own documents' answers; what cannot be served exactly is refused at load by name."""

import threading
import urllib.error

import pytest
import torch
from transformers import AutoTokenizer, pipeline
from vllm_helpers import LABELS, TOLERANCE, Server, offline_engine, save_checkpoint

from pooled_models import PooledForSequenceClassification, PooledModel, tokenize_documents
from pooled_models.serving.document_support import MAX_DOCUMENT_WINDOWS

# Windows of 64 tokens sharing 8; the transformer across windows, its zero-started projections moved by
# save_checkpoint (so a one-window document's score differs from the score without document mode).
DOCUMENT = {"document_window": 64, "document_stride": 8, "document_pooling": "transformer"}
MATCH = "The football match went on and on, and the team kept scoring goals until night. "
LONG = MATCH * 1200  # about 20,000 tokens: 357 windows
DOCUMENTS = ["I love this.", LONG, "ok", "Meetings that could have been an email. " * 40]


@pytest.fixture(scope="module")
def server(minilm_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("document_classifier")
    save_checkpoint(folder, AutoTokenizer.from_pretrained(minilm_path), "mean", **DOCUMENT)
    with Server(folder, tmp_path_factory.mktemp("log") / "server.log") as server:
        yield server


def pipeline_scores(model, texts) -> torch.Tensor:
    """pipeline("text-classification")'s scores, ``[texts, labels]`` in id order."""
    answers = pipeline("text-classification", model=model, tokenizer=model_tokenizer(model))(
        list(texts), top_k=None, batch_size=2
    )
    return torch.tensor(
        [[{a["label"]: a["score"] for a in row}[LABELS[i]] for i in LABELS] for row in answers]
    )


def model_tokenizer(model):
    return AutoTokenizer.from_pretrained(model if isinstance(model, str) else model.name_or_path)


def served_scores(answer: dict, key: str) -> torch.Tensor:
    return torch.tensor([item[key] for item in sorted(answer["data"], key=lambda item: item["index"])])


def test_classify_and_pooling_read_whole_documents_as_the_pipeline(server):
    folder = str(server.folder)
    expected = pipeline_scores(folder, DOCUMENTS)
    answer = server.post("/classify", {"input": DOCUMENTS})
    torch.testing.assert_close(served_scores(answer, "probs"), expected, atol=TOLERANCE, rtol=0)
    assert [item["label"] for item in answer["data"]] == [LABELS[int(row.argmax())] for row in expected]
    # Every window went through the engine: the usage counts each window's tokens.
    windows = tokenize_documents(model_tokenizer(folder), DOCUMENTS, 64, 8)["input_ids"]
    assert len(windows[1]) > 300
    assert answer["usage"]["prompt_tokens"] == sum(len(ids) for document in windows for ids in document)
    pooled = server.post("/pooling", {"input": DOCUMENTS})
    torch.testing.assert_close(served_scores(pooled, "data"), expected, atol=TOLERANCE, rtol=0)
    # Control: without document mode the same checkpoint reads the first window only, and scores otherwise.
    cut = PooledForSequenceClassification.from_pretrained(folder, document_window=None).eval()
    assert (pipeline_scores(cut, DOCUMENTS) - expected).abs().max() > 1e-3


def test_an_empty_document_or_one_past_the_window_limit_gets_400_naming_it(server):
    past_limit = "word " * (MAX_DOCUMENT_WINDOWS * 60)
    bad = [
        ({"input": ["I love this.", ""]}, "input[1]"),
        ({"input": [past_limit]}, f"at most {MAX_DOCUMENT_WINDOWS} windows"),
        ({"input": [[101, 2000, 102]]}, "token ids are not taken"),
        ({"input": ["I love this."], "truncate_prompt_tokens": 16}, "truncate_prompt_tokens"),
    ]
    for body, said in bad:
        status, answer = server.send("/classify", body)
        assert status == 400, (body, status, answer)
        assert said in answer["error"]["message"], answer
    expected = pipeline_scores(str(server.folder), DOCUMENTS[:1])
    served = served_scores(server.post("/classify", {"input": DOCUMENTS[:1]}), "probs")
    torch.testing.assert_close(served, expected, atol=TOLERANCE, rtol=0)


def test_concurrent_clients_under_one_request_id_each_get_their_own_documents_answers(server):
    texts = [MATCH * 3, MATCH * 9 + "I love this.", "I love this.", "Meetings again. " * 50, MATCH * 5]
    expected = pipeline_scores(str(server.folder), texts)
    wrong: list = []

    def client(index: int) -> None:
        for step in range(3):
            picked = [(index + step) % len(texts), (index + 2 * step + 1) % len(texts)]
            body = {"input": [texts[i] for i in picked]}
            status, answer = server.send("/classify", body, headers={"X-Request-Id": "retried"})
            if status != 200 or not torch.allclose(
                served_scores(answer, "probs"), expected[picked], atol=TOLERANCE, rtol=0
            ):
                wrong.append((picked, status, str(answer)[:200]))

    threads = [threading.Thread(target=client, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong, wrong[:3]


def test_a_document_embedder_embeds_as_encode(minilm_path, tmp_path):
    """LLM.embed (offline: an engine starts in a third of a server's time); /v1/embeddings runs the same hooked
    EmbedIOProcessor."""
    settings = {**DOCUMENT, "document_pooling": "attention", "normalize_embeddings": True}
    folder = save_checkpoint(
        tmp_path, AutoTokenizer.from_pretrained(minilm_path), "max", model_class=PooledModel, **settings
    )
    texts = [DOCUMENTS[0], MATCH * 7, DOCUMENTS[3]]
    expected = torch.as_tensor(PooledModel.from_pretrained(folder).eval().encode(texts))
    with offline_engine(folder) as llm:
        served = torch.tensor([output.outputs.embedding for output in llm.embed(texts, use_tqdm=False)])
        with pytest.raises(ValueError, match="scoring API .* is not served for a document model"):
            llm.score(texts[0], texts[1], use_tqdm=False)  # one prompt per text: refused, not answered
    torch.testing.assert_close(served, expected, atol=TOLERANCE, rtol=0)
    assert torch.allclose(served.norm(dim=-1), torch.ones(len(texts)), atol=1e-5)


def test_offline_classify_reads_documents_and_a_window_past_the_engine_is_refused_at_load(
    minilm_path, tmp_path
):
    # first_plus_rest (the default), its gate moved off zero by save_checkpoint: the windows past the first count
    settings = {**DOCUMENT, "document_pooling": "first_plus_rest"}
    folder = save_checkpoint(tmp_path, AutoTokenizer.from_pretrained(minilm_path), "mean", **settings)
    texts = [MATCH * 20, "I love this."]
    with offline_engine(folder) as llm:
        served = torch.tensor([output.outputs.probs for output in llm.classify(texts, use_tqdm=False)])
    torch.testing.assert_close(served, pipeline_scores(str(folder), texts), atol=TOLERANCE, rtol=0)
    with pytest.raises(
        ValueError, match="cannot serve PooledForSequenceClassification in document mode"
    ) as refused:
        with offline_engine(folder, max_model_len=32):
            pass
    assert "--max-model-len 64" in str(refused.value)


def test_a_refused_request_is_an_http_error_not_a_server_error(server):
    """A body vLLM's protocol refuses before the route (chat messages) gets a 4xx too."""
    with pytest.raises(urllib.error.HTTPError) as refused:
        server.post("/classify", {"messages": [{"role": "user", "content": "I love this."}]})
    assert 400 <= refused.value.code < 500
