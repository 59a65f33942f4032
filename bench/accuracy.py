"""The project's accuracy benchmarks: the pooling sweep (sweep.py) on real text, with both baselines in the same run,
on the packaged all-MiniLM-L6-v2 backbone (``--backbone mpnet``: all-mpnet-base-v2, see bench/backbones.py). Each fits
30 minutes on 2 CPU cores with MiniLM.

    python bench/accuracy.py                       # fortunes (single-label), 8 poolings, one seed
    python bench/accuracy.py --dataset debtags     # debtags (multi-label), 8 poolings, one seed
    python bench/accuracy.py --poolings all --seeds 1 2 3
    python bench/accuracy.py -- --num_train_epochs 2 --head_learning_rate 5e-5   # other train.py settings
    python bench/accuracy.py --backbone mpnet --poolings mean --report-dir bench/results/mpnet/fortunes

* fortunes: which topic file of Debian's ``fortunes`` package a quotation comes from, one class per topic file with
  at least 150 quotations (bench/corpora/fortunes.py), subsampled to ``--per-class`` quotations per topic
  (default 60, split 60/20/20 train/validation/test, fixed by ``--data-seed``).
* debtags: which debtags describe a Debian package, from its short description (bench/corpora/debtags.py):
  the 28 tags of at least 300 packages, subsampled to ``--max-rows`` packages (default 5000, split 60/20/20).

Every run uses train.py's defaults (length-grouped batches among them), except ``--max_seq_length`` (128 for
fortunes, which 95% of the quotations fit; 64 for debtags, which every description fits), which only makes it
faster. The ``mean`` row is therefore also train.py's default run. The report
(markdown, JSON, PNG) goes to ``bench/results/<dataset>/``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from backbones import add_backbone_argument, train_py_model  # noqa: E402
from corpora.debtags import DebtagsMissing, write_debtags  # noqa: E402  (bench/ is on sys.path: this script's folder)
from corpora.fortunes import FortunesMissing, write_fortunes  # noqa: E402

from pooled_models.modeling.registry import POOLINGS  # noqa: E402
from pooled_models.sweep.runner import main as sweep_main  # noqa: E402

# One of each family, to fit the time budget (a run takes 2-4 minutes here): the others are variants of these
# (min, mean_sqrt_len, weighted_mean, gem, cls_mean_max, concat_layers) or meant for decoders (last_token).
# --poolings all runs them too.
DEFAULT_POOLINGS = ["cls", "mean", "max", "mean_max", "attention", "weighted_layer", "lstm", "label_tokens"]
MAX_SEQ_LENGTH = {"fortunes": 128, "debtags": 64}
LABEL_COLUMN = {"fortunes": "label", "debtags": "labels"}


def data_files(dataset: str, folder: Path, args: argparse.Namespace) -> dict[str, Path]:
    """Write the benchmark's splits into ``folder``; exits with the reason when the data cannot be had."""
    try:
        if dataset == "fortunes":
            return write_fortunes(folder, max_per_class=args.per_class, seed=args.data_seed)
        return write_debtags(folder, max_rows=args.max_rows, seed=args.data_seed)
    except (FortunesMissing, DebtagsMissing) as error:
        sys.exit(f"bench/accuracy.py: the {dataset} benchmark cannot run. {error}")


def data_arguments(dataset: str, files: dict[str, Path], backbone: str) -> list[str]:
    """train.py's data and speed arguments for the benchmark's splits."""
    return [
        "--model_name_or_path",
        backbone,
        "--train_file",
        str(files["train"]),
        "--validation_file",
        str(files["validation"]),
        "--test_file",
        str(files["test"]),
        "--label_column",
        LABEL_COLUMN[dataset],
        "--do_eval",
        "--do_predict",
        "--disable_tqdm",
        "true",
        "--max_seq_length",
        str(MAX_SEQ_LENGTH[dataset]),
    ]


def replace_old_report(report_dir: Path) -> None:
    """A benchmark run regenerates its report: the old one (committed, so git keeps it) is removed first. Only a
    folder holding nothing but a sweep's report files is removed; sweep.py refuses anything else."""
    if not report_dir.is_dir():
        return
    names = {path.name for path in report_dir.iterdir()}
    if names and names <= {"report.md", "report.json", "report.png", "runs"}:
        print(
            f"Replacing the earlier report in {report_dir} (pass --resume to continue it instead).",
            flush=True,
        )
        shutil.rmtree(report_dir)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", choices=list(MAX_SEQ_LENGTH), default="fortunes")
    add_backbone_argument(parser)
    parser.add_argument(
        "--per-class", type=int, default=60, help="fortunes: quotations per topic (default 60)"
    )
    parser.add_argument("--max-rows", type=int, default=5000, help="debtags: packages (default 5000)")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the subsample and the split")
    parser.add_argument("--poolings", default=",".join(DEFAULT_POOLINGS), help="comma-separated, or 'all'")
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[42], help="training seeds (several give error bars)"
    )
    parser.add_argument(
        "--baselines", default="vanilla,logistic_regression", help="comma-separated, or 'none'"
    )
    parser.add_argument("--report-dir", type=Path, help="default: bench/results/<dataset>")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run of this benchmark (sweep.py --resume); without it, the "
        "report in --report-dir is replaced",
    )
    parser.add_argument("train_args", nargs="*", help="extra train.py arguments for every run (after --)")
    args = parser.parse_args()
    poolings = ",".join(POOLINGS) if args.poolings == "all" else args.poolings
    report_dir = args.report_dir or REPO / "bench" / "results" / args.dataset
    if not args.resume:
        replace_old_report(report_dir)

    with tempfile.TemporaryDirectory() as scratch:
        files = data_files(args.dataset, Path(scratch) / "data", args)
        sizes = {
            split: len(path.read_text(encoding="utf-8").splitlines()) - (path.suffix == ".csv")
            for split, path in files.items()
        }
        print(f"{args.dataset}: {sizes} rows (data seed {args.data_seed})", flush=True)
        return sweep_main(
            [
                "--poolings",
                poolings,
                "--baselines",
                args.baselines,
                "--seeds",
                *map(str, args.seeds),
                "--report_dir",
                str(report_dir),
                *(["--resume"] if args.resume else []),
                *data_arguments(args.dataset, files, train_py_model("bench/accuracy.py", args.backbone)),
                *args.train_args,
            ]
        )


if __name__ == "__main__":
    sys.exit(main())
