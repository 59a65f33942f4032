"""The quickstart's demo dataset: customer-support messages to route to one of four teams.

Generated here, from phrase banks and a fixed seed, so the quickstart needs no download. Every message joins
a greeting, one request that says which team it is for, and a closing, so the classifier has to find the
request among words all teams share. ``python scripts/demo_data.py data/demo`` writes the csv files
that ``configs/quickstart.yaml`` reads (they are also committed, and a test checks they match).
"""

from __future__ import annotations

import csv
import random
import sys
from pathlib import Path

__all__ = ["TEAMS", "SPLIT_SIZES", "demo_rows", "write_demo_dataset"]

GREETINGS = [
    "Hi,",
    "Hello,",
    "Hey there,",
    "Good morning,",
    "Dear support,",
    "Hi team,",
    "Hello again,",
    "",
    "Quick question:",
    "Sorry to bother you, but",
    "Urgent:",
    "Hi, hope you are well.",
]

CLOSINGS = [
    "Thanks!",
    "Thank you.",
    "Please help.",
    "Can you look into it?",
    "Any idea what to do?",
    "Cheers.",
    "",
    "I need this sorted today.",
    "Thanks in advance.",
    "Let me know.",
    "This is the second time I write.",
]

# team -> requests (objects are filled from the team's own list, so a request can name several things)
TEAMS: dict[str, dict[str, list[str]]] = {
    "billing": {
        "requests": [
            "I was charged twice for {thing}.",
            "my card was billed for {thing} but I cancelled it.",
            "can I get a refund for {thing}?",
            "the invoice for {thing} shows the wrong amount.",
            "why did the price of {thing} go up this month?",
            "I need a receipt for {thing} for my taxes.",
            "the payment for {thing} failed but the money left my account.",
            "please change the billing address on {thing}.",
        ],
        "things": [
            "my subscription",
            "the annual plan",
            "order 4471",
            "last month's invoice",
            "the premium upgrade",
            "my renewal",
            "the gift card",
            "the family plan",
        ],
    },
    "delivery": {
        "requests": [
            "{thing} has not arrived yet.",
            "the tracking page for {thing} has not moved in a week.",
            "{thing} was delivered to the wrong address.",
            "{thing} arrived damaged.",
            "can you send {thing} to my office instead?",
            "the courier says {thing} was delivered but it was not.",
            "how long does shipping take for {thing}?",
            "only half of {thing} was in the box.",
        ],
        "things": [
            "my parcel",
            "the package",
            "my order",
            "the replacement part",
            "the second box",
            "my shipment",
            "the return label",
            "the delivery",
        ],
    },
    "technical": {
        "requests": [
            "{thing} crashes every time I open it.",
            "{thing} shows error 502.",
            "{thing} will not connect to wifi.",
            "after the update {thing} is very slow.",
            "{thing} keeps freezing on the loading screen.",
            "I cannot get {thing} to sync with my phone.",
            "{thing} drains the battery in an hour.",
            "the screen of {thing} flickers.",
        ],
        "things": [
            "the app",
            "the desktop client",
            "the router",
            "my tablet",
            "the smart speaker",
            "the web page",
            "the firmware",
            "the browser extension",
        ],
    },
    "account": {
        "requests": [
            "I cannot log in to {thing}.",
            "please reset the password of {thing}.",
            "how do I delete {thing}?",
            "someone else signed in to {thing}.",
            "I want to change the email address of {thing}.",
            "the two-factor code for {thing} never arrives.",
            "{thing} was locked after too many attempts.",
            "can I merge {thing} with my old one?",
        ],
        "things": [
            "my account",
            "my profile",
            "the admin account",
            "my login",
            "my user name",
            "the shared account",
            "my work account",
            "my child's account",
        ],
    },
}

SPLIT_SIZES = {"train": 400, "validation": 100, "test": 100}
SEED = 20240601


def _message(rng: random.Random, team: str) -> str:
    bank = TEAMS[team]
    request = rng.choice(bank["requests"]).format(thing=rng.choice(bank["things"]))
    parts = [rng.choice(GREETINGS), request, rng.choice(CLOSINGS)]
    text = " ".join(part for part in parts if part)
    return text[0].upper() + text[1:]


def demo_rows(seed: int = SEED) -> dict[str, list[dict[str, str]]]:
    """``{split: [{"text", "label"}, ...]}``, balanced over the teams; no message is in two splits."""
    rng = random.Random(seed)
    seen: set[str] = set()
    splits: dict[str, list[dict[str, str]]] = {}
    for split, size in SPLIT_SIZES.items():
        rows = []
        for index in range(size):
            team = list(TEAMS)[index % len(TEAMS)]
            text = _message(rng, team)
            while text in seen:
                text = _message(rng, team)
            seen.add(text)
            rows.append({"text": text, "label": team})
        rng.shuffle(rows)
        splits[split] = rows
    return splits


def write_demo_dataset(folder: str | Path, seed: int = SEED) -> dict[str, Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, rows in demo_rows(seed).items():
        paths[split] = folder / f"{split}.csv"
        with open(paths[split], "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=["text", "label"], lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
    return paths


if __name__ == "__main__":
    for split, path in write_demo_dataset(sys.argv[1] if len(sys.argv) > 1 else "data/demo").items():
        print(f"{split}: {path}")
