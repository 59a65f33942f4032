"""Why train.py's multi-label defaults are what they are: the debtags benchmark (bench/accuracy.py --dataset debtags)
with mean pooling, trained with Transformers' defaults, with train.py's, and with one setting changed at a time.
(train.py's multi-label loss, asymmetric, was chosen from this table: its BCE rows came first.)

    python bench/multilabel_defaults.py            # about 15 minutes on 2 CPU cores
    python bench/multilabel_defaults.py transformers_defaults train_py_defaults

Each setting lists every flag it changes from train.py's defaults. Metrics are on the test split; the thresholds
(when tuned) come from the validation split. The table goes to bench/results/debtags_defaults.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from accuracy import REPO, data_arguments, data_files  # bench/ is on sys.path when this script runs

from pooled_models.sweep.runner import run_one

BCE = ["--multi_label_loss", "bce"]
SETTINGS = {
    # What a Transformers user starts from: Trainer's defaults, one learning rate, BCE, decisions at 0.5.
    "transformers_defaults": [
        "--head_learning_rate",
        "5e-5",
        "--num_train_epochs",
        "3",
        "--per_device_train_batch_size",
        "8",
        "--warmup_steps",
        "0",
        "--weight_decay",
        "0",
        "--tune_thresholds",
        "none",
        *BCE,
    ],
    # train.py's defaults with BCE, then one setting changed at a time
    "bce": BCE,
    "bce_no_threshold_tuning": [*BCE, "--tune_thresholds", "none"],
    "bce_no_head_learning_rate": [*BCE, "--head_learning_rate", "5e-5"],
    "bce_2_epochs": [*BCE, "--num_train_epochs", "2"],
    "bce_per_label_thresholds": [*BCE, "--tune_thresholds", "per_label"],
    "bce_pos_weight_auto": [*BCE, "--pos_weight", "auto"],
    "focal_loss": ["--multi_label_loss", "focal"],
    # train.py's defaults: asymmetric loss for multi-label runs
    "train_py_defaults": [],
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help=f"settings to run (default: all): {', '.join(SETTINGS)}")
    parser.add_argument("--max-rows", type=int, default=5000)
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results" / "debtags_defaults.md")
    args = parser.parse_args()
    names = args.names or list(SETTINGS)
    unknown = [name for name in names if name not in SETTINGS]
    if unknown:
        parser.error(f"unknown settings {unknown}; choose from {', '.join(SETTINGS)}")

    lines = [
        "| setting (mean pooling) | flags changed from train.py's defaults | test micro-F1 | test macro-F1 | "
        "validation micro-F1 at 0.5 | seconds |",
        "|---|---|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory() as scratch:
        files = data_files("debtags", Path(scratch) / "data", args)
        common = data_arguments("debtags", files)
        for name in names:
            print(f"[defaults] {name} ...", flush=True)
            record = run_one(
                "mean", "pooling", args.seed, [*common, *SETTINGS[name]], Path(scratch) / "runs", False
            )
            if record.status != "ok":
                print(f"[defaults] {name}: FAILED {record.error}", flush=True)
                lines.append(f"| {name} | `{' '.join(SETTINGS[name])}` | failed: {record.error} | | | |")
                continue
            metrics = record.metrics
            at_half = metrics.get("eval_f1_micro_at_0.5", metrics.get("eval_f1_micro"))
            print(
                f"[defaults] {name}: test micro-F1 {metrics['test_f1_micro']:.4f}, macro-F1 "
                f"{metrics['test_f1_macro']:.4f} ({record.seconds:.0f} s)",
                flush=True,
            )
            lines.append(
                f"| {name} | `{' '.join(SETTINGS[name]) or '(none)'}` | {metrics['test_f1_micro']:.4f} | "
                f"{metrics['test_f1_macro']:.4f} | {at_half:.4f} | {record.seconds:.0f} |"
            )
    table = "\n".join(lines) + "\n"
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        f"debtags, {args.max_rows} packages (data seed {args.data_seed}), seed {args.seed}; "
        f"`python bench/multilabel_defaults.py`\n\n{table}"
    )
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
