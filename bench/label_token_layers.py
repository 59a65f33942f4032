"""What ``label_token_layers`` costs in accuracy: label tokens joining all, half, 2 or 1 of MiniLM's 6 layers, against
mean pooling, on fortunes (macro-F1) and debtags (micro-F1), several seeds, with train.py's defaults.

    python bench/label_token_layers.py                    # both benchmarks, k = all 3 2 1, seeds 1 2 3 (hours)
    python bench/label_token_layers.py --table-only       # the table from the reports already written

Each (benchmark, k) is one ``bench/accuracy.py`` run (its sweep, no baselines) with ``--label_token_layers k``; the
``all`` run also trains mean pooling, the reference. Reports go to ``bench/results/label_token_layers/<benchmark>_<k>/``
and the table to ``bench/results/label_token_layers/table.md``. debtags runs on ``--debtags-rows`` packages
(default 2500, half of bench/accuracy.py's default, to fit a session: label tokens with all layers train 2.5x
slower than mean pooling). What it costs in time is bench/overhead.py's ``--label-token-layers``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "label_token_layers"
METRIC = {"fortunes": "f1_macro", "debtags": "f1_micro"}
OTHER_METRIC = {"fortunes": "accuracy", "debtags": "f1_macro"}


def report_dir(dataset: str, layers: str) -> Path:
    return RESULTS / f"{dataset}_{layers if layers == 'all' else f'k{layers}'}"


def run(dataset: str, layers: str, seeds: list[int], debtags_rows: int) -> None:
    poolings = "mean,label_tokens" if layers == "all" else "label_tokens"
    command = [
        sys.executable,
        str(REPO / "bench" / "accuracy.py"),
        "--dataset",
        dataset,
        *(["--max-rows", str(debtags_rows)] if dataset == "debtags" else []),
        "--poolings",
        poolings,
        "--seeds",
        *map(str, seeds),
        "--baselines",
        "none",
        "--report-dir",
        str(report_dir(dataset, layers)),
        *([] if layers == "all" else ["--", "--label_token_layers", layers]),
    ]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def test_metrics(dataset: str, layers: str, pooling: str) -> dict[str, list[float]] | None:
    """metric -> one value per seed, and train seconds, of ``pooling`` in the (dataset, k) report; None if absent."""
    path = report_dir(dataset, layers) / "report.json"
    if not path.is_file():
        return None
    records = [
        record
        for record in json.loads(path.read_text())["records"]
        if record["name"] == pooling and record["status"] == "ok"
    ]
    if not records:
        return None
    names = (METRIC[dataset], OTHER_METRIC[dataset])
    values = {name: [record["metrics"][f"test_{name}"] for record in records] for name in names}
    values["train seconds"] = [record["metrics"]["train_runtime"] for record in records]
    values["seeds"] = [record["seed"] for record in records]
    return values


def mean_sd(values: list[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {spread:.4f}"


def table(datasets: list[str], layers: list[str]) -> str:
    lines = []
    for dataset in datasets:
        metric, other = METRIC[dataset], OTHER_METRIC[dataset]
        reference = test_metrics(dataset, "all", "label_tokens")
        mean = test_metrics(dataset, "all", "mean")
        lines += [
            f"**{dataset}** (test split; mean ± sd over seeds; difference against label tokens in all layers)",
            "",
            f"| model | k | {metric} | {other} | {metric} vs all | train s | seeds |",
            "|---|---|---:|---:|---:|---:|---|",
        ]
        rows = [("mean pooling", "-", mean)] + [
            ("label tokens", k, test_metrics(dataset, k, "label_tokens")) for k in layers
        ]
        for title, k, values in rows:
            if values is None:
                lines.append(f"| {title} | {k} | not run | | | | |")
                continue
            difference = (
                f"{statistics.mean(values[metric]) - statistics.mean(reference[metric]):+.4f}"
                if reference is not None
                else "-"
            )
            lines.append(
                f"| {title} | {k} | {mean_sd(values[metric])} | {mean_sd(values[other])} | {difference} | "
                f"{statistics.mean(values['train seconds']):.0f} | {' '.join(map(str, values['seeds']))} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", nargs="+", choices=list(METRIC), default=list(METRIC))
    parser.add_argument("--layers", nargs="+", default=["all", "3", "2", "1"], help="k values ('all' first)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--debtags-rows", type=int, default=2500)
    parser.add_argument(
        "--table-only", action="store_true", help="only compose the table from existing reports"
    )
    args = parser.parse_args()
    if "all" not in args.layers:
        parser.error("--layers must include 'all': it is the reference, and its run trains mean pooling too")
    if not args.table_only:
        for dataset in args.datasets:
            for layers in args.layers:
                run(dataset, layers, args.seeds, args.debtags_rows)
    text = table(args.datasets, args.layers)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "table.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
