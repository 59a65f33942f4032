"""Small data files and in-process train.py runs for the CLI tests."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

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


def train(backbone: str, output_dir: Path, *flags: str, callbacks=()):
    from pooled_models.run import run

    return run(
        ["--model_name_or_path", backbone, "--output_dir", str(output_dir), *FAST, *flags],
        callbacks=callbacks,
    )


def leftovers(output_dir: Path) -> list[Path]:
    """Whatever a run left at or next to output_dir."""
    return sorted(output_dir.parent.glob(output_dir.name + "*"))


def bad_run(backbone: str, tmp_path: Path, *flags: str) -> str:
    """Run train.py expecting a DataError; returns its message after checking nothing was written."""
    import pytest

    from pooled_models.labels import DataError

    output_dir = tmp_path / "out"
    with pytest.raises(DataError) as error:
        train(backbone, output_dir, *flags)
    assert leftovers(output_dir) == []
    return str(error.value)
