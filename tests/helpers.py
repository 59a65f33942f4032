"""Shared test helpers: tiny random backbones and batches, small data files and in-process train.py runs, and
subprocesses without the package. Test modules import from here, never from each other."""

from __future__ import annotations

import csv
import json
import os
import random
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import transformers

from pooled_models.modeling.layer_pooling import LayerPooler
from pooled_models.modeling.pooling import POOLERS, TokenPooler

REPO = Path(__file__).resolve().parent.parent  # the repository root

# ----------------------------------------------------------------------------------------------------
# Tiny backbones and batches
# ----------------------------------------------------------------------------------------------------

VOCAB_SIZE = 120
PAD_ID = 0

_COMMON = {"vocab_size": VOCAB_SIZE, "pad_token_id": PAD_ID}


def _encoder(config_class, **extra):
    settings = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 37,
        "max_position_embeddings": 64,
        **_COMMON,
        **extra,
    }
    return lambda: config_class(**settings)


# name -> (config factory, the token pooling that reads the whole text for that family)
TINY_BACKBONES = {
    "bert": (_encoder(transformers.BertConfig), "cls"),
    "roberta": (_encoder(transformers.RobertaConfig, max_position_embeddings=66), "cls"),
    "distilbert": (
        lambda: transformers.DistilBertConfig(
            dim=32, n_layers=2, n_heads=4, hidden_dim=37, max_position_embeddings=64, **_COMMON
        ),
        "cls",
    ),
    "esm": (
        _encoder(
            transformers.EsmConfig, mask_token_id=4, position_embedding_type="rotary", token_dropout=False
        ),
        "cls",
    ),
    "esm_absolute": (
        _encoder(transformers.EsmConfig, mask_token_id=4, max_position_embeddings=66, token_dropout=False),
        "cls",
    ),
    "deberta-v2": (
        _encoder(
            transformers.DebertaV2Config,
            relative_attention=True,
            position_biased_input=False,
            pos_att_type=["p2c", "c2p"],
        ),
        "cls",
    ),
    "modernbert": (
        _encoder(
            transformers.ModernBertConfig, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2
        ),
        "cls",
    ),
    "gpt2": (
        lambda: transformers.GPT2Config(
            n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2, **_COMMON
        ),
        "last_token",
    ),
    "llama": (
        lambda: transformers.LlamaConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=37,
            max_position_embeddings=64,
            bos_token_id=1,
            eos_token_id=2,
            **_COMMON,
        ),
        "last_token",
    ),
}


def tiny_backbone_config(name: str = "bert", **changes):
    """A tiny random config of the ``name`` family, with ``changes`` (hidden_size, max_position_embeddings...)."""
    config = TINY_BACKBONES[name][0]()
    for key, value in changes.items():
        setattr(config, key, value)
    return config


def tiny_model(pooling: str = "mean", backbone: str = "bert", model_class=None, seed: int = 0, **settings):
    """A PooledForSequenceClassification (or `model_class`) on a tiny random backbone, in eval mode."""
    import torch

    from pooled_models import PooledConfig, PooledForSequenceClassification

    settings.setdefault("num_labels", 3)
    torch.manual_seed(seed)
    config = PooledConfig(backbone_config=tiny_backbone_config(backbone), pooling=pooling, **settings)
    return (model_class or PooledForSequenceClassification)(config).eval()


def random_batch(lengths, side: str = "right", seed: int = 0, vocab_low: int = 5):
    """input_ids/attention_mask for texts of the given lengths, padded (with PAD_ID) on `side`."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD_ID)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        text = torch.randint(vocab_low, VOCAB_SIZE, (length,), generator=generator)
        span = slice(0, length) if side == "right" else slice(width - length, width)
        ids[row, span], mask[row, span] = text, 1
    return {"input_ids": ids, "attention_mask": mask}


def repad(batch, row: int, width: int, side: str):
    """One row of a batch on its own, re-padded to `width` on `side`."""
    import torch

    real = batch["input_ids"][row][batch["attention_mask"][row] == 1]
    ids = torch.full((1, width), PAD_ID)
    mask = torch.zeros(1, width, dtype=torch.long)
    span = slice(0, len(real)) if side == "right" else slice(width - len(real), width)
    ids[0, span], mask[0, span] = real, 1
    return {"input_ids": ids, "attention_mask": mask}


def assert_padding_and_batching_invariant(model, lengths=(5, 9, 2), seed: int = 7, width: int = 12):
    """The first text's logits are the same alone, in a batch of texts of ``lengths``, and padded to ``width`` on
    either side."""
    import torch

    batch = random_batch(list(lengths), seed=seed)
    with torch.no_grad():
        alone = model(**repad(batch, 0, lengths[0], "right")).logits[0]
        torch.testing.assert_close(model(**batch).logits[0], alone, atol=1e-5, rtol=1e-5, msg="batching")
        for side in ("right", "left"):
            padded = model(**repad(batch, 0, width, side)).logits[0]
            torch.testing.assert_close(padded, alone, atol=1e-5, rtol=1e-5, msg=f"{side} padding")


# A multi-task model with one head of every kind and problem type.
ENTITY_LABELS = {0: "O", 1: "B-ORDER", 2: "I-ORDER", 3: "B-PRODUCT", 4: "I-PRODUCT"}
MULTITASK_TASKS = {
    "team": {
        "kind": "sequence",
        "pooling": "attention",
        "id2label": {0: "billing", 1: "delivery", 2: "tech"},
    },
    "topics": {
        "kind": "sequence",
        "pooling": "mean",
        "problem_type": "multi_label_classification",
        "id2label": {0: "refund", 1: "late", 2: "app"},
    },
    "urgency": {"kind": "sequence", "pooling": "cls", "problem_type": "regression", "num_labels": 1},
    "entities": {"kind": "token", "id2label": ENTITY_LABELS},
}


def tiny_multitask_model(backbone: str = "bert", seed: int = 0, tasks=None, **settings):
    """A PooledForMultiTask on a tiny random backbone (by default one task of every kind), in eval mode."""
    import copy

    import torch

    from pooled_models import PooledForMultiTask, PooledMultiTaskConfig

    torch.manual_seed(seed)
    config = PooledMultiTaskConfig(
        backbone_config=tiny_backbone_config(backbone),
        tasks=copy.deepcopy(MULTITASK_TASKS if tasks is None else tasks),
        **settings,
    )
    return PooledForMultiTask(config).eval()


HIDDEN_STATE_POOLERS = sorted(
    name for name, cls in POOLERS.items() if issubclass(cls, (TokenPooler, LayerPooler))
)


# ----------------------------------------------------------------------------------------------------
# Data files and train.py runs
# ----------------------------------------------------------------------------------------------------

WORDS = {
    "sport": ["football", "goal", "match", "team", "score", "league"],
    "food": ["pasta", "bread", "soup", "recipe", "cheese", "salad"],
    "music": ["guitar", "song", "concert", "album", "drums", "singer"],
}
FILLER = ["the", "a", "today", "really", "was", "and", "very", "about", "we", "it"]


def sentence(rng: random.Random, topic: str, length: int = 6) -> str:
    words = [rng.choice(FILLER) for _ in range(length)]
    for _ in range(2):
        words.insert(rng.randrange(len(words) + 1), rng.choice(WORDS[topic]))
    return " ".join(words)


def topic_rows(count: int, seed: int = 0, topics=tuple(WORDS)) -> list[dict]:
    """Single-label rows: a topic's keywords among filler words."""
    rng = random.Random(seed)
    return [
        {"text": sentence(rng, topic), "label": topic}
        for topic in (topics[i % len(topics)] for i in range(count))
    ]


def multi_label_rows(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        topics = sorted(rng.sample(list(WORDS), 1 + index % 2))
        rows.append({"text": " ".join(sentence(rng, topic, 3) for topic in topics), "label": topics})
    return rows


CITIES = [["Paris"], ["Rome"], ["New", "York"], ["Oslo"], ["Buenos", "Aires"]]


def entity_rows(count: int, seed: int = 0) -> list[dict]:
    """Rows for token classification and a sequence task on the same texts: a topic's keywords among filler words and
    one or two city names; ``words`` with BIO ``tags`` (``B-LOC``, ``I-LOC``, ``O``), ``text`` and its topic ``label``."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        topic = list(WORDS)[index % len(WORDS)]
        words = sentence(rng, topic, 4).split()
        tags = ["O"] * len(words)
        for _ in range(1 + index % 2):
            city = rng.choice(CITIES)
            at = rng.randrange(len(words) + 1)
            words[at:at] = city
            tags[at:at] = ["B-LOC"] + ["I-LOC"] * (len(city) - 1)
        rows.append({"text": " ".join(words), "label": topic, "words": words, "tags": tags})
    return rows


def pair_regression_rows(count: int, seed: int = 0) -> list[dict]:
    """Sentence pairs scored by topic overlap (1.0 same topic, 0.0 different) plus noise."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        first, second = rng.choice(list(WORDS)), rng.choice(list(WORDS))
        score = (1.0 if first == second else 0.0) + rng.uniform(-0.1, 0.1)
        rows.append(
            {"sentence1": sentence(rng, first), "sentence2": sentence(rng, second), "score": round(score, 3)}
        )
    return rows


def write_rows(path: Path, rows: list[dict]) -> Path:
    """Rows as .csv, .json (one array), .jsonl or .parquet, by the file's suffix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        raise ValueError(path.suffix)
    return path


# Fast settings for tiny backbones: a few epochs, big steps, no progress bars.
FAST = [
    "--num_train_epochs",
    "3",
    "--learning_rate",
    "1e-3",
    "--per_device_train_batch_size",
    "16",
    "--disable_tqdm",
    "true",
    "--report_to",
    "none",
    "--seed",
    "0",
]


# The training settings of FAST: train.py refuses them in a run that does not train (they would take no effect).
FAST_TRAINING = ("--num_train_epochs", "--learning_rate", "--per_device_train_batch_size")


def fast_flags(trains: bool) -> list[str]:
    """FAST, without its training settings for a run that does not train."""
    if trains:
        return list(FAST)
    pairs = zip(FAST[::2], FAST[1::2], strict=True)
    return [item for flag, value in pairs if flag not in FAST_TRAINING for item in (flag, value)]


def train(backbone: str, output_dir: Path, *flags: str, callbacks=()):
    from pooled_models.train.cli import run

    return run(
        [
            "--model_name_or_path",
            backbone,
            "--output_dir",
            str(output_dir),
            *fast_flags("--do_train" in flags),
            *flags,
        ],
        callbacks=callbacks,
    )


def leftovers(output_dir: Path) -> list[Path]:
    """Whatever a run left at or next to output_dir."""
    return sorted(output_dir.parent.glob(output_dir.name + "*"))


def bad_run(backbone: str, tmp_path: Path, *flags: str) -> str:
    """Run train.py expecting a DataError; returns its message after checking nothing was written."""

    from pooled_models.errors import DataError

    output_dir = tmp_path / "out"
    with pytest.raises(DataError) as error:
        train(backbone, output_dir, *flags)
    assert leftovers(output_dir) == []
    return str(error.value)


def data_flags(tmp_path, rows=topic_rows):
    files = {}
    for split, (count, seed) in {"train": (48, 0), "validation": (24, 1), "test": (24, 2)}.items():
        files[split] = write_rows(tmp_path / f"{split}.jsonl", rows(count, seed))
    return [
        "--train_file",
        str(files["train"]),
        "--validation_file",
        str(files["validation"]),
        "--test_file",
        str(files["test"]),
        "--do_eval",
        "--do_predict",
    ]


def rendered_card(config, folder: Path) -> str:
    """The model card of a one-task sequence classifier with ``config``, trained on a small local file, as train.py
    renders it (no metrics)."""
    from pooled_models.modeling.heads import LinearHead
    from pooled_models.train.arguments import DataArguments
    from pooled_models.train.card import CardData, TaskCard, render_model_card

    data = DataArguments(train_file="train.csv")
    split = {"name": "train", "rows": 10, "truncated": 0, "source": "train.csv"}
    task = TaskCard("sequence", "sequence", config, LinearHead, data, [split], max_seq_length=64)
    facts = CardData(
        model_name="card",
        repo_id="someone/card",
        base_model="tiny",
        base_model_on_hub=False,
        publishes="sequence",
        tasks=[task],
        training_settings={"seed": 3},
        example_text="a text",
    )
    render_model_card(facts).save(folder / "README.md")
    return (folder / "README.md").read_text()


def png_size(path):
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR"
    return struct.unpack(">II", header[16:24])


def run_without_package(script: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run `script` in a fresh interpreter in which `import pooled_models` fails."""
    prelude = "import sys\nsys.modules['pooled_models'] = None  # any import of pooled_models now raises\n"
    env = {**os.environ, "HF_MODULES_CACHE": str(cwd / "modules_cache"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


# ----------------------------------------------------------------------------------------------------
# A fake Hub: what push_to_hub uploads lands in a folder
# ----------------------------------------------------------------------------------------------------


class FakeHubApi:
    """Stands in for transformers' HfApi: records what push_to_hub would upload."""

    def __init__(self, destination: Path):
        self.destination = destination
        self.repo_ids = []

    def create_repo(self, repo_id, **kwargs):
        self.repo_ids.append(repo_id)
        return type("RepoUrl", (), {"repo_id": repo_id})()

    def create_commit(self, repo_id, operations, **kwargs):
        import shutil

        for operation in operations:
            target = self.destination / operation.path_in_repo
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(operation.path_or_fileobj, target)
        return f"https://huggingface.co/{repo_id}"


def use_fake_hub(monkeypatch, destination: Path) -> FakeHubApi:
    """Route transformers' uploads (push_to_hub) to ``destination`` for the rest of the test."""
    import huggingface_hub
    import transformers.utils.hub as transformers_hub
    from huggingface_hub.errors import EntryNotFoundError

    api = FakeHubApi(destination)

    def no_card_yet(*args, **kwargs):
        raise EntryNotFoundError("a new repository has no model card")

    monkeypatch.setattr(transformers_hub, "hf_api", lambda: api)
    monkeypatch.setattr(huggingface_hub.ModelCard, "load", classmethod(no_card_yet))
    return api


def named_backbone_folder(tmp_path: Path) -> Path:
    """A folder that bench/backbones.py takes for ``--backbone PATH`` (it holds a config.json): the bench tests check
    that the path reaches what a script loads, and stop the script there."""
    folder = tmp_path / "my-backbone"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder
