"""bench/long_documents.py ``--keeping-only``: which windows a capped training document should keep (train.py's
``--window_keeping``), measured at no training cost by where the words that decide a label sit
(``bench/results/long_documents/keeping.md``, cited by docs/long-documents.md for the default)."""

from __future__ import annotations


def keeping_report(test_rows, test_lengths, window: int, tokenizer, tfidf) -> str:
    """Which windows a capped document should keep, measured on where the words that decide its label sit: the
    whole-text TF-IDF classifier scores the long test documents read through the windows each choice keeps (2, 4 and 8
    of them), as the model would read them in training. A classifier of the words, not of the model: it measures
    the windows' content, at no training cost."""
    from sklearn.metrics import accuracy_score

    from pooled_models.modeling.documents import WINDOW_KEEPING, tokenize_documents

    vectorizer, model = tfidf
    long = [row for row, n in zip(test_rows, test_lengths, strict=True) if n > window]
    gold = [row["label"] for row in long]
    texts = [row["text"] for row in long]
    stride = window // 8
    lines = [
        "| windows kept | " + " | ".join(WINDOW_KEEPING) + " | every window |",
        "|---|" + "---|" * (len(WINDOW_KEEPING) + 1),
    ]
    whole = accuracy_score(gold, model.predict(vectorizer.transform(texts)))
    for cap in (2, 4, 8):
        cells = []
        for keep in WINDOW_KEEPING:
            windows = tokenize_documents(tokenizer, texts, window, stride, cap, keep)["input_ids"]
            kept = [
                " ".join(tokenizer.decode(ids, skip_special_tokens=True) for ids in doc) for doc in windows
            ]
            cells.append(f"{accuracy_score(gold, model.predict(vectorizer.transform(kept))):.3f}")
        lines.append(f"| {cap} | " + " | ".join(cells) + f" | {whole:.3f} |")
    return (
        f"Accuracy of the whole-text TF-IDF + logistic regression on the {len(long)} long test documents read "
        f"through the windows ({window} tokens) each choice keeps:\n\n" + "\n".join(lines) + "\n"
    )
