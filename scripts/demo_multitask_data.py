"""The multi-task demo's dataset: the quickstart's support messages, routed to a team and tagged with their entities.

Generated here, from phrase banks and a fixed seed, so ``make demo-multitask`` needs no download. Each message joins
one of the quickstart's greetings and closings with a request for one of its four teams that names some of: an order
number (``ORDER``), a product (``PRODUCT``), a date (``DATE``) and an amount (``AMOUNT``). Every row holds the text
and its team (for the sequence task) and the same message as words with one BIO tag each (for the token task):
``{"text": ..., "team": ..., "words": [...], "tags": [...]}``. The tags are exact by construction: each entity is
written into its slot of the template.

``python scripts/demo_multitask_data.py data/demo_multitask`` writes the jsonl files that
``configs/multitask_demo.yaml`` reads (they are also committed, and a test checks they match).
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

from demo_data import CLOSINGS, GREETINGS

__all__ = [
    "REQUESTS",
    "SLOTS",
    "SPLIT_SIZES",
    "demo_multitask_rows",
    "write_demo_multitask_dataset",
    "join_words",
]

# team -> requests; {order}, {product}, {date} and {amount} are the entity slots.
REQUESTS: dict[str, list[str]] = {
    "billing": [
        "I was charged twice for order {order} on {date} .",
        "my card was billed {amount} for the {product} but I cancelled it .",
        "can I get a refund of {amount} for order {order} ?",
        "the invoice for order {order} shows {amount} , not the price of the {product} .",
        "why did I pay {amount} on {date} ?",
        "I need a receipt for the {product} I bought on {date} .",
    ],
    "delivery": [
        "order {order} has not arrived yet .",
        "the tracking page for order {order} has not moved since {date} .",
        "the {product} from order {order} was delivered to the wrong address .",
        "my {product} arrived damaged on {date} .",
        "can you send the {product} to my office instead ?",
        "the courier says order {order} was delivered on {date} but it was not .",
    ],
    "technical": [
        "the {product} crashes every time I open it .",
        "since the update on {date} the {product} is very slow .",
        "the {product} will not connect to wifi .",
        "the {product} from order {order} keeps freezing on the loading screen .",
        "I cannot get the {product} to sync with my phone .",
        "the screen of the {product} flickers since {date} .",
    ],
    "account": [
        "I cannot log in to my account since {date} .",
        "please reset my password , my last order was {order} .",
        "how do I delete my account ?",
        "someone else signed in to my account on {date} .",
        "I want to change the email address of my account .",
        "the two-factor code never arrives , I tried on {date} .",
    ],
}

SLOTS: dict[str, list[str]] = {
    "order": ["4471", "58213", "10094", "77360", "3920", "61728", "20488", "93311", "A-1187", "B-5502"],
    "product": [
        "blue kettle",
        "X200 router",
        "smart speaker",
        "standing desk",
        "coffee grinder",
        "Pixel tablet",
        "wireless earbuds",
        "desk lamp",
        "photo app",
        "desktop client",
        "fitness watch",
        "air purifier",
    ],
    "date": [
        "Monday",
        "Tuesday",
        "last Friday",
        "12 March",
        "3 June",
        "yesterday",
        "28 October",
        "the weekend",
    ],
    "amount": ["$49.99", "€120", "£15", "$7.50", "€89.90", "$250"],
}
ENTITY_TYPES = {"order": "ORDER", "product": "PRODUCT", "date": "DATE", "amount": "AMOUNT"}
SPLIT_SIZES = {"train": 400, "validation": 100, "test": 100}
SEED = 20240602
SLOT = re.compile(r"^\{(\w+)\}$")


def join_words(words: list[str]) -> str:
    """The message as text: words joined by spaces, none before closing punctuation."""
    return re.sub(r" ([.,?!])", r"\1", " ".join(words))


def _message(rng: random.Random, team: str) -> tuple[list[str], list[str]]:
    words, tags = [], []
    greeting, closing = rng.choice(GREETINGS), rng.choice(CLOSINGS)
    for word in greeting.split():
        words.append(word)
        tags.append("O")
    for token in rng.choice(REQUESTS[team]).split():
        slot = SLOT.match(token)
        if slot:
            value = rng.choice(SLOTS[slot.group(1)]).split()
            kind = ENTITY_TYPES[slot.group(1)]
            words += value
            tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(value) - 1)
        else:
            words.append(token)
            tags.append("O")
    for word in closing.split():
        words.append(word)
        tags.append("O")
    words[0] = words[0][0].upper() + words[0][1:]
    return words, tags


def demo_multitask_rows(seed: int = SEED) -> dict[str, list[dict]]:
    """``{split: [{"text", "team", "words", "tags"}, ...]}``, balanced over the teams; no message is in two splits."""
    rng = random.Random(seed)
    seen: set[str] = set()
    splits: dict[str, list[dict]] = {}
    for split, size in SPLIT_SIZES.items():
        rows = []
        for index in range(size):
            team = list(REQUESTS)[index % len(REQUESTS)]
            words, tags = _message(rng, team)
            while join_words(words) in seen:
                words, tags = _message(rng, team)
            seen.add(join_words(words))
            rows.append({"text": join_words(words), "team": team, "words": words, "tags": tags})
        rng.shuffle(rows)
        splits[split] = rows
    return splits


def write_demo_multitask_dataset(folder: str | Path, seed: int = SEED) -> dict[str, Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, rows in demo_multitask_rows(seed).items():
        paths[split] = folder / f"{split}.jsonl"
        paths[split].write_text(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
        )
    return paths


if __name__ == "__main__":
    for split, path in write_demo_multitask_dataset(
        sys.argv[1] if len(sys.argv) > 1 else "data/demo_multitask"
    ).items():
        print(f"{split}: {path}")
