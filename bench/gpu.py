"""Training on a CUDA GPU: train.py against a plain Trainer and a Trainer with length grouping, on base-size
backbones and real text lengths, in bf16. Real (attention-mask) tokens per second, peak GPU memory, time to the
first step and model FLOPs utilisation, with parity and host-synchronisation checks first.

    python bench/gpu_prepare.py --output .gpu                  # on a machine with Debian's data (CPU is fine)
    python bench/gpu.py --prepared .gpu --output OUT            # on the GPU machine: OUT/report.md, OUT/results.jsonl
    python bench/gpu.py --prepared .gpu --output OUT --dry-run  # the plumbing on a CPU, tiny sizes (never figures)
    python bench/gpu.py --prepared .gpu --output OUT --epochs   # also whole epochs, compilation included

On a machine without CUDA (and without --dry-run) it says so in one line and exits 0.

Data (bench/gpu_prepare.py): Debian fortunes quotations (mostly short, a long tail) and Debian package descriptions
(short and long description), each at max length 512 and 128, and one set of texts all cut to exactly 128 tokens.
Backbones and runs: bench/gpu_arms.py. Each (backbone, data) group runs its arms in a shuffled order; every run
times ``--steps`` steps after ``--warmup`` steps. A run's ratio is against the plain Trainer (and the grouped one) of
its own group, on the same GPU in the same call. Groups run in priority order until ``--deadline`` seconds are spent;
the report says which did not run (``--groups`` and ``--arms`` choose some). Compiled runs report the graphs dynamo
compiled (one per length bucket) and inductor's CUDA-graph counters; the checks compare the compiled step with the
eager one (logits, gradients, a few hundred steps of loss). Model FLOPs utilisation: 6 x parameters (those a token multiplies, embeddings
left out) x real tokens/s over the GPU's dense bf16 peak.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import torch  # noqa: E402
from gpu_arms import ARMS  # noqa: E402

PROGRAM = "bench/gpu.py"
# Dense bf16 peaks from the datasheets (TFLOP/s); other GPUs: a measured 8192^3 matrix product.
BF16_PEAKS = {"H100": 989.4, "H200": 989.4, "A100": 312.0, "L40S": 362.1}
BACKBONES = ("minilm", "bert-base", "modernbert-base", "deberta-v3-base", "qwen3-0.6b")
ALL_PADDED = ("trainer", "trainer, grouped", "train.py, padded")
PADDED_AND_FREE = (*ALL_PADDED, "train.py, padding-free")
WITH_BUDGET = (*PADDED_AND_FREE, "train.py, token budget")
COMPILED = ("train.py, compiled", "train.py, CUDA graphs")
# The runs of issue 47's goals: the two Trainers, train.py padded to each batch's longest text and to length
# buckets (its GPU default), compiled on the buckets, and CUDA graphs over the buckets.
HOST_BOUND = ("trainer", "trainer, grouped", "train.py, padded", "train.py, buckets", *COMPILED)
# train.py's flags per arm (the token budget's depends on the data: run_arm works it out). Compiled runs pad to the
# length buckets (train.py's GPU default), so the compiled model meets a few shapes, each compiled once before the
# first step; CUDA graphs are torch.compile's reduce-overhead mode (one graph recorded per bucket).
COMPILE = ["--torch_compile", "true", "--pad_to_buckets", "true"]
TRAIN_PY_FLAGS = {
    "train.py, padded": ["--padding_free", "false", "--pad_to_buckets", "false"],
    "train.py, buckets": ["--padding_free", "false", "--pad_to_buckets", "true"],
    "train.py, padding-free": ["--padding_free", "true"],
    "train.py, compiled": COMPILE,
    "train.py, CUDA graphs": [*COMPILE, "--torch_compile_mode", "reduce-overhead"],
}
# A dry run on the CPU compiles with dynamo's eager backend (it traces and counts graphs, but generates no code) and
# without CUDA graphs (there are none on a CPU), on two buckets: the plumbing only.
DRY_RUN_COMPILE = ["--torch_compile_backend", "eager", "--length_buckets", "2"]
# (backbone, data, max length, arms): the order runs go in while the deadline allows. The first call on a lent H200
# (bench/results/gpu/h200) found every step bound by the host, not the GPU: issue 47's goals come first (the
# compiled and CUDA-graph runs over length buckets, on fortunes at 512 and 128 and on data of one length), then
# the other backbones and the padding-free runs of issue 40.
GROUPS = [
    ("bert-base", "fortunes", 512, HOST_BOUND),
    ("modernbert-base", "fortunes", 512, HOST_BOUND),
    ("minilm", "fortunes", 128, HOST_BOUND),
    ("bert-base", "uniform", 128, HOST_BOUND),
    ("bert-base", "debtags", 512, HOST_BOUND),
    ("deberta-v3-base", "fortunes", 512, HOST_BOUND),
    ("qwen3-0.6b", "fortunes", 512, HOST_BOUND),
    ("bert-base", "fortunes", 512, WITH_BUDGET),
    ("minilm", "fortunes", 128, WITH_BUDGET),
    ("bert-base", "debtags", 512, WITH_BUDGET),
    ("qwen3-0.6b", "debtags", 512, PADDED_AND_FREE),
    ("modernbert-base", "debtags", 512, PADDED_AND_FREE),
    ("deberta-v3-base", "debtags", 512, PADDED_AND_FREE),
    ("bert-base", "uniform", 128, PADDED_AND_FREE),
    ("bert-base", "debtags", 128, PADDED_AND_FREE),
    ("minilm", "debtags", 512, PADDED_AND_FREE),
]
# Whole epochs (--epochs): the wall time of one epoch of the group's rows from the run's start, loading, tokenizing
# and compiling included, not only the steady state.
EPOCH_GROUPS = [
    ("bert-base", "fortunes", 512, ("trainer", "trainer, grouped", "train.py, buckets", *COMPILED))
]
PARITY = ("minilm", "bert-base", "modernbert-base", "qwen3-0.6b")
# The compiled step against the eager one (gpu_checks.compiled_parity).
COMPILED_PARITY = ("minilm", "bert-base", "modernbert-base")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prepared", type=Path, required=True, help="bench/gpu_prepare.py's folder")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--deadline", type=float, default=430.0, help="seconds after which no group starts")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16, help="train.py's default batch size")
    parser.add_argument("--groups", type=int, nargs="*", help="run only these groups (indices into GROUPS)")
    parser.add_argument("--arms", nargs="*", choices=ARMS, help="run only these arms of the groups")
    parser.add_argument("--skip-checks", action="store_true", help="no parity or host-synchronisation checks")
    parser.add_argument(
        "--epochs", action="store_true", help="also time whole epochs (EPOCH_GROUPS), after the groups"
    )
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on any device: the plumbing only")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() and not args.dry_run:
        print(f"{PROGRAM}: no CUDA device on this machine (torch {torch.__version__}); nothing measured.")
        return 0
    if args.dry_run:
        args.steps, args.warmup, args.batch_size = 3, 2, 4
    args.output.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    bench = Bench(args, started)
    bench.environment()
    if not args.skip_checks:
        bench.checks()
    chosen = GROUPS if args.groups is None else [GROUPS[index] for index in args.groups]
    chosen = [(*group[:3], _only(group[3], args.arms)) for group in chosen]
    for group in chosen:
        if time.perf_counter() - started > args.deadline:
            bench.skipped(group)
            continue
        bench.run_group(*group)
        bench.write_report()
    for group in [(*group[:3], _only(group[3], args.arms)) for group in EPOCH_GROUPS] if args.epochs else []:
        if time.perf_counter() - started > args.deadline:
            bench.skipped(group, kind="epoch")
            continue
        bench.run_group(*group, kind="epoch")
        bench.write_report()
    bench.write_report()
    print((args.output / "report.md").read_text())
    return 0


class Bench:
    def __init__(self, args, started: float):
        self.args, self.started = args, started
        self.results: list[dict] = []
        self.facts: dict = {}
        self.backbones: dict[str, Path] = {}
        self.scratch = Path(os.environ.get("TMPDIR", "/tmp")) / "pooled_gpu_bench"
        self.rows = {}

    # -- set-up ---------------------------------------------------------------------------------------------

    def environment(self) -> None:
        import transformers

        from pooled_models.modeling.varlen_attention import varlen_kernel

        kernel = varlen_kernel()
        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (dry run)"
        self.facts = {
            "device": name,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "varlen_attn": None if kernel is None else str(__import__("inspect").signature(kernel)),
            "bf16_peak_tflops": self._peak(name),
            "steps": self.args.steps,
            "warmup": self.args.warmup,
            "batch_size": self.args.batch_size,
        }
        self._log("environment", self.facts)

    def _peak(self, name: str) -> float:
        for key, value in BF16_PEAKS.items():
            if key in name:
                return value
        if not torch.cuda.is_available():
            return 1.0
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            a @ a
        torch.cuda.synchronize()
        begun = time.perf_counter()
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
        return 10 * 2 * 8192**3 / (time.perf_counter() - begun) / 1e12

    def backbone(self, name: str) -> Path:
        if name not in self.backbones:
            from gpu_arms import build_backbones

            built = build_backbones(
                self.args.prepared / "minilm", self.scratch / "backbones", [name], shrink=self.args.dry_run
            )
            self.backbones.update(built)
        return self.backbones[name]

    def data(self, name: str, max_length: int) -> tuple[Path, list[dict]]:
        """The group's training file and rows (written once per data set and length)."""
        from gpu_arms import read_rows, uniform_rows
        from transformers import AutoTokenizer

        key = (name, max_length)
        if key not in self.rows:
            source = "debtags" if name == "uniform" else name
            rows = read_rows(self.args.prepared / "data" / f"{source}.csv")
            if name == "uniform":
                rows = uniform_rows(
                    rows, AutoTokenizer.from_pretrained(self.args.prepared / "minilm"), max_length
                )
            needed = (self.args.warmup + self.args.steps) * self.args.batch_size * 2
            rows = rows[: max(needed, 64)]
            path = self.scratch / "data" / f"{name}_{max_length}.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_csv(path, rows)
            self.rows[key] = (path, rows)
        return self.rows[key]

    # -- checks ---------------------------------------------------------------------------------------------

    def checks(self) -> None:
        from gpu_checks import compiled_parity, parity

        _, rows = self.data("debtags", 512)
        texts = [row["text"] for row in rows]
        for name in PARITY:
            pooling = "last_token" if name.startswith("qwen") else "mean"
            device = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run's plumbing
            try:
                figures = parity(str(self.backbone(name)), texts, pooling, 512, device)
                self._log("parity", {"backbone": name, "pooling": pooling, **figures})
            except Exception as error:  # a check that fails is reported; the timings still run
                self._log("parity", {"backbone": name, "error": _error(error)})
        # A dry run checks the plumbing on one (shrunk) backbone: dynamo traces each model afresh.
        for name in COMPILED_PARITY[1:2] if self.args.dry_run else COMPILED_PARITY:
            try:
                figures = compiled_parity(str(self.backbone(name)), texts, 512, dry_run=self.args.dry_run)
                self._log("compiled_parity", {"backbone": name, **figures})
            except Exception as error:
                self._log("compiled_parity", {"backbone": name, "error": _error(error)})
        self.sync_counts()

    def sync_counts(self) -> None:
        from gpu_arms import run_train_py, run_trainer
        from gpu_checks import SyncCounter

        if not torch.cuda.is_available():
            self._log("syncs", {"skipped": "no CUDA (dry run)"})
            return
        spec = self._spec("minilm", "fortunes", 128, "syncs")
        # train.py's defaults on a GPU (padded to length buckets, MiniLM's steps being short), and compiled with
        # CUDA graphs over the buckets.
        runs = {"train.py": [], "train.py, CUDA graphs": TRAIN_PY_FLAGS["train.py, CUDA graphs"]}
        for who in ("trainer", *runs):
            counter = SyncCounter()
            try:
                if who == "trainer":
                    run_trainer(spec, False, (2, 100), callbacks=[counter])
                else:
                    run_train_py(spec, runs[who], (2, 100), callbacks=[counter])
                self._log("syncs", {"who": who, **counter.figures()})
            except Exception as error:
                self._log("syncs", {"who": who, "error": _error(error)})

    # -- timed runs -----------------------------------------------------------------------------------------

    def _spec(self, backbone: str, data: str, max_length: int, arm: str) -> dict:
        path, rows = self.data(data, max_length)
        slug = arm.replace(", ", "_").replace(".", "").replace(" ", "_")
        return {
            "backbone": self.backbone(backbone),
            "rows": rows,
            "train_file": path,
            "max_length": max_length,
            "batch_size": self.args.batch_size,
            "seed": 42,
            "bf16": torch.cuda.is_available(),
            "output_dir": self.scratch / "runs" / f"{backbone}_{data}_{max_length}_{slug}_{time.time_ns()}",
        }

    def run_group(
        self, backbone: str, data: str, max_length: int, arms: tuple[str, ...], kind: str = "run"
    ) -> None:
        order = random.Random(f"{backbone}{data}{max_length}").sample(list(arms), len(arms))
        for arm in order:
            record = {"group": f"{backbone}, {data}, {max_length}", "arm": arm}
            try:
                record.update(self.run_arm(backbone, data, max_length, arm, epoch=kind == "epoch"))
            except Exception as error:
                record["error"] = _error(error)
            self._log(kind, record)
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    def run_arm(self, backbone: str, data: str, max_length: int, arm: str, epoch: bool = False) -> dict:
        from gpu_arms import compile_counts, mean_length, run_train_py, run_trainer
        from transformers import AutoTokenizer

        spec = self._spec(backbone, data, max_length, arm)
        spec["epoch"] = epoch
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        torch._dynamo.reset()  # every run compiles afresh, and its graphs are counted alone
        torch._dynamo.utils.counters.clear()
        clock_args = (self.args.warmup, self.args.steps)
        if arm.startswith("trainer"):
            clock, attention = run_trainer(spec, arm == "trainer, grouped", clock_args)
        else:
            flags = TRAIN_PY_FLAGS.get(arm)
            if arm == "train.py, token budget":
                tokenizer = AutoTokenizer.from_pretrained(spec["backbone"])
                budget = round(self.args.batch_size * mean_length(spec["rows"], tokenizer, max_length))
                flags = ["--max_tokens_per_batch", str(budget), "--padding_free", "true"]
            if self.args.dry_run and arm in COMPILED:
                flags = [*flags, *DRY_RUN_COMPILE]
            forced = self.args.dry_run and arm in ("train.py, padding-free", "train.py, token budget")
            with _padding_free_forced(
                forced
            ):  # on the CPU: the flat path, attention by its per-text reference
                clock, attention = run_train_py(spec, flags, clock_args)
        figures = clock.figures()
        peak = self.facts["bf16_peak_tflops"] * 1e12
        figures["mfu"] = 6 * figures["matmul_parameters"] * figures["tokens_per_second"] / peak
        return {"attention": attention, **figures, **compile_counts()}

    def skipped(self, group, kind: str = "run") -> None:
        backbone, data, max_length, arms = group
        for arm in arms:
            self._log(
                kind,
                {"group": f"{backbone}, {data}, {max_length}", "arm": arm, "error": "not run: deadline"},
            )

    # -- output ---------------------------------------------------------------------------------------------

    def _log(self, kind: str, record: dict) -> None:
        record = {"kind": kind, "elapsed": round(time.perf_counter() - self.started, 1), **record}
        self.results.append(record)
        with open(self.args.output / "results.jsonl", "a") as handle:
            handle.write(json.dumps(record, default=str) + "\n")
        print(json.dumps(record, default=str), flush=True)

    def write_report(self) -> None:
        from gpu_report import render

        (self.args.output / "report.md").write_text(render(self.results))


def _only(arms: tuple[str, ...], chosen: list[str] | None) -> tuple[str, ...]:
    return arms if chosen is None else tuple(arm for arm in arms if arm in chosen)


@contextlib.contextmanager
def _padding_free_forced(forced: bool):
    import pooled_models.train.batch_layout as layout

    original = layout.padding_free_refusal
    if forced:
        layout.padding_free_refusal = lambda args, model, kinds: None
    try:
        yield
    finally:
        layout.padding_free_refusal = original


def _write_csv(path: Path, rows: list[dict]) -> None:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows(rows)


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error} | " + " / ".join(
        line.strip() for line in traceback.format_exc().splitlines()[-6:]
    )


if __name__ == "__main__":
    sys.exit(main())
