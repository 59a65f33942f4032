"""bench/gpu.py: on a machine without CUDA it says so in one line and exits 0; its report is rendered from its raw
records (the stored H200 ones included) with ratios against the group's own Trainers; the token counter reads the
host side of each batch; and (slow) a dry run on this CPU goes through every kind of run, train.py's padding-free
one included, as the GPU call would (never a figure)."""

import json
import subprocess
import sys

import gpu
import gpu_report
import pytest
import torch
from gpu_arms import counting
from gpu_prepare import write_minilm, write_rows
from helpers import REPO, topic_rows

from pooled_models.train.data.flat import FlatCollator

STORED = REPO / "bench" / "results" / "gpu" / "h200"


def test_without_cuda_it_says_so_in_one_line_and_exits_0(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.main(["--prepared", str(tmp_path), "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("bench/gpu.py: no CUDA device on this machine"), out
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a fresh interpreter
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the script would measure")
def test_the_script_itself_exits_0_on_this_machine(tmp_path):
    command = [
        sys.executable,
        str(REPO / "bench" / "gpu.py"),
        "--prepared",
        str(tmp_path),
        "--output",
        str(tmp_path),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("bench/gpu.py: no CUDA device on this machine")


@pytest.mark.parametrize("name", ["batch16", "batch64"])
def test_the_stored_reports_are_rendered_from_their_records(name):
    records = [json.loads(line) for line in (STORED / f"results_{name}.jsonl").read_text().splitlines()]
    assert (STORED / f"report_{name}.md").read_text() == gpu_report.render(records)


def test_a_ratio_is_against_the_trainer_of_the_same_group():
    run = {"kind": "run", "seconds": 2.0, "peak_bytes": 2**30, "first_step_seconds": 1.0, "mfu": 0.01}
    records = [
        {"kind": "environment", "device": "X", "steps": 10},
        {**run, "group": "a", "arm": "trainer", "tokens_per_second": 100.0, "attention": "sdpa"},
        {**run, "group": "a", "arm": "trainer, grouped", "tokens_per_second": 200.0, "attention": "sdpa"},
        {
            **run,
            "group": "a",
            "arm": "train.py, padding-free",
            "tokens_per_second": 300.0,
            "attention": "torch_varlen",
        },
        {**run, "group": "b", "arm": "trainer", "tokens_per_second": 1000.0, "attention": "sdpa"},
        {"kind": "run", "group": "b", "arm": "train.py, padded", "error": "not run: deadline"},
    ]
    report = gpu_report.render(records)
    row = next(line for line in report.splitlines() if line.startswith("| train.py, padding-free"))
    cells = [cell.strip() for cell in row.split("|")]
    assert cells[4:8] == [
        "200.0",
        "300",
        "3.00x",
        "1.50x",
    ]  # ms/step, tokens/s, vs Trainer, vs grouped (group a)
    assert "| train.py, padded | not run: deadline |" in report


def test_the_counter_reads_real_tokens_and_texts_on_the_host():
    counts, texts = [], []
    collate = counting(FlatCollator(), counts, texts)
    collate([{"input_ids": [1, 2, 3], "labels": 0}, {"input_ids": [4, 5], "labels": 1}])
    assert counts == [5] and texts == [2]


@pytest.mark.slow  # tiny backbones of every family through every kind of run, on the CPU
def test_a_dry_run_goes_through_every_kind_of_run(tmp_path, monkeypatch):
    prepared = tmp_path / "prepared"
    (prepared / "data").mkdir(parents=True)
    rows = [{"text": row["text"], "label": row["label"]} for row in topic_rows(96, seed=0)]
    for name in ("fortunes", "debtags"):
        write_rows(prepared / "data" / f"{name}.csv", rows)
    write_minilm(prepared / "minilm")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    chosen = [gpu.GROUPS.index(("bert-base", "fortunes", 512, gpu.WITH_BUDGET))]
    output = tmp_path / "out"
    assert (
        gpu.main(
            ["--prepared", str(prepared), "--output", str(output), "--dry-run", "--groups", *map(str, chosen)]
        )
        == 0
    )
    records = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    runs = {record["arm"]: record for record in records if record["kind"] == "run"}
    assert set(runs) == {
        "trainer",
        "trainer, grouped",
        "train.py, padded",
        "train.py, padding-free",
        "train.py, token budget",
    }
    assert all("tokens_per_second" in run for run in runs.values()), [
        run.get("error") for run in runs.values()
    ]
    assert runs["train.py, padding-free"]["attention"] == "torch_varlen"
    assert runs["train.py, padded"]["attention"] == "sdpa"
    parity = [record for record in records if record["kind"] == "parity"]
    assert len(parity) == len(gpu.PARITY) and all(record.get("passed") for record in parity), parity
    compiled = [record for record in records if record["kind"] == "compiled_parity"]
    assert len(compiled) == 1 and compiled[0].get("passed"), compiled  # dynamo's eager backend: the plumbing
    assert compiled[0]["logits_compiled_vs_eager"] < 1e-5 and compiled[0]["steps"] == 3
    assert (output / "report.md").read_text() == gpu_report.render(records)


@pytest.mark.slow  # one whole epoch of a compiled run, a tiny backbone on the CPU
def test_a_dry_run_of_cuda_graphs_over_buckets_counts_its_graphs_and_times_an_epoch(tmp_path, monkeypatch):
    import random

    from helpers import WORDS, sentence

    prepared = tmp_path / "prepared"
    (prepared / "data").mkdir(parents=True)
    rng = random.Random(0)
    rows = [{"text": sentence(rng, topic, rng.randint(1, 30)), "label": topic} for topic in list(WORDS) * 16]
    write_rows(prepared / "data" / "fortunes.csv", rows)
    write_minilm(prepared / "minilm")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    arm = "train.py, CUDA graphs"
    output = tmp_path / "out"
    argv = ["--prepared", str(prepared), "--output", str(output), "--dry-run", "--skip-checks", "--epochs"]
    assert gpu.main([*argv, "--groups", "--arms", arm]) == 0  # no timed group: the epoch only
    records = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    runs = [record for record in records if record["kind"] in ("run", "epoch")]
    assert [(record["kind"], record["arm"]) for record in runs] == [("epoch", arm)]
    # one graph per length bucket (the dry run's two), compiled before the first step, none more in the epoch
    assert runs[0].get("graphs") == 2, runs[0].get("error")
    epoch = runs[0]
    assert (
        epoch["steps"] == min(len(rows), 64) // 4
        and epoch["epoch_seconds"] >= epoch["first_step_seconds"] > 0
    )
    report = (output / "report.md").read_text()
    assert "## Compilation" in report and "## One whole epoch" in report
