"""bench/recipes.py's report: one row per arm (mean ± sd of each metric over the seeds, train seconds, time and points
against the recipe), as markdown, a chart and JSON; resuming and merging reports of the same settings."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from backbones import MINILM_PACKAGE

from pooled_models.sweep.records import write_atomically
from pooled_models.train.predictions import json_safe

RECIPE = "recipe"
DEFAULTS = "defaults"


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _sd(values: list[float]) -> float | None:
    return statistics.stdev(values) if len(values) > 1 else None


def summarise(document: dict) -> list[dict]:
    """One row per arm: the mean and sd of each metric over its finished seeds, train seconds, and the differences
    against the recipe (in points, and as a time ratio)."""
    metrics = document["metrics"]
    rows = []
    for arm in document["arms"]:
        finished = [run for run in document["runs"] if run["arm"] == arm and run["status"] == "ok"]
        row = {
            "arm": arm,
            "runs": len(finished),
            "failed": sum(run["arm"] == arm and run["status"] != "ok" for run in document["runs"]),
        }
        for metric in metrics:
            values = [
                run["metrics"][f"test_{metric}"] for run in finished if f"test_{metric}" in run["metrics"]
            ]
            row[metric] = {"mean": _mean(values), "sd": _sd(values), "values": values}
        row["train_seconds"] = _mean([run["train_seconds"] for run in finished])
        rows.append(row)
    recipe = next((row for row in rows if row["arm"] == RECIPE), None)
    for row in rows:
        for metric in metrics:
            ours, theirs = row[metric]["mean"], recipe[metric]["mean"] if recipe else None
            row[metric]["points_vs_recipe"] = (
                100 * (ours - theirs) if ours is not None and theirs is not None else None
            )
        theirs = recipe["train_seconds"] if recipe else None
        row["time_vs_recipe"] = (
            row["train_seconds"] / theirs if row["train_seconds"] is not None and theirs else None
        )
    return rows


def _number(value: float | None, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1f}"


def markdown(document: dict, rows: list[dict], candidates: dict[str, list[str]]) -> str:
    metrics = document["metrics"]
    seeds = document["seeds"]
    header = (
        ["arm", "flags"]
        + [f"{metric} (mean ± sd)" for metric in metrics]
        + ["train s", "time vs recipe"]
        + [f"{metric} vs recipe (points)" for metric in metrics]
        + ["runs ok"]
    )
    lines = [
        f"# Recipes: {document['dataset']}",
        "",
        f"{document['problem_type'].replace('_', ' ')}; test split; seeds {', '.join(map(str, seeds))}; "
        f"{document['sizes']} rows; backbone {document.get('backbone', MINILM_PACKAGE)}; max_seq_length {document['max_seq_length']}; "
        f"epochs {document['epochs']}.",
        "",
        f"`{document['command']}`",
        "",
    ]
    for merged in document.get("merged_from", []):  # runs made by another process (--merge-from)
        lines += [f"with the runs of `{merged['command']}`", ""]
    for note in document.get("notes", []):  # e.g. arms renamed when a default they measured was adopted
        lines += [note, ""]
    planned, finished = len(document["arms"]) * len(seeds), len(document["runs"])
    if finished < planned:
        lines += [
            f"**Partial report**: {finished} of {planned} runs so far (`--resume` runs the others).",
            "",
        ]
    lines += [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|",
    ]
    # an arm's flags as the report stored them where it did (an arm since dropped from CANDIDATES keeps what it ran)
    flags_of = {**candidates, **document.get("candidates", {})}
    for row in rows:
        flags = {RECIPE: "(plain PyTorch, see bench/recipes.py)", DEFAULTS: "(none)"}.get(row["arm"])
        cells = [row["arm"], flags or f"`{' '.join(flags_of.get(row['arm'], []))}`"]
        for metric in metrics:
            value = row[metric]
            spread = f" ± {_number(value['sd'])}" if value["sd"] is not None else ""
            cells.append(_number(value["mean"]) + spread)
        cells += [
            _number(row["train_seconds"], 0),
            _number(row["time_vs_recipe"], 2) + ("x" if row["time_vs_recipe"] else ""),
        ]
        cells += [_signed(row[metric]["points_vs_recipe"]) for metric in metrics]
        cells.append(f"{row['runs']}/{row['runs'] + row['failed']}")
        lines.append("| " + " | ".join(cells) + " |")
    failures = [run for run in document["runs"] if run["status"] != "ok"]
    if failures:
        lines += ["", "## Failed runs", ""]
        lines += [f"- {run['arm']}, seed {run['seed']}: {run['error']}" for run in failures]
    lines += [
        "",
        "train s: the optimisation loop alone (Trainer's train_runtime; the same loop timed for the recipe), mean over "
        "the seeds. Points: 100 × (the arm's mean - the recipe's mean).",
    ]
    return "\n".join(lines) + "\n"


def chart(document: dict, rows: list[dict], handle) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    metrics = document["metrics"]
    shown = list(reversed(rows))  # barh draws bottom-up: the table's first row on top
    height = max(3.0, 0.45 * len(shown) * len(metrics) / 2 + 1.5)
    figure, axes = plt.subplots(
        1, len(metrics) + 1, figsize=(4 * (len(metrics) + 1), height), dpi=100, sharey=True
    )
    positions = range(len(shown))
    for axis, metric in zip(axes, metrics, strict=False):
        means = [row[metric]["mean"] or 0.0 for row in shown]
        errors = [row[metric]["sd"] or 0.0 for row in shown]
        colours = ["tab:gray" if row["arm"] == RECIPE else "tab:blue" for row in shown]
        axis.barh(positions, means, xerr=errors if any(errors) else None, color=colours, capsize=3)
        for position, row, mean in zip(positions, shown, means, strict=True):
            label = f" {mean:.3f}" if row[metric]["mean"] is not None else " not run"
            axis.text(mean, position, label, va="center", fontsize=8)
        axis.set_xlabel(f"test {metric}")
        axis.margins(x=0.2)
    seconds = [row["train_seconds"] or 0.0 for row in shown]
    axes[-1].barh(positions, seconds, color="tab:orange")
    axes[-1].set_xlabel("train seconds (mean)")
    axes[0].set_yticks(list(positions), [row["arm"] for row in shown], fontsize=8)
    spread = f"; error bars: sd over {len(document['seeds'])} seeds" if len(document["seeds"]) > 1 else ""
    figure.suptitle(f"Recipes on {document['dataset']}{spread}", fontsize=10)
    figure.tight_layout()
    figure.savefig(handle, format="png")
    plt.close(figure)


def write_report(document: dict, folder: Path, candidates: dict[str, list[str]]) -> None:
    """report.md, report.png, then report.json (what --resume reads), each replaced atomically; ``candidates``: each
    arm's flags (bench/recipes.py's CANDIDATES)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = summarise(document)
    text = markdown(document, rows, candidates).encode()
    write_atomically(folder / "report.md", lambda handle: handle.write(text))
    write_atomically(folder / "report.png", lambda handle: chart(document, rows, handle))
    data = (json.dumps(json_safe({**document, "summary": rows}), indent=2) + "\n").encode()
    write_atomically(folder / "report.json", lambda handle: handle.write(data))


# What must match for a resumed report's runs to be comparable with the new ones.
COMPARABLE = ("sizes", "max_seq_length", "epochs", "data_seed", "backbone")
# What a report stored before a setting existed ran with.
BEFORE_THEY_EXISTED = {"backbone": MINILM_PACKAGE}


def earlier_report(folder: Path, resume: bool) -> dict | None:
    """The earlier report in ``folder``, to continue with --resume (without it, the report is replaced)."""
    path = folder / "report.json"
    if not path.is_file():
        return None
    if not resume:
        print(f"Replacing the earlier report in {folder} (pass --resume to continue it instead).", flush=True)
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def check_comparable(earlier: dict, document: dict, folder: Path) -> None:
    def setting(report: dict, name: str):
        return report.get(name, BEFORE_THEY_EXISTED.get(name))

    differences = [
        f"{name} was {setting(earlier, name)}, now {setting(document, name)}"
        for name in COMPARABLE
        if setting(earlier, name) != setting(document, name)
    ]
    if differences:
        sys.exit(
            f"bench/recipes.py: --resume: the report in {folder} was made with other settings ("
            + "; ".join(differences)
            + "); its runs would not be comparable. Resume with the same --per-class/--max-rows/--data-seed/--epochs/"
            "--backbone, "
            "or choose another --report-dir."
        )


def merge_reports(dataset: str, folder: Path, sources: list[Path], candidates: dict[str, list[str]]) -> None:
    """Add the finished runs of other report folders (the same dataset and settings: e.g. one bench process per core,
    each with its own --report-dir) to the report in ``folder`` and rewrite it; nothing is trained. A run both
    reports hold is kept as ``folder`` has it."""
    own = folder / "report.json"
    if not own.is_file():
        sys.exit(f"bench/recipes.py: --merge-from: no report to merge into ({own} does not exist).")
    document = json.loads(own.read_text(encoding="utf-8"))
    document.pop("summary", None)
    for source in sources:
        path = source / dataset / "report.json"
        if not path.is_file():
            sys.exit(f"bench/recipes.py: --merge-from: {path} does not exist.")
        other = json.loads(path.read_text(encoding="utf-8"))
        check_comparable(document, other, folder)
        held = {(run["arm"], run["seed"]) for run in document["runs"] if run["status"] == "ok"}
        added = [
            run for run in other["runs"] if run["status"] == "ok" and (run["arm"], run["seed"]) not in held
        ]
        document["runs"] += added
        document["arms"] = list(dict.fromkeys([*document["arms"], *(run["arm"] for run in added)]))
        document["seeds"] = list(dict.fromkeys([*document["seeds"], *(run["seed"] for run in added)]))
        document["candidates"] = {**other.get("candidates", {}), **document.get("candidates", {})}
        document.setdefault("merged_from", []).append(
            {"folder": str(path.parent), "command": other["command"]}
        )
        print(f"{dataset}: {len(added)} runs added from {path.parent}", flush=True)
    write_report(document, folder, candidates)
    print((folder / "report.md").read_text(), flush=True)
