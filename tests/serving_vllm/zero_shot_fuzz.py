"""Seeded random bodies for the zero-shot route (/pooling with the pooled_models_zero_shot plugin): well-formed ones,
and ones broken in a field of ``data``, in the request around it, or in the JSON itself. What a well-formed body must
be answered with is the zero-shot pipeline's answer (``expected_answer``)."""

from __future__ import annotations

import json
import random

from pooled_models.serving.zero_shot_request import MAX_CANDIDATE_LABELS, MAX_TEXTS

LONG = "word " * 400  # longer than the engine's 256 tokens (MiniLM's sentence_bert_config.json)
# No empty or blank text: the plugin refuses those with a 400 of their own (serving/empty_texts.py, test_http.py).
TEXTS = [
    "I love this.",
    "The train was late again and I missed the connection to the airport.",
    "Add the onions to the pan and stir until golden.",
    "Ünïcödé, accents et ponctuation : ça marche ?",
    "emoji 🎉 and symbols ∑ ≠ ∞",
    LONG,
]
# Labels that no two of tokenise alike (ties between equal labels could be ordered either way).
SHARED_LABELS = [
    "sports",
    "travel",
    "cooking",
    "politics",
    "weather",
    "a long label about household chores and cleaning",
    "café",
    "日本",
    "music, film",
]
GOOD_TEMPLATES = ["{}", "This text is about {}.", "{{{}}}", "{} {{x}}"]
BAD_TEMPLATES = [
    "{} {}",
    "{0}",
    "{label}",
    "{:>10}",
    "{!r}",
    "{",
    "}",
    "{} }",
    "{a.b}",
    "no field",
    "",
    "{{}}",
]
WRONG_VALUES = [None, 0, 1.5, True, {}, {"a": 1}, [], [1, 2], [["a"]], [None], "", "x"]


def body(rng: random.Random, own_labels: list[str] | None) -> tuple[str, dict | bytes]:
    """(kind, body): ``own_labels`` for a model that scores its own labels only (per_label), else None."""
    roll = rng.random()
    if roll < 0.45:
        data = good_data(rng, own_labels)
        texts = [data["texts"]] if isinstance(data["texts"], str) else data["texts"]
        return ("well-formed, a text over the engine's length" if LONG in texts else "well-formed"), {
            "data": data
        }
    if roll < 0.85:
        return "broken data", {"data": broken_data(rng, own_labels)}
    return broken_request(rng, own_labels)


def good_data(rng: random.Random, own_labels: list[str] | None) -> dict:
    pool = own_labels or SHARED_LABELS
    labels = rng.sample(pool, rng.randint(1, min(5, len(pool))))
    texts = rng.sample(TEXTS, rng.randint(1, 3))
    data: dict = {
        "texts": texts[0] if rng.random() < 0.3 else texts,
        "candidate_labels": labels if rng.random() < 0.8 or "," in "".join(labels) else ", ".join(labels),
    }
    if rng.random() < 0.6:
        data["multi_label"] = rng.random() < 0.5
    if own_labels is None and rng.random() < 0.5:
        data["hypothesis_template"] = rng.choice(GOOD_TEMPLATES)
    return data


def broken_data(rng: random.Random, own_labels: list[str] | None) -> object:
    data = good_data(rng, own_labels)
    how = rng.randrange(9)
    if how == 0:
        data[rng.choice(["texts", "candidate_labels", "multi_label", "hypothesis_template"])] = rng.choice(
            WRONG_VALUES
        )
    elif how == 1:
        data.pop(rng.choice(["texts", "candidate_labels"]))
    elif how == 2:
        data[rng.choice(["labels", "text", "top_k", "Texts"])] = "extra"
    elif how == 3:
        data["hypothesis_template"] = rng.choice(BAD_TEMPLATES)
    elif how == 4:
        field = rng.choice(["texts", "candidate_labels", "hypothesis_template"])
        data[field] = ["fine", "lone \ud800 surrogate"] if field != "hypothesis_template" else "{} \udc00"
    elif how == 5:
        labels = list(data["candidate_labels"]) if isinstance(data["candidate_labels"], list) else ["x"]
        data["candidate_labels"] = labels + labels[:1]  # a label twice
    elif how == 6:
        data["candidate_labels"] = [f"label {i}" for i in range(MAX_CANDIDATE_LABELS + 1)]
    elif how == 7:
        data["texts"] = ["a"] * (MAX_TEXTS + 1)
    else:
        return rng.choice(["texts", 3, None, ["texts"], True])  # data is not an object
    return data


def broken_request(rng: random.Random, own_labels: list[str] | None) -> tuple[str, dict | bytes]:
    how = rng.randrange(7)
    good = {"data": good_data(rng, own_labels)}
    if how == 0:
        return "broken request", {**good, "truncate_prompt_tokens": rng.choice([-1, 1, 2, 3, 5, 300])}
    if how == 1:
        return "broken request", {**good, "padding": "max_length"}
    if how == 2:
        return "broken request", {**good, "task": rng.choice(["classify", "embed", "nonsense"])}
    if how == 3:
        return "broken request", {**good, "model": "a model this server does not serve"}
    if how == 4:
        return "broken request", {**good, "encoding_format": rng.choice(["base64", "bytes", "nonsense"])}
    if how == 5:
        return "broken JSON", rng.choice(
            [b"{", b"", b"[]", b"null", b'{"data": ', '{"data": "\xff"}'.encode("latin-1")]
        )
    return "broken request", {}  # no data at all


def expected_answer(pipe, data: dict) -> list[dict]:
    """The zero-shot pipeline's answer to ``data`` (raises where the pipeline refuses it)."""
    texts = data["texts"]
    kwargs = {key: data[key] for key in ("multi_label", "hypothesis_template") if key in data}
    answer = pipe(texts, candidate_labels=data["candidate_labels"], **kwargs)
    return [answer] if isinstance(texts, str) else answer


def same_answer(got: object, want: list[dict], tolerance: float) -> bool:
    """Each text's labels with the same scores (``tolerance``), in the same order where scores are apart."""
    if not isinstance(got, list) or len(got) != len(want):
        return False
    for served, expected in zip(got, want, strict=True):
        if served.get("sequence") != expected["sequence"] or sorted(served["labels"]) != sorted(
            expected["labels"]
        ):
            return False
        scores = dict(zip(served["labels"], served["scores"], strict=True))
        if any(
            abs(scores[label] - score) > tolerance
            for label, score in zip(expected["labels"], expected["scores"], strict=True)
        ):
            return False
        order = [
            scores[label] for label in expected["labels"]
        ]  # the pipeline's order, read in the served scores
        if any(later - earlier > tolerance for earlier, later in zip(order, order[1:], strict=False)):
            return False
    return True


def printable(body: dict | bytes) -> str:
    return repr(body)[:300] if isinstance(body, bytes) else json.dumps(body)[:300]
