"""Classifiers that read their labels: train.py's defaults, label text in the input, SetFit and a cosine baseline, on
fortunes and debtags, with full data, few examples per label, and labels never seen in training.

    python bench/labels.py                                   # every setting, arm, dataset and seed: many hours
    python bench/labels.py --settings shot8 --arms defaults,setfit --datasets debtags
    python bench/labels.py --report                          # rewrite the report from the stored runs only
    python bench/labels.py --settings shot8 --seeds 1 --shrink 0.1 --results-dir /tmp/labels   # a smoke test
    python bench/labels.py --backbone mpnet --results-dir bench/results/mpnet/labels ...   # the base-size backbone

Every run is stored as soon as it ends, one JSON file per (dataset, setting, arm, seed) under
``<results-dir>/runs/``, and a run whose file exists is skipped: an interrupted benchmark continues where it stopped
(``--rerun`` runs stored ones again). ``report.md`` and ``report.json`` in ``<results-dir>`` are rewritten from all the
stored runs after every run.

The data (the splits of bench/accuracy.py: fortunes, 28 topics of 60 quotations, 36 per topic to train; debtags, 2500
packages, 1500 to train, 29 tags):

* ``full``: the training split, with the validation split (train.py tunes multi-label thresholds on it).
* ``shot8``, ``shot32``: k examples per label drawn from the training split with the run's seed (multi-label: rows are
  taken in a shuffled order while one of their labels has fewer than k), and nothing else: no validation split, as a
  user with k examples per label has none.
* ``zeroshot``: the labels are cut in two halves with the run's seed. Models train on the training and validation rows
  with the labels of the first half only (fortunes: the rows of those topics; debtags: each row's tags of that half,
  rows left without one kept as negatives), and are scored on the test rows against the other half, whose labels they
  never saw: fortunes on the test rows of those topics (single-label, candidates = the unseen topics), debtags on every
  test row (multi-label, candidates = the unseen tags, targets = each row's unseen tags).

The arms (``--arms``; ``ARMS`` below says which run in which setting):

* train.py arms: ``python train.py`` in a subprocess, as a user runs it, with the data, ``--max_seq_length`` (128
  fortunes, 64 debtags, as bench/accuracy.py) and the arm's flags; scored from the ``predictions.jsonl`` it writes for
  the test split. ``defaults`` passes no other flag: it is whatever train.py's defaults are at the commit that ran it
  (each run records its commit and train.py's settings). ``mean_v03`` pins the defaults of pooled_models 0.3 (mean
  pooling; multi-label: the asymmetric loss, a threshold tuned on validation data, else 0.5) with flags, so that it
  keeps meaning the same run when the defaults change.
* ``setfit``: SetFit 1.2 with its own defaults (``TrainingArguments()``: oversampled pairs, one epoch, a logistic
  regression head; ``multi_target_strategy="one-vs-rest"`` for multi-label, as its docs say) on the same rows and
  backbone, texts truncated as train.py's (``max_length``).
* ``frozen_lr``: logistic regression (sklearn's defaults; one-vs-rest at 0.5 for multi-label) on the backbone's frozen
  sentence-transformers embeddings of the same rows, texts truncated as train.py's.
* ``cosine``: sentence-transformers' cosine similarity between a text and each label name, on the same backbone
  (zero-shot only). Multi-label decisions need a threshold: it is the one that gives the best micro-F1 on the
  validation rows of the seen half, as train.py tunes its own on them.
* zero-shot train.py arms: trained on the seen half, then ``pipeline("zero-shot-classification", model=folder)`` with
  ``candidate_labels`` = the unseen names (``multi_label=True`` for debtags; decisions at the model's threshold).

Scores: fortunes accuracy and macro-F1, debtags micro- and macro-F1 (zero-shot debtags also the mean over the unseen
tags of their average precision, which needs no threshold), on the test split, from the predictions. "train s" is the
optimisation alone (Trainer's ``train_runtime``; SetFit's ``trainer.train()``), "run s" the whole run (loading, data,
training, scoring). Times depend on the machine and on what else runs on it: the report says so.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from backbones import add_backbone_argument  # noqa: E402  (bench/ is on sys.path: this script's folder)
from labels_report import run_path, store, write_report  # noqa: E402
from labels_runs import run_one  # noqa: E402
from labels_tasks import ARMS, DATASETS, RESULTS_DIR, SETTINGS, load_dataset, make_task  # noqa: E402

# ----------------------------------------------------------------------------------------------------
# The command line
# ----------------------------------------------------------------------------------------------------


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated: fortunes, debtags")
    parser.add_argument(
        "--settings", default=",".join(SETTINGS), help=f"comma-separated: {', '.join(SETTINGS)}"
    )
    parser.add_argument("--arms", default="all", help=f"comma-separated, or all: {', '.join(ARMS)}")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the corpora's subsample and split")
    add_backbone_argument(parser)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--rerun", action="store_true", help="run again the runs already stored")
    parser.add_argument(
        "--extra",
        default="",
        help="train.py flags added to every train.py arm, e.g. '--num_train_epochs 8' (an exploration: needs --tag)",
    )
    parser.add_argument("--tag", default="", help="stored as <arm>+<tag>: the runs of --extra")
    parser.add_argument("--report", action="store_true", help="only rewrite the report from the stored runs")
    parser.add_argument(
        "--shrink",
        type=float,
        default=1.0,
        help="keep this fraction of every split (a smoke test, not figures to quote)",
    )
    args = parser.parse_args(argv)
    args.datasets = _choices(parser, "--datasets", args.datasets, DATASETS)
    args.settings = _choices(parser, "--settings", args.settings, SETTINGS)
    args.arms = list(ARMS) if args.arms == "all" else _choices(parser, "--arms", args.arms, tuple(ARMS))
    if bool(args.extra) != bool(args.tag):
        parser.error("--extra and --tag go together: the runs with extra flags are stored as <arm>+<tag>")
    args.extra = tuple(shlex.split(args.extra))
    if not 0 < args.shrink <= 1:
        parser.error(f"--shrink must be in (0, 1], got {args.shrink}")
    return args


def _choices(parser, option: str, given: str, valid: tuple[str, ...]) -> list[str]:
    names = [name.strip() for name in given.split(",") if name.strip()]
    unknown = [name for name in names if name not in valid]
    if unknown or not names:
        parser.error(
            f"{option}: unknown {', '.join(unknown) or '(none given)'}; valid choices: {', '.join(valid)}"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    command = "python bench/labels.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    if args.report:
        print(write_report(args.results_dir, command))
        return 0
    datasets = {name: load_dataset(name, args.data_seed) for name in args.datasets}
    plan = [
        (dataset, setting, arm, seed)
        for seed in args.seeds
        for dataset in args.datasets
        for setting in args.settings
        for arm in args.arms
        if setting in ARMS[arm].settings
        and ("descriptions" not in ARMS[arm].needs or datasets[dataset].descriptions)
    ]
    with tempfile.TemporaryDirectory() as scratch:
        for number, (dataset, setting, arm, seed) in enumerate(plan, 1):
            name = f"{arm}+{args.tag}" if args.tag else arm
            path = run_path(args.results_dir, dataset, setting, name, seed)
            if path.exists() and not args.rerun:
                continue
            print(f"[labels {number}/{len(plan)}] {dataset} {setting} {name} seed {seed} ...", flush=True)
            task = make_task(datasets[dataset], setting, seed, args.shrink, args.backbone)
            record = run_one(task, arm, Path(scratch), args.extra)
            record["arm"] = name
            record["shrink"] = args.shrink
            store(path, record)
            outcome = record.get("error") or ", ".join(f"{k} {v:.4f}" for k, v in record["scores"].items())
            print(
                f"[labels {number}/{len(plan)}] {dataset} {setting} {arm} seed {seed}: {outcome}", flush=True
            )
            write_report(args.results_dir, command)
    print(write_report(args.results_dir, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
