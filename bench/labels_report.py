"""bench/labels.py's stored runs (one JSON file per dataset, setting, arm and seed) and the report made from them."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from backbones import HUB_IDS, MINILM
from labels_tasks import DATASETS, METRICS, SETTINGS, ZERO_SHOT_METRICS

# ----------------------------------------------------------------------------------------------------
# The stored runs and the report
# ----------------------------------------------------------------------------------------------------


def run_path(results_dir: Path, dataset: str, setting: str, arm: str, seed: int) -> Path:
    return results_dir / "runs" / dataset / setting / arm / f"seed{seed}.json"


def store(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    partial.replace(path)


def stored_runs(results_dir: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted((results_dir / "runs").glob("*/*/*/seed*.json"))]


def mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def backbone_lines(rows: list[dict]) -> list[str]:
    """The backbone, named where it is not MiniLM (runs stored before --backbone have no name and were MiniLM's, so
    their reports render as they did)."""
    named = sorted({name for row in rows for name in row.get("backbones", ())} - {HUB_IDS[MINILM]})
    return [f"Backbone: {', '.join(named)}."] if named else []


def summary(runs: list[dict]) -> list[dict]:
    """One row per (dataset, setting, arm): the mean and sd of each score over the finished seeds, and of the times."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["dataset"], run["setting"], run["arm"]), []).append(run)
    rows = []
    for (dataset, setting, arm), group in sorted(
        groups.items(), key=lambda item: (DATASETS.index(item[0][0]), SETTINGS.index(item[0][1]), item[0][2])
    ):
        finished = [run for run in group if run["status"] == "ok"]
        metrics = ZERO_SHOT_METRICS[dataset] if setting == "zeroshot" else METRICS[dataset]
        row = {
            "dataset": dataset,
            "setting": setting,
            "arm": arm,
            "seeds": sorted(run["seed"] for run in finished),
            "failed": sorted(run["seed"] for run in group if run["status"] != "ok"),
            "flags": finished[0]["flags"] if finished else group[0]["flags"],
            "train_rows": statistics.fmean(run["train_rows"] for run in finished) if finished else None,
            "commits": sorted({run["commit"] for run in finished}),
        }
        if any("backbone" in run for run in group):
            row["backbones"] = sorted({run.get("backbone", HUB_IDS[MINILM]) for run in group})
        for metric in metrics:
            values = [run["scores"][metric] for run in finished if metric in run["scores"]]
            row[metric] = {"values": values, **dict(zip(("mean", "sd"), mean_sd(values), strict=True))}
        for timing in ("train_seconds", "run_seconds"):
            row[timing] = mean_sd([run[timing] for run in finished if run.get(timing) is not None])[0]
        rows.append(row)
    return rows


def _cell(value: dict) -> str:
    if value["mean"] is None:
        return "–"
    return f"{value['mean']:.4f}" + (f" ± {value['sd']:.4f}" if value["sd"] is not None else "")


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        "# Labels as text: train.py, label text, SetFit and cosine similarity",
        "",
        "Made by `bench/labels.py` (its docstring says what each setting and arm is); this report: "
        f"`{command}`.",
        *backbone_lines(rows),
        "Test split, mean ± sd over the seeds. Times in seconds, mean over the seeds, taken on a machine that other "
        "work shared: compare them within a row's setting only, and re-measure on a quiet machine before quoting.",
        "",
    ]
    for dataset in DATASETS:
        for setting in SETTINGS:
            block = [row for row in rows if (row["dataset"], row["setting"]) == (dataset, setting)]
            if not block:
                continue
            metrics = ZERO_SHOT_METRICS[dataset] if setting == "zeroshot" else METRICS[dataset]
            lines += [
                f"## {dataset}, {setting}",
                "",
                "| arm | flags | " + " | ".join(metrics) + " | train s | run s | train rows | seeds |",
                "|---|---|" + "---:|" * (len(metrics) + 3) + "---|",
            ]
            for row in block:
                flags = " ".join(row["flags"]) or "(none)"
                seeds = ", ".join(map(str, row["seeds"])) + (
                    f" (failed: {', '.join(map(str, row['failed']))})" if row["failed"] else ""
                )
                cells = [row["arm"], f"`{flags}`", *(_cell(row[metric]) for metric in metrics)]
                cells += [
                    "–" if row[key] is None else f"{row[key]:.0f}"
                    for key in ("train_seconds", "run_seconds", "train_rows")
                ]
                lines.append("| " + " | ".join(cells + [seeds]) + " |")
            lines.append("")
    return "\n".join(lines)


def write_report(results_dir: Path, command: str) -> str:
    runs = stored_runs(results_dir)
    rows = summary(runs)
    text = markdown(rows, command)
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "report.md").write_text(text, encoding="utf-8")
    (results_dir / "report.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return text
