"""The multi-task demo's generated data: committed as generated, BIO tags that mark exactly the slot values."""

import json
import re

from helpers import REPO

from pooled_models.train.demo import ENTITY_TYPES, SLOTS, demo_multitask_rows, join_words


def test_the_committed_multitask_demo_data_is_what_the_generator_writes():
    for split, rows in demo_multitask_rows().items():
        lines = (REPO / "data" / "demo_multitask" / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in lines] == rows, (
            "regenerate with: python -m pooled_models.train.demo data"
        )


def test_tags_are_bio_and_every_entity_is_a_slot_value():
    values = {ENTITY_TYPES[slot]: set(options) for slot, options in SLOTS.items()}
    found = set()
    for rows in demo_multitask_rows().values():
        for row in rows:
            assert len(row["words"]) == len(row["tags"]) and join_words(row["words"]) == row["text"]
            entity = None
            for word, tag in zip(row["words"], row["tags"], strict=True):
                assert re.fullmatch(r"O|[BI]-(ORDER|PRODUCT|DATE|AMOUNT)", tag)
                if tag.startswith("I-"):
                    assert entity is not None and entity[0] == tag[2:]
                    entity[1].append(word)
                    continue
                if entity:
                    assert " ".join(entity[1]) in values[entity[0]]
                entity = [tag[2:], [word]] if tag.startswith("B-") else None
                found.add(tag)
            if entity:
                assert " ".join(entity[1]) in values[entity[0]]
    assert {f"B-{kind}" for kind in ENTITY_TYPES.values()} <= found


def test_multitask_demo_splits_are_balanced_over_teams_and_disjoint():
    splits = demo_multitask_rows()
    texts = [row["text"] for rows in splits.values() for row in rows]
    assert len(texts) == len(set(texts))
    for rows in splits.values():
        counts = {team: sum(row["team"] == team for row in rows) for team in {row["team"] for row in rows}}
        assert len(counts) == 4 and len(set(counts.values())) == 1
