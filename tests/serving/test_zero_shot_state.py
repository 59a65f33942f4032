"""The zero-shot route's parts that need no vLLM (tests/serving_vllm serves them): a request's data checked field by
field, the requests in flight found again by their id and their prompts, and the label vectors' cache; the last two
under concurrent threads, as vLLM calls pre_process on its event loop and post_process on worker threads."""

import random
import threading

import pytest
import torch

from pooled_models.modeling.zero_shot_pipeline import template_refusal
from pooled_models.serving.in_flight import InFlightRequests
from pooled_models.serving.label_vector_cache import LabelVectorCache
from pooled_models.serving.zero_shot_request import MAX_CANDIDATE_LABELS, MAX_TEXTS, parse_request

GOOD = {"texts": ["A text."], "candidate_labels": ["sports", "travel"]}

# Templates that would fail in str.format, or place something else than the label.
MALFORMED_TEMPLATES = [
    "{} {}",  # two fields
    "{0}",  # positional
    "{label}",  # named
    "{:>10}",  # format spec
    "{!r}",  # conversion
    "{",  # unbalanced
    "}",
    "{} }",
    "about {x.y}",
    "{[0]}",
    "{:{}}",  # nested field in a spec
    "no field",
    "",
    "{{}}",  # an escaped brace pair: no field
    3,
    None,
    ["{}"],
]


@pytest.mark.parametrize("template", MALFORMED_TEMPLATES, ids=repr)
def test_a_malformed_template_is_refused_naming_the_field(template):
    with pytest.raises(ValueError, match="hypothesis_template") as refused:
        parse_request({**GOOD, "hypothesis_template": template}, None)
    assert template_refusal(template) == str(refused.value)


def test_well_formed_templates_place_the_label():
    for template, expected in [("{}", "sports"), ("about {}.", "about sports."), ("{{ {} }}", "{ sports }")]:
        assert template_refusal(template) is None
        request = parse_request({**GOOD, "hypothesis_template": template}, None)
        assert request.label_texts[0] == expected
        assert request.labels == ("sports", "travel")


BAD_DATA = [
    ("not an object", "data must be an object"),
    ({**GOOD, "labels": []}, r"unknown fields \['labels'\]"),
    ({**GOOD, 7: 1}, r"unknown fields \['7'\]"),
    ({**GOOD, "texts": []}, "texts must be"),
    ({**GOOD, "texts": [1]}, "texts must be"),
    ({**GOOD, "texts": ["A text.", " "]}, r"The text is empty \(texts\[1\]\)"),
    ({**GOOD, "texts": ""}, r"The text is empty \(texts\[0\]\)"),
    ({**GOOD, "texts": ["a"] * (MAX_TEXTS + 1)}, f"at most {MAX_TEXTS}"),
    ({**GOOD, "texts": ["ok", "bad \ud800 text"]}, r"texts\[1\] is not valid Unicode"),
    ({**GOOD, "candidate_labels": []}, "candidate_labels must be"),
    ({**GOOD, "candidate_labels": " , "}, "candidate_labels must be"),
    ({**GOOD, "candidate_labels": ["a", " "]}, "non-empty strings"),
    ({**GOOD, "candidate_labels": ["a", "a"]}, "'a' more than once"),
    ({**GOOD, "candidate_labels": [str(i) for i in range(MAX_CANDIDATE_LABELS + 1)]}, "at most"),
    ({**GOOD, "candidate_labels": ["\udfff"]}, r"candidate_labels\[0\] is not valid Unicode"),
    ({**GOOD, "multi_label": 1}, "multi_label must be true or false"),
    ({**GOOD, "hypothesis_template": "about \ud800 {}"}, "hypothesis_template is not valid Unicode"),
]


@pytest.mark.parametrize("data, said", BAD_DATA, ids=lambda value: str(value)[:40])
def test_bad_data_is_refused_naming_the_field(data, said):
    with pytest.raises(ValueError, match=said):
        parse_request(data, None)


def test_a_per_label_model_refuses_labels_it_does_not_have_after_the_template():
    own = {"sports": 0, "travel": 1}
    assert parse_request({**GOOD, "candidate_labels": "travel, sports"}, own).label_texts == (
        "travel",
        "sports",
    )
    with pytest.raises(ValueError, match="'about sports', 'about travel' are not one of them"):
        parse_request({**GOOD, "hypothesis_template": "about {}"}, own)


def run_threads(target, count: int) -> None:
    """``target(index)`` on ``count`` threads at once, until every one has returned."""
    threads = [threading.Thread(target=target, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def tag(nonce: int) -> tuple[int, ...]:
    return (-1, nonce)  # ids no prompt of these tests holds


def test_requests_sharing_an_id_are_found_by_their_prompts():
    flight = InFlightRequests()
    first = flight.add("pooling-same", ((1, 2), (3,)), "first", tag)
    second = flight.add("pooling-same", ((1, 2), (4,)), "second", tag)
    assert (first, second) == (((1, 2), (3,)), ((1, 2), (4,)))  # different prompts: nothing added
    assert flight.take("pooling-same", second) == "second"
    assert flight.take("pooling-same", first) == "first"
    assert len(flight) == 0


def test_the_same_prompts_under_the_same_id_get_a_tag_of_their_own():
    flight = InFlightRequests()
    prompts = ((1, 2), (3,))
    sent = [flight.add("pooling-same", prompts, index, tag) for index in range(3)]
    assert sent[0] == prompts and len(set(sent)) == 3
    assert all(found[: len(prompts)] == prompts and len(found) == len(prompts) + 1 for found in sent[1:])
    for index in (2, 0, 1):  # any order: each request gets its own state
        assert flight.take("pooling-same", sent[index]) == index
    # Once the first is gone, the same prompts need no tag again.
    assert flight.add("pooling-same", prompts, "again", tag) == prompts


def test_another_id_never_finds_a_request():
    flight = InFlightRequests()
    flight.add("pooling-a", ((1,),), "a", tag)
    with pytest.raises(RuntimeError, match="no longer holds this request"):
        flight.take("pooling-b", ((1,),))
    assert flight.take("pooling-a", ((1,),)) == "a"


def test_prompts_that_came_back_changed_are_refused_naming_the_request_settings():
    flight = InFlightRequests()
    flight.add("pooling-a", ((1, 2, 3), (4, 5)), "a", tag)
    with pytest.raises(ValueError, match="truncate_prompt_tokens, truncation_side or padding"):
        flight.take("pooling-a", ((1, 2), (4, 5)))  # truncated by vLLM


def test_the_oldest_requests_are_dropped_beyond_the_limit():
    flight = InFlightRequests(limit=2)
    for index in range(3):
        flight.add(f"pooling-{index}", ((index,),), index, tag)
    assert len(flight) == 2
    with pytest.raises(RuntimeError, match="more than 2 requests were in flight"):
        flight.take("pooling-0", ((0,),))
    assert [flight.take(f"pooling-{i}", ((i,),)) for i in (1, 2)] == [1, 2]


def test_concurrent_requests_under_few_ids_each_get_their_own_state():
    flight = InFlightRequests()
    errors, found = [], []

    def client(worker: int) -> None:
        rng = random.Random(worker)
        for step in range(200):
            request_id = f"pooling-{rng.randrange(2)}"  # two ids for eight threads: many collisions
            prompts = ((rng.randrange(3),), (7,))  # few distinct prompts: many identical ones
            state = (worker, step)
            sent = flight.add(request_id, prompts, state, tag)
            try:
                found.append(flight.take(request_id, sent) == state)
            except Exception as error:  # noqa: BLE001 (collected and asserted below)
                errors.append(error)

    run_threads(client, 8)
    assert not errors and len(found) == 1600 and all(found)
    assert len(flight) == 0


def test_the_cache_keeps_the_most_recently_used_labels():
    cache = LabelVectorCache(max_entries=2)
    cache.store({"a": torch.ones(2), "b": torch.zeros(2)})
    assert set(cache.lookup(["a"])) == {"a"}  # "a" used: "b" is now the oldest
    cache.store({"c": torch.full((2,), 2.0)})
    assert set(cache.lookup(["a", "b", "c"])) == {"a", "c"} and len(cache) == 2
    torch.testing.assert_close(cache.lookup(["c"])["c"], torch.full((2,), 2.0))
    with pytest.raises(ValueError, match="at least 1"):
        LabelVectorCache(0)


def test_the_cache_under_concurrent_threads_stays_bounded_and_right():
    cache = LabelVectorCache(max_entries=16)
    errors = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(500):
            keys = [str(rng.randrange(40)) for _ in range(5)]
            if rng.random() < 0.5:
                cache.store({key: torch.full((3,), float(key)) for key in keys})
            for key, vector in cache.lookup(keys).items():
                if not torch.equal(vector, torch.full((3,), float(key))):
                    errors.append(key)

    run_threads(worker, 8)
    assert not errors and len(cache) == 16
