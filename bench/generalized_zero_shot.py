"""A new label among the old ones (issue 48): label text, trained on some labels, asked with the trained labels and
new ones together (the generalized setting), on two real tasks; the levers that keep new labels competitive.

Tasks (small, for a 2-core CPU): Debian packages by archive section (``corpora.sections``: 8 sections trained, 7
unseen) and fortunes by topic file (``corpora.fortunes``: the topics named by a word, cut in two halves by seed 0;
40 training and 20 validation quotations per seen topic, 20 test quotations per unseen one).

Per task, one ``train.py`` run as a user calls it (``--pooling label_text --label_text_scorer shared`` with
``--zero_shot_file``, ``--max_seq_length 128``, the rest train.py's defaults, ``--seen_label_margin auto``); then,
from the saved model and the untrained one, every validation row (a trained label) and every zero-shot row (an unseen
label) asked against all labels together, for the levers:

* untrained: the backbone with an untrained shared scorer (the cosine baseline);
* trained, no margin: the trained model as 0.4.1 saved it;
* calibrated stacking, tuned: the margin train.py tuned on the validation rows and saved (``--seen_label_margin auto``);
* keeping the untrained similarity: the mean of the untrained and the trained logits (it needs a second copy of the
  backbone at serving time);
* training on random subsets of the labels: a second train.py run (the same flags) in which every training batch is
  scored against a random half of the labels, those of its rows always among them (``--label-subsets-run``: the
  model's forward wrapped in this process, a measurement, not a train.py option), with and without its tuned margin;
* calibrated stacking at fixed margins, for reference (a margin read off the unseen rows would be tuned on the test).

Scores: accuracy on the seen rows, on the unseen rows, and their harmonic mean.

    python bench/generalized_zero_shot.py --output bench/results/zero_shot/generalized.md   # from the repo root
    python bench/generalized_zero_shot.py --backbone mpnet --skip-label-subsets --tasks fortunes \
        --output bench/results/mpnet/zero_shot/generalized.md   # all-mpnet-base-v2 (bench/backbones.py)

``--skip-label-subsets`` leaves out the label-subsets lever (a second train.py run per task), which the MiniLM report
settled (no better than the tuned margin): on a base-size backbone on 2 cores it is the run that does not fit;
``--tasks`` runs some of the tasks only.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import random
import subprocess
import sys
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from backbones import MINILM, add_backbone_argument, backbone_name, resolve_backbone, train_py_model  # noqa: E402
from corpora.fortunes import build_fortunes  # noqa: E402
from corpora.sections import write_sections  # noqa: E402

import pooled_models  # noqa: E402

# Fortune topics whose file name is not a word a reader would ask for.
PROGRAM = "bench/generalized_zero_shot.py"
NOT_WORDS = {"cookie", "zippy", "knghtbrd", "fortunes", "miscellaneous"}
FIXED_MARGINS = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0)


def write_fortunes_task(folder: Path, seed: int = 0) -> None:
    splits = build_fortunes()
    names = sorted({row["label"] for row in splits["train"]} - NOT_WORDS)
    order = list(names)
    random.Random(seed).shuffle(order)
    seen, unseen = sorted(order[: len(order) // 2]), sorted(order[len(order) // 2 :])
    rng = random.Random(seed)

    def take(rows, labels, count):
        chosen = [row for label in labels for row in [r for r in rows if r["label"] == label][:count]]
        rng.shuffle(chosen)
        return chosen

    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in {
        "train": take(splits["train"], seen, 40),
        "validation": take(splits["validation"], seen, 20),
        "zero_shot": take(splits["test"], unseen, 20),
    }.items():
        with (folder / f"{name}.csv").open("w", newline="", encoding="utf-8") as out:
            writer = csv.DictWriter(out, fieldnames=["text", "label"])
            writer.writeheader()
            writer.writerows(rows)


def train_flags(data: Path, output: Path, backbone: str = MINILM) -> list[str]:
    return [
        "--model_name_or_path", train_py_model(PROGRAM, backbone),
        "--pooling", "label_text", "--label_text_scorer", "shared",
        "--train_file", str(data / "train.csv"), "--validation_file", str(data / "validation.csv"),
        "--zero_shot_file", str(data / "zero_shot.csv"), "--do_train", "--do_eval", "--max_seq_length", "128",
        "--output_dir", str(output), "--overwrite_output_dir", "true", "--disable_tqdm", "true",
    ]  # fmt: skip


def train(
    data: Path, output: Path, log: Path, subsets: bool = False, reuse: bool = False, backbone: str = MINILM
) -> dict:
    if reuse and (output / "all_results.json").exists():
        return json.loads((output / "all_results.json").read_text())
    command = [sys.executable, "train.py", *train_flags(data, output, backbone)]
    if subsets:
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--label-subsets-run",
            str(data),
            str(output),
            backbone,
        ]
    with log.open("w") as out:
        subprocess.run(command, cwd=ROOT, check=True, stdout=out, stderr=subprocess.STDOUT)
    return json.loads((output / "all_results.json").read_text())


def label_subset(targets: list[int], num_labels: int, generator) -> tuple[list[int], list[int]]:
    """A batch's labels: those of its rows and random others, half of ``num_labels`` in all (or its rows' labels
    where they are more), sorted; and each row's target renumbered into them."""
    import torch

    present = sorted(set(targets))
    others = [i for i in torch.randperm(num_labels, generator=generator).tolist() if i not in present]
    chosen = sorted(set(present) | set(others[: max(0, num_labels // 2 - len(present))]))
    return chosen, [chosen.index(target) for target in targets]


def run_with_label_subsets(data: Path, output: Path, backbone: str = MINILM, seed: int = 0) -> None:
    """train.py's run in this process, every training batch scored against a random half of the model's labels (its
    rows' labels always among them; the targets renumbered), as label_input_ids."""
    import torch

    from pooled_models import PooledForSequenceClassification
    from pooled_models.modeling.label_text import pad_label_ids
    from pooled_models.train.cli import run

    original = PooledForSequenceClassification.forward
    generator = torch.Generator().manual_seed(seed)

    @functools.wraps(original)  # the Trainer keeps the dataset columns the forward's signature names
    def forward(self, *args, labels=None, **kwargs):
        if not self.training or labels is None or kwargs.get("label_input_ids") is not None:
            return original(self, *args, labels=labels, **kwargs)
        chosen, renumbered = label_subset(labels.cpu().tolist(), self.config.num_labels, generator)
        ids, mask = pad_label_ids([self.config.label_text_ids[i] for i in chosen], device=labels.device)
        targets = torch.tensor(renumbered, device=labels.device)
        return original(self, *args, labels=targets, label_input_ids=ids, label_attention_mask=mask, **kwargs)

    PooledForSequenceClassification.forward = forward
    run(train_flags(data, output, str(backbone)))


def scores(logits: np.ndarray, targets: np.ndarray, is_seen: np.ndarray, num_seen: int, margin: float = 0.0):
    shifted = logits.copy()
    shifted[:, :num_seen] -= margin
    correct = shifted.argmax(-1) == targets
    seen, unseen = float(correct[is_seen].mean()), float(correct[~is_seen].mean())
    return seen, unseen, 0.0 if seen + unseen == 0 else 2 * seen * unseen / (seen + unseen)


def levers(
    data: Path, folder: Path, prefix: str = "", backbone: str = MINILM
) -> tuple[list[tuple[str, tuple[float, float, float]]], float]:
    import torch
    from transformers import AutoTokenizer

    from pooled_models import PooledForSequenceClassification
    from pooled_models.train.zero_shot_eval import zero_shot_logits

    torch.manual_seed(0)

    def read(name):
        with (data / f"{name}.csv").open(encoding="utf-8") as handle:
            return list(csv.DictReader(handle))

    validation, zero_shot = read("validation"), read("zero_shot")
    seen = sorted({row["label"] for row in validation})
    candidates = seen + sorted({row["label"] for row in zero_shot} - set(seen))
    rows = validation + zero_shot
    texts = [row["text"] for row in rows]
    targets = np.asarray([candidates.index(row["label"]) for row in rows])
    is_seen = np.asarray([True] * len(validation) + [False] * len(zero_shot))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    trained = PooledForSequenceClassification.from_pretrained(folder)
    margin = float(trained.config.label_text_seen_margin or 0.0)
    trained.config.label_text_seen_margin = 0.0  # the margin is applied below, to the same logits
    untrained = PooledForSequenceClassification.from_backbone(
        resolve_backbone(PROGRAM, backbone),
        pooling="label_text",
        label_text_scorer="shared",
        id2label=dict(enumerate(seen)),
        label_text_seen_margin=0.0,  # untrained: no label is seen yet (the cosine baseline)
    )
    raw = zero_shot_logits(trained, tokenizer, texts, candidates, 128)
    before = zero_shot_logits(untrained, tokenizer, texts, candidates, 128)
    args = (targets, is_seen, len(seen))
    if prefix:
        return [
            (f"{prefix}, no margin", scores(raw, *args)),
            (
                f"{prefix}, calibrated stacking tuned on validation (margin {margin:g})",
                scores(raw, *args, margin),
            ),
        ], margin
    table = [
        ("untrained (cosine baseline)", scores(before, *args)),
        ("trained, no margin (0.4.1)", scores(raw, *args)),
        (f"calibrated stacking, tuned on validation (margin {margin:g})", scores(raw, *args, margin)),
        ("untrained similarity kept (mean of both logits)", scores((raw + before) / 2, *args)),
    ]
    table += [(f"calibrated stacking, fixed margin {m:g}", scores(raw, *args, m)) for m in FIXED_MARGINS]
    return table, margin


TASKS = {"sections": lambda folder: write_sections(folder), "fortunes": write_fortunes_task}


def described(backbone: str) -> str:
    return (
        "Packaged all-MiniLM-L6-v2"
        if backbone == MINILM
        else f"{backbone_name(backbone)} (bench/backbones.py)"
    )


def command() -> str:
    """The command as run; MiniLM's stored report was made by the one with only --output."""
    return " ".join(["python bench/generalized_zero_shot.py", *sys.argv[1:]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=ROOT / "bench/results/zero_shot/generalized.md")
    parser.add_argument("--work", type=Path, default=Path("/tmp/generalized_zero_shot"))
    parser.add_argument("--reuse", action="store_true", help="take the runs already finished in --work")
    parser.add_argument(
        "--label-subsets-run", nargs=3, metavar=("DATA", "OUTPUT", "BACKBONE"), help="internal"
    )
    parser.add_argument(
        "--skip-label-subsets", action="store_true", help="leave out the label-subsets lever (its run)"
    )
    parser.add_argument(
        "--tasks", default=",".join(TASKS), help=f"comma-separated, some of: {', '.join(TASKS)} (default all)"
    )
    add_backbone_argument(parser)
    args = parser.parse_args()
    tasks = [name.strip() for name in args.tasks.split(",") if name.strip()]
    if not tasks or set(tasks) - set(TASKS):
        parser.error(f"--tasks {args.tasks!r}: valid choices are {', '.join(TASKS)}")
    if args.label_subsets_run:
        data, output, backbone = args.label_subsets_run
        run_with_label_subsets(Path(data), Path(output), backbone)
        return
    lines = [
        "# A new label among the old ones: label text in the generalized setting",
        "",
        "```bash",
        command(),
        "```",
        "",
        f"{described(args.backbone)}, label text with the shared scorer, one seed; every row asked against the trained "
        "and the unseen labels together. Seen rows: the validation file's; unseen rows: the zero-shot file's. "
        f"Run on {date.today()} with pooled_models {pooled_models.__version__} (accuracy only: no timing).",
    ]
    for name in tasks:
        build = TASKS[name]
        data, output = args.work / name, args.work / f"{name}_out"
        build(data)
        results = train(data, output, args.work / f"{name}.log", reuse=args.reuse, backbone=args.backbone)
        table, margin = levers(data, output, backbone=args.backbone)
        if not args.skip_label_subsets:
            subsets = args.work / f"{name}_subsets"
            log = args.work / f"{name}_subsets.log"
            train(data, subsets, log, subsets=True, reuse=args.reuse, backbone=args.backbone)
            table += levers(data, subsets, "label subsets per batch", args.backbone)[0]
        lines += [
            "",
            f"## {name}",
            "",
            "| lever | seen rows | unseen rows | harmonic mean |",
            "|---|---:|---:|---:|",
        ]
        lines += [f"| {lever} | {s:.3f} | {u:.3f} | {h:.3f} |" for lever, (s, u, h) in table]
        picked = {key: round(value, 4) for key, value in results.items() if key.startswith("zero_shot")}
        lines += ["", f"train.py's all_results.json (zero-shot keys): `{json.dumps(picked)}`"]
        print("\n".join(lines[-len(table) - 5 :]), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
