"""The sweep's report: ``report.json`` (every run, every metric), ``report.md`` (one row per pooling and baseline,
best first) and ``report.png`` (the main metric, with the standard deviation over seeds as error bars)."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..modeling.problem_types import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from ..train.predictions import json_safe
from .records import RunRecord, Sweep, write_atomically

__all__ = ["Row", "summarise", "write_report"]

BASELINE_TITLES = {
    "vanilla": "vanilla AutoModelForSequenceClassification",
    "logistic_regression": "logistic regression on frozen sentence-transformers embeddings",
}
# Shown next to the main metric, per problem type.
SECONDARY = {
    SINGLE_LABEL: ("accuracy",),
    MULTI_LABEL: ("f1_micro", "f1_macro"),
    REGRESSION: ("pearson", "spearman"),
}


@dataclass
class Row:
    """One pooling or baseline, over its seeds."""

    name: str
    kind: str
    values: list[float]  # the main metric of each successful seed
    mean: float | None
    std: float | None  # sample standard deviation over seeds (None with one seed)
    secondary: dict[str, float | None]
    train_seconds: float | None
    samples_per_second: float | None
    parameters: int | None
    runs: int
    failures: list[str]  # "seed N: error"

    @property
    def title(self) -> str:
        return (
            f"{BASELINE_TITLES.get(self.name, self.name)} (baseline)"
            if self.kind == "baseline"
            else self.name
        )


def _mean(values: list[float]) -> float | None:
    values = [value for value in values if isinstance(value, (int, float)) and not math.isnan(value)]
    return statistics.fmean(values) if values else None


def summarise(sweep: Sweep) -> list[Row]:
    """One row per pooling and baseline: successful rows best first, then the ones that never succeeded."""
    split, metric = sweep.metric.split("_", 1)
    rows = []
    for name in sweep.names:
        records: list[RunRecord] = [record for record in sweep.records if record.name == name]
        ok = [record for record in records if record.status == "ok"]
        values = [float(record.metrics[sweep.metric]) for record in ok if sweep.metric in record.metrics]
        rows.append(
            Row(
                name=name,
                kind=records[0].kind if records else "pooling",
                values=values,
                mean=_mean(values),
                std=statistics.stdev(values) if len(values) > 1 else None,
                secondary={
                    key: _mean([record.metrics.get(f"{split}_{key}") for record in ok])
                    for key in SECONDARY[sweep.problem_type]
                    if key != metric
                },
                train_seconds=_mean([record.metrics.get("train_runtime") for record in ok]),
                samples_per_second=_mean([record.metrics.get("train_samples_per_second") for record in ok]),
                parameters=ok[0].parameters if ok else None,
                runs=len(records),
                failures=[
                    f"seed {record.seed}: {record.error}" for record in records if record.status == "failed"
                ],
            )
        )
    sign = 1 if sweep.greater_is_better else -1
    return sorted(rows, key=lambda row: (row.mean is None, -sign * row.mean if row.mean is not None else 0))


def _number(value: float | None, digits: int = 4) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _markdown(sweep: Sweep, rows: list[Row]) -> str:
    split, metric = sweep.metric.split("_", 1)
    split_name = {"test": "test split", "eval": "validation split"}[split]
    seeds = len(sweep.seeds)
    spread = f" ± std over {seeds} seeds" if seeds > 1 else ""
    secondary = [key for key in SECONDARY[sweep.problem_type] if key != metric]
    header = (
        ["pooling", f"{metric}{spread}"]
        + secondary
        + ["train seconds", "train samples/s", "parameters", "runs ok"]
    )
    lines = [
        "# Pooling sweep",
        "",
        f"{sweep.problem_type.replace('_', ' ')}; metrics on the {split_name}, ranked by {metric} "
        f"({'higher' if sweep.greater_is_better else 'lower'} is better); seeds {', '.join(map(str, sweep.seeds))}.",
        "",
        "train.py arguments of every run: `" + (" ".join(sweep.train_arguments) or "(none)") + "`",
        "",
        *_partial_note(sweep),
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if index == 0 else "---:" for index in range(len(header))) + "|",
    ]
    for row in rows:
        main = _number(row.mean) + (f" ± {_number(row.std)}" if row.std is not None else "")
        cells = [
            row.title,
            main,
            *(_number(row.secondary[key]) for key in secondary),
            _number(row.train_seconds, 0),
            _number(row.samples_per_second, 1),
            f"{row.parameters:,}" if row.parameters is not None else "–",
            f"{row.runs - len(row.failures)}/{row.runs}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    failures = [(row.title, failure) for row in rows for failure in row.failures]
    if failures:
        lines += ["", "## Failed runs", ""] + [f"- {title}, {failure}" for title, failure in failures]
    lines += [
        "",
        "Parameters: the whole model's (backbone included); for logistic regression, its coefficients.",
        "train seconds: training (for logistic regression: embedding the splits and fitting every candidate).",
    ]
    return "\n".join(lines) + "\n"


def _partial_note(sweep: Sweep) -> list[str]:
    """A report written while the sweep runs (or after it was interrupted) says how far it got."""
    planned, finished = len(sweep.names) * len(sweep.seeds), len(sweep.records)
    if finished >= planned:
        return []
    return [
        f"**Partial report**: {finished} of {planned} runs finished so far (`--resume` runs the others).",
        "",
    ]


def _chart(sweep: Sweep, rows: list[Row], handle: BinaryIO) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    _, metric = sweep.metric.split("_", 1)
    shown = list(reversed(rows))  # barh draws bottom-up: best on top
    height = max(2.5, 0.35 * len(shown) + 1.2)
    figure, axis = plt.subplots(figsize=(8, height), dpi=100)
    means = [row.mean if row.mean is not None else 0.0 for row in shown]
    errors = [row.std or 0.0 for row in shown]
    colours = ["tab:gray" if row.kind == "baseline" else "tab:blue" for row in shown]
    bars = axis.barh(range(len(shown)), means, xerr=errors if any(errors) else None, color=colours, capsize=3)
    for bar, row in zip(bars, shown, strict=True):
        label = f"{row.mean:.3f}" if row.mean is not None else "failed" if row.runs else "not run yet"
        axis.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {label}", va="center", fontsize=8)
    axis.set_yticks(
        range(len(shown)),
        [row.title if row.kind == "pooling" else f"{row.name} (baseline)" for row in shown],
        fontsize=8,
    )
    spread = f", error bars: std over {len(sweep.seeds)} seeds" if len(sweep.seeds) > 1 else ""
    axis.set_xlabel(f"{sweep.metric}{spread}")
    axis.set_title(f"Pooling sweep: {metric} ({sweep.problem_type.replace('_', ' ')})", fontsize=10)
    axis.margins(x=0.15)
    figure.tight_layout()
    figure.savefig(handle, format="png")
    plt.close(figure)


def write_report(sweep: Sweep, folder: Path) -> dict[str, Path]:
    """Write report.json, report.md and report.png into ``folder``; returns their paths.

    Each file is replaced atomically. report.json, which a resumed sweep reads its finished runs from, comes last:
    an interruption between the files can leave it one run behind the others, never ahead of them.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rows = summarise(sweep)
    paths = {"markdown": folder / "report.md", "json": folder / "report.json", "chart": folder / "report.png"}
    summary: list[dict[str, Any]] = [{**row.__dict__, "title": row.title} for row in rows]
    document = {**sweep.to_dict(), "summary": summary}
    markdown = _markdown(sweep, rows).encode()
    write_atomically(paths["markdown"], lambda handle: handle.write(markdown))
    write_atomically(paths["chart"], lambda handle: _chart(sweep, rows, handle))
    text = (json.dumps(json_safe(document), indent=2, allow_nan=False) + "\n").encode()
    write_atomically(paths["json"], lambda handle: handle.write(text))
    return paths
