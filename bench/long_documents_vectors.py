"""A control of bench/long_documents.py: do the pretrained backbone's own window vectors carry a document's label past
its first window? No fine-tuning, so no training recipe can be the reason for what it shows.

Each document's windows (the window and stride of document mode, at most ``MAX_WINDOWS`` from its start) are embedded
by the packaged all-MiniLM-L6-v2 as sentence-transformers embeds a text (mean of the tokens, unit length), and
logistic regression (C chosen on validation accuracy) reads one of three document vectors:

* ``first window``: the first window's vector, what a cut model reads;
* ``mean of windows``: the mean of every window's vector, as sentence-transformers' maintainers tell users to pool
  chunks;
* ``first and mean``: both, side by side.
"""

from __future__ import annotations

from functools import lru_cache

VECTOR_ARMS = {
    "minilm vectors + logistic regression, first window": "first",
    "minilm vectors + logistic regression, mean of windows": "mean",
    "minilm vectors + logistic regression, first and mean": "first and mean",
}
MAX_WINDOWS = 32  # past the 90th percentile of the manual pages (12 windows of 128): only the longest are cut
BATCH = 128


@lru_cache(maxsize=3)  # the three arms read the same windows of the same splits: embedded once
def window_vectors(model_path: str, texts: tuple[str, ...], window: int, stride: int):
    """``[windows, D]`` unit vectors of every document's windows, and each window's document (a numpy array)."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from pooled_models import tokenize_documents
    from pooled_models.modeling.pooling import reduce_mean

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path).eval()
    documents = tokenize_documents(tokenizer, list(texts), window, stride, MAX_WINDOWS, "start")["input_ids"]
    flat = [(document, ids) for document, windows in enumerate(documents) for ids in windows]
    vectors = []
    with torch.no_grad():
        for start in range(0, len(flat), BATCH):
            batch = tokenizer.pad(
                {"input_ids": [ids for _, ids in flat[start : start + BATCH]]}, return_tensors="pt"
            )
            mean = reduce_mean(model(**batch).last_hidden_state, batch["attention_mask"].bool())
            vectors.append(torch.nn.functional.normalize(mean, dim=-1))
    return torch.cat(vectors).numpy(), np.array([document for document, _ in flat])


def document_vectors(vectors, owners, documents: int, kind: str):
    """One vector per document from its windows' vectors: the first, their mean, or both side by side."""
    import numpy as np

    first = np.stack([vectors[owners == document][0] for document in range(documents)])
    mean = np.stack([vectors[owners == document].mean(axis=0) for document in range(documents)])
    return {"first": first, "mean": mean, "first and mean": np.hstack([first, mean])}[kind]


def chosen_logistic_regression(train, train_labels, validation, validation_labels):
    """Logistic regression fitted on ``train``, its C (1, 10 or 100) chosen on validation accuracy: the classifier of
    every fixed-feature arm (TF-IDF's too)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score

    best, best_score = None, -1.0
    for c in (1.0, 10.0, 100.0):
        model = LogisticRegression(C=c, max_iter=3000).fit(train, train_labels)
        score = accuracy_score(validation_labels, model.predict(validation))
        if score > best_score:
            best, best_score = model, score
    return best


def run_vectors(rows, arm: str, model_path: str, window: int) -> list[str]:
    """The test documents' predicted labels by the arm's document vectors and logistic regression."""
    kind = VECTOR_ARMS[arm]
    features, labels = {}, {}
    for split, part in rows.items():
        vectors, owners = window_vectors(model_path, tuple(row["text"] for row in part), window, window // 8)
        features[split] = document_vectors(vectors, owners, len(part), kind)
        labels[split] = [row["label"] for row in part]
    model = chosen_logistic_regression(
        features["train"], labels["train"], features["validation"], labels["validation"]
    )
    return list(model.predict(features["test"]))
