"""How train.py's default hyperparameters were chosen: candidate settings on the fortunes validation split.

Every candidate fine-tunes the packaged all-MiniLM-L6-v2 with mean pooling on the same fortunes subsample as
bench/fortunes_defaults.py (the test split is never looked at here) and reports validation accuracy and macro-F1
after each epoch. Each candidate states every setting it varies, so the table does not depend on the current
defaults. About 10 minutes per candidate on 2 idle CPU cores.

    python bench/choose_defaults.py                 # all candidates
    python bench/choose_defaults.py head_lr_1e-3    # some of them
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fortunes_defaults import BACKBONE, REPO, build_data  # bench/ is on sys.path when this script runs


def candidate(learning_rate="5e-5", head_learning_rate=None, epochs="4", warmup="0.1", batch="16", extra=()):
    flags = ["--learning_rate", learning_rate, "--num_train_epochs", epochs, "--warmup_steps", warmup,
             "--per_device_train_batch_size", batch, "--weight_decay", "0.01", *extra]
    return flags + (["--head_learning_rate", head_learning_rate] if head_learning_rate else [])


CANDIDATES = {
    "transformers_defaults": ["--learning_rate", "5e-5", "--num_train_epochs", "3", "--warmup_steps", "0",
                              "--per_device_train_batch_size", "8", "--weight_decay", "0"],
    "lr_5e-5": candidate(),
    "head_lr_1e-3": candidate(head_learning_rate="1e-3"),
    "head_lr_3e-3": candidate(head_learning_rate="3e-3"),
    "lr_1e-4_head_lr_1e-3": candidate(learning_rate="1e-4", head_learning_rate="1e-3"),
    "head_lr_1e-3_6_epochs": candidate(head_learning_rate="1e-3", epochs="6"),
    "head_lr_1e-3_batch_32": candidate(head_learning_rate="1e-3", batch="32"),
    "head_lr_1e-3_no_warmup": candidate(head_learning_rate="1e-3", warmup="0"),
    "head_lr_1e-3_dense_head": candidate(head_learning_rate="1e-3", extra=("--classifier_head", "dense")),
}


def run_candidate(name: str, flags: list[str], files: dict[str, Path], folder: Path) -> tuple[list[dict], float]:
    output_dir = folder / name
    command = [
        sys.executable, str(REPO / "train.py"), "--model_name_or_path", BACKBONE,
        "--train_file", str(files["train"]), "--validation_file", str(files["validation"]),
        "--output_dir", str(output_dir), "--overwrite_output_dir", "--do_train", "--do_eval",
        "--disable_tqdm", "true", "--save_strategy", "no", *flags,
    ]
    print("$", " ".join(command), flush=True)
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO)
    seconds = time.perf_counter() - start
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    return [entry for entry in history if "eval_accuracy" in entry], seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"candidates to run (default: all): {', '.join(CANDIDATES)}")
    parser.add_argument("--per-class", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    names = args.names or list(CANDIDATES)
    unknown = [name for name in names if name not in CANDIDATES]
    if unknown:
        parser.error(f"unknown candidates {unknown}; choose from {', '.join(CANDIDATES)}")

    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        files = build_data(Path(scratch) / "data", args.per_class, args.seed)
        for name in names:
            try:
                results[name] = run_candidate(name, CANDIDATES[name], files, Path(scratch))
            except subprocess.CalledProcessError as error:
                print(f"FAILED {name}: train.py exited with {error.returncode}", flush=True)
                continue
            evaluations, seconds = results[name]
            print(f"RESULT {name}: " + ", ".join(
                f"epoch {entry['epoch']:g} acc {entry['eval_accuracy']:.4f} f1 {entry['eval_f1_macro']:.4f}"
                for entry in evaluations) + f" ({seconds:.0f} s)", flush=True)

    print(f"\n{'candidate (fortunes validation split)':<28} {'accuracy':>9} {'macro-F1':>9} {'best epoch':>10} {'seconds':>8}")
    for name, (evaluations, seconds) in results.items():
        last = evaluations[-1]
        best = max(evaluations, key=lambda entry: entry["eval_f1_macro"])
        print(f"{name:<28} {last['eval_accuracy']:>9.4f} {last['eval_f1_macro']:>9.4f} {best['epoch']:>10g} {seconds:>8.0f}")
        print(f"    {' '.join(CANDIDATES[name])}")


if __name__ == "__main__":
    main()
