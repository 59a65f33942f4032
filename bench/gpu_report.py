"""bench/gpu.py's report, rendered from its results.jsonl (every figure it prints comes from there):

python bench/gpu_report.py bench/results/gpu/h200/results.jsonl > bench/results/gpu/h200/report.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BASELINES = ("trainer", "trainer, grouped")


def render(results: list[dict]) -> str:
    environment = next((r for r in results if r["kind"] == "environment"), {})
    lines = [
        f"# bench/gpu.py on {environment.get('device', '?')}",
        "",
        f"torch {environment.get('torch')}, transformers {environment.get('transformers')}; torch's varlen_attn: "
        f"`{environment.get('varlen_attn')}`. bf16 autocast, batch size {environment.get('batch_size')} "
        f"(train.py's default), {environment.get('steps')} timed steps after {environment.get('warmup')} warm-up "
        f"steps per run; MFU against {environment.get('bf16_peak_tflops', 0):.1f} TFLOP/s (dense bf16). Random "
        "weights for every backbone but MiniLM: a step's time does not depend on the weights' values. Every "
        "backbone reads MiniLM's WordPiece tokens.",
        "",
    ]
    steps = environment.get("steps", 0)
    runs = [{"steps": steps, **r} if r["kind"] == "run" else r for r in results]
    lines += _parity(results) + _compiled_parity(results) + _syncs(results) + _runs(runs)
    lines += _compilation(results) + _epochs(results)
    return "\n".join(lines) + "\n"


def _compiled_parity(results) -> list[str]:
    rows = [r for r in results if r["kind"] == "compiled_parity"]
    if not rows:
        return []
    lines = [
        "## Parity: compiled on length buckets (CUDA graphs) against eager, both bf16",
        "",
        "| backbone | logits | gradients | steps | largest loss difference | loss first / last: eager, compiled "
        "| passed |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        if "logits_compiled_vs_eager" not in r:
            lines.append(f"| {r['backbone']} | {r.get('error', '?')[:160]} | | | | | no |")
            continue
        eager, compiled = r["loss_first_last_eager"], r["loss_first_last_compiled"]
        lines.append(
            f"| {r['backbone']} | {r['logits_compiled_vs_eager']:.2e} | {r['grad_compiled_vs_eager']:.2e} "
            f"| {r['steps']} | {r['loss_max_abs_difference']:.3g} | {eager[0]:.3f} / {eager[1]:.3f}, "
            f"{compiled[0]:.3f} / {compiled[1]:.3f} | {'yes' if r['passed'] else 'NO'} |"
        )
    return lines + [
        "",
        "Relative L2 distances of logits and gradients on one batch; AdamW steps at 5e-5.",
        "",
    ]


def _compilation(results) -> list[str]:
    rows = [r for r in results if r["kind"] in ("run", "epoch") and r.get("frames")]
    if not rows:
        return []
    lines = [
        "## Compilation",
        "",
        "Graphs dynamo compiled in each compiled run (one per shape compiled statically: the length buckets), the "
        "frames it compiled, and inductor's CUDA-graph counters. `TORCH_LOGS=recompiles` (bench/gpu_run.sh) writes "
        "the reason of every recompilation into log.txt.",
        "",
        "| group | run | graphs | frames | CUDA-graph counters |",
        "|---|---|---:|---:|---|",
    ]
    for r in rows:
        counters = ", ".join(f"{key[9:]} {value}" for key, value in r.items() if key.startswith("inductor_"))
        lines.append(f"| {r['group']} | {r['arm']} | {r['graphs']} | {r['frames']} | {counters or 'none'} |")
    return lines + [""]


def _epochs(results) -> list[str]:
    rows = [r for r in results if r["kind"] == "epoch"]
    if not rows:
        return []
    lines = [
        "## One whole epoch",
        "",
        "Wall time from the run's start (loading, tokenizing, compiling) to the end of its last step, and real "
        "tokens/s over all of it.",
        "",
        "| group | run | epoch s | vs Trainer | steps | tokens/s | first step s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    plain = {r["group"]: r for r in rows if r["arm"] == "trainer" and "epoch_seconds" in r}
    for r in rows:
        if "epoch_seconds" not in r:
            lines.append(f"| {r['group']} | {r['arm']} | {r.get('error', '?')[:160]} | | | | |")
            continue
        base = plain.get(r["group"])
        ratio = f"{r['epoch_seconds'] / base['epoch_seconds']:.2f}x" if base else ""
        lines.append(
            f"| {r['group']} | {r['arm']} | {r['epoch_seconds']:.1f} | {ratio} | {r['steps']} "
            f"| {r['tokens_per_second']:,.0f} | {r['first_step_seconds']:.1f} |"
        )
    return lines + [""]


def _parity(results) -> list[str]:
    rows = [r for r in results if r["kind"] == "parity"]
    if not rows:
        return []
    lines = [
        "## Parity: padding-free (torch varlen) against padded (sdpa), both bf16, each against float32",
        "",
        "| backbone | pooling | logits: sdpa / varlen vs fp32 | gradients: sdpa / varlen vs fp32 | gradient cosine "
        "varlen-sdpa | passed |",
        "|---|---|---|---|---:|---|",
    ]
    for r in rows:
        if "logits_sdpa_vs_fp32" not in r:
            lines.append(f"| {r['backbone']} | | {r.get('error') or r.get('skipped')} | | | no |")
            continue
        lines.append(
            f"| {r['backbone']} | {r['pooling']} | {r['logits_sdpa_vs_fp32']:.2e} / {r['logits_varlen_vs_fp32']:.2e} "
            f"| {r['grad_sdpa_vs_fp32']:.2e} / {r['grad_varlen_vs_fp32']:.2e} | {r['grad_cosine_varlen_sdpa']:.5f} "
            f"| {'yes' if r['passed'] else 'NO'} |"
        )
    return lines + ["", "Relative L2 distances; 16 package descriptions, at most 512 tokens.", ""]


def _syncs(results) -> list[str]:
    rows = [r for r in results if r["kind"] == "syncs" and "who" in r]
    if not rows:
        return []
    lines = ["## Host synchronisations per training step (MiniLM, fortunes, 128)", ""]
    for r in rows:
        if "error" in r:
            lines.append(f"- {r['who']}: {r['error']}")
            continue
        sources = ", ".join(f"`{where}` x{count}" for where, count in sorted(r["sources"].items()))
        lines.append(
            f"- {r['who']}: {r['per_step']:.1f} per step over {r['steps']} steps ({sources or 'none'})"
        )
    return lines + [""]


def _runs(results) -> list[str]:
    runs = [_current_name(r) for r in results if r["kind"] == "run"]
    groups: dict[str, list[dict]] = {}
    for r in runs:
        groups.setdefault(r["group"], []).append(r)
    lines = [
        "## Throughput",
        "",
        "Real tokens/s (attention-mask tokens), the ratio to the plain Trainer and to the Trainer with length "
        "grouping of the same group, peak GPU memory, time from the run's start to its first step (loading, "
        "tokenizing, compiling), model FLOPs utilisation.",
        "",
    ]
    for group, records in groups.items():
        lines += [
            f"### {group}",
            "",
            "| run | attention | texts/step | ms/step | tokens/s | vs Trainer | vs grouped | peak MiB | vs Trainer "
            "| first step s | MFU |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        base = {r["arm"]: r for r in records if r["arm"] in BASELINES and "tokens_per_second" in r}
        for r in sorted(records, key=lambda record: _ARM_ORDER.get(record["arm"], 99)):
            lines.append(_row(r, base))
        lines.append("")
    return lines


def _current_name(record: dict) -> dict:
    # The first stored runs (2026-11-27) named train.py's defaults "train.py", which then meant padding-free on a
    # GPU; --padding_free auto now pads small steps, so the report names that run by what it did.
    if record["arm"] == "train.py" and record.get("attention") == "torch_varlen":
        return {**record, "arm": "train.py, padding-free"}
    return record


def _row(r: dict, base: dict) -> str:
    if "tokens_per_second" not in r:
        return f"| {r['arm']} | {r.get('error', '?')[:160]} | | | | | | | | | |"
    speed = r["tokens_per_second"]
    plain, grouped = base.get("trainer"), base.get("trainer, grouped")
    ratio = lambda b, key: f"{r[key] / b[key]:.2f}x" if b and b.get(key) else ""  # noqa: E731
    texts = f"{r['texts_per_step']:.1f}" if r.get("texts_per_step") else ""
    return (
        f"| {r['arm']} | {r['attention']} | {texts} | {_milliseconds(r):.1f} | {speed:,.0f} | {ratio(plain, 'tokens_per_second')} | "
        f"{ratio(grouped, 'tokens_per_second')} | {r['peak_bytes'] / 2**20:,.0f} | {ratio(plain, 'peak_bytes')} | "
        f"{r['first_step_seconds']:.1f} | {100 * r['mfu']:.1f}% |"
    )


def _milliseconds(r: dict) -> float:
    """Milliseconds per timed step."""
    return 1000 * r["seconds"] / r["steps"]


_ARM_ORDER = {
    name: index
    for index, name in enumerate(
        [
            "trainer",
            "trainer, grouped",
            "train.py, padded",
            "train.py, buckets",
            "train.py, padding-free",
            "train.py, token budget",
            "train.py, compiled",
            "train.py, CUDA graphs",
        ]
    )
}


if __name__ == "__main__":
    print(
        render([json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line.strip()]),
        end="",
    )
