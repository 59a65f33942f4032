"""Serving a pooled classifier: vLLM with the pooled_models plugin against transformers' pipeline and train.py's
prediction path, on the same checkpoint and the same Debian fortunes quotations, in one run, each called as a user
calls it (defaults, no settings passed by hand).

The checkpoint: the packaged all-MiniLM-L6-v2 (``--backbone minilm|mpnet|PATH``: another, see bench/backbones.py) with a
weighted-layer pooling (mean of each layer) and a dense head, one label per fortunes topic, its head drawn at random
with a fixed seed and large enough weights that the labels are well apart (an untrained head's near-equal scores would
make "the same label" a coin toss); or ``--model FOLDER``, a checkpoint train.py saved. The texts: the first N fortunes
quotations (bench/corpora/fortunes.py: every split, in its fixed order) that fit the backbone's 256 tokens, so that no
side truncates.

Offline, in this process (one untimed warm-up call each, then ``--rounds`` timed rounds, the order alternating):

- ``LLM(model=folder, runner="pooling", enforce_eager=True, dtype="float32").classify(texts)``;
- ``pipeline("text-classification", model=folder, top_k=None)(texts)``;
- train.py's prediction path: ``train.py --model_name_or_path folder --test_file texts.csv --do_predict``, through its
  ``main`` in this process, which writes predictions.jsonl.

Each side's texts/s; the ratios are vLLM's over the others' (above 1.0: vLLM serves more texts per second), the
median over rounds. Before any timing, vLLM's scores must equal the pipeline's (1e-4) with the same top label.

Online: the OpenAI-compatible server (the command docs/serving.md prints, ``python -m
vllm.entrypoints.launchers.api_server.entry ... --runner pooling`` on 127.0.0.1), under bounded load: ``--clients``
threads each sending ``--requests`` /classify requests of one text, one after the other. Reported: p50 and p99
latency, requests/s over the whole load, failed requests (must be 0) and answers whose label differs from
transformers' (must be 0).

    python bench/serving.py                                          # 1,000 texts, 8 clients x 50 requests, 3 rounds
    python bench/serving.py --texts 40 --clients 2 --requests 5 --rounds 1 --output /tmp/serving-check   # it runs
    python bench/serving.py --backbone mpnet --output bench/results/mpnet/serving   # all-mpnet-base-v2

Runs in the venv ``make test-vllm`` builds (vLLM pins its own transformers); ``make bench-serving`` runs it there.
Writes report.md and results.json to ``--output`` (default bench/results/serving). Exit status 0 when the scores and
labels are equal and no request failed, else 1.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from backbones import MINILM, add_backbone_argument, backbone_name, resolve_backbone  # noqa: E402  (standard library)
from corpora.fortunes import FortunesMissing, build_fortunes  # noqa: E402  (bench/ is on sys.path: this folder)
from transformers import AutoTokenizer, pipeline  # noqa: E402
from vllm_server import Server  # noqa: E402

from pooled_models import PooledConfig, PooledForSequenceClassification  # noqa: E402

PROGRAM = "bench/serving.py"
TOLERANCE = 1e-4
MAX_TOKENS = 256  # the packaged MiniLM folder's max_seq_length (kept for any --backbone)
ENGINE = {"runner": "pooling", "enforce_eager": True, "dtype": "float32"}
HEAD_SCALE = 1.0  # the std of the random head's weights: labels well apart


def fortunes_texts(count: int, tokenizer) -> tuple[list[str], list[str]]:
    """The first ``count`` quotations that fit MAX_TOKENS, and the topics (every split, in the corpus's order)."""
    try:
        splits = build_fortunes()
    except FortunesMissing as error:
        sys.exit(f"{PROGRAM}: {error}")
    rows = [row for name in ("train", "validation", "test") for row in splits[name]]
    topics = sorted({row["label"] for row in rows})
    texts = [row["text"] for row in rows if len(tokenizer(row["text"])["input_ids"]) <= MAX_TOKENS][:count]
    if len(texts) < count:
        sys.exit(f"{PROGRAM}: only {len(texts)} fortunes quotations fit {MAX_TOKENS} tokens; ask for fewer.")
    return texts, topics


def build_checkpoint(folder: Path, topics: list[str], tokenizer, backbone: str) -> Path:
    """The checkpoint on ``backbone`` (a model folder), saved with ``tokenizer`` in ``folder``."""
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        backbone,
        pooling="weighted_layer",
        layer_token_pooling="mean",
        classifier_head="dense",
        id2label=dict(enumerate(topics)),
        # as a trained classifier's config has it (train.py --do_predict on a checkpoint without a problem type and
        # a test file without labels fails in its predictions writer)
        problem_type="single_label_classification",
    )
    with torch.no_grad():
        for parameter in model.classifier.head.parameters():
            parameter.normal_(std=HEAD_SCALE)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# -- the three offline paths ---------------------------------------------------------------------------------------


class VllmOffline:
    name = "vLLM LLM.classify"

    def __init__(self, folder: Path):
        from vllm import LLM

        self.llm = LLM(model=str(folder), **ENGINE)

    def scores(self, texts: list[str]) -> list[list[float]]:
        return [output.outputs.probs for output in self.llm.classify(texts, use_tqdm=False)]

    def close(self) -> None:
        from vllm.distributed import cleanup_dist_env_and_memory

        del self.llm
        gc.collect()
        cleanup_dist_env_and_memory()


class Pipeline:
    name = 'pipeline("text-classification")'

    def __init__(self, folder: Path, labels: list[str]):
        self.classify = pipeline("text-classification", model=str(folder), top_k=None)
        self.labels = labels

    def scores(self, texts: list[str]) -> list[list[float]]:
        results = self.classify(texts)
        return [
            [{item["label"]: item["score"] for item in row}[label] for label in self.labels]
            for row in results
        ]


class TrainPredict:
    name = "train.py --do_predict"

    def __init__(self, folder: Path, work: Path):
        self.folder = folder
        self.work = work

    def scores(self, texts: list[str]) -> None:
        from pooled_models.train.cli import main

        data = self.work / "texts.csv"
        with open(data, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text"])
            writer.writerows([text] for text in texts)
        output = self.work / "predictions"
        argv = ["--model_name_or_path", str(self.folder), "--test_file", str(data), "--do_predict"]
        argv += ["--output_dir", str(output), "--overwrite_output_dir"]
        if main(argv) != 0:
            sys.exit(f"{PROGRAM}: train.py --do_predict failed")
        if not (output / "predictions.jsonl").is_file():
            sys.exit(f"{PROGRAM}: train.py --do_predict wrote no predictions.jsonl in {output}")


def timed(side, texts: list[str]) -> float:
    start = time.perf_counter()
    side.scores(texts)
    return time.perf_counter() - start


def offline(folder: Path, texts: list[str], labels: list[str], rounds: int, work: Path) -> dict:
    served = VllmOffline(folder)
    peers = [Pipeline(folder, labels), TrainPredict(folder, work)]
    vllm_scores = torch.tensor(served.scores(texts))
    pipeline_scores = torch.tensor(peers[0].scores(texts))
    difference = float((vllm_scores - pipeline_scores).abs().max())
    same_labels = int((vllm_scores.argmax(-1) == pipeline_scores.argmax(-1)).sum())
    peers[1].scores(texts[:8])  # warm-up of train.py's path (its first run imports the Trainer)
    seconds: dict[str, list[float]] = {side.name: [] for side in (served, *peers)}
    for round_index in range(rounds):
        order = [served, *peers] if round_index % 2 == 0 else [*peers, served]
        for side in order:
            seconds[side.name].append(timed(side, texts))
    served.close()
    per_second = {name: len(texts) / statistics.median(times) for name, times in seconds.items()}
    ratios = {
        peer.name: statistics.median(
            theirs / ours for ours, theirs in zip(seconds[served.name], seconds[peer.name], strict=True)
        )
        for peer in peers
    }
    return {
        "texts_per_second": per_second,
        "vllm_speedup": ratios,
        "seconds": seconds,
        "max_score_difference": difference,
        "same_top_label": same_labels,
        "expected_labels": [labels[int(index)] for index in pipeline_scores.argmax(-1)],
    }


# -- the HTTP server under bounded load ----------------------------------------------------------------------------


def online(
    folder: Path, texts: list[str], expected: list[str], clients: int, requests: int, log: Path
) -> dict:
    latencies: list[float] = []
    failures: list[str] = []
    wrong = 0
    lock = threading.Lock()

    with Server(folder, log) as server:
        server.post("/classify", {"input": texts[:2]})  # warm-up, untimed

        def client(index: int) -> None:
            nonlocal wrong
            for request in range(requests):
                row = (index * requests + request) % len(texts)
                start = time.perf_counter()
                try:
                    answer = server.post("/classify", {"input": [texts[row]]})
                    label = answer["data"][0]["label"]
                except Exception as error:  # a failed request is counted and reported, not raised
                    with lock:
                        failures.append(f"{type(error).__name__}: {error}")
                    continue
                with lock:
                    latencies.append(time.perf_counter() - start)
                    wrong += label != expected[row]

        start = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(client, range(clients)))
        elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "clients": clients,
        "requests_per_client": requests,
        "requests": clients * requests,
        "failed": len(failures),
        "failures": failures[:5],
        "wrong_labels": wrong,
        "p50_ms": 1000 * percentile(latencies, 50),
        "p99_ms": 1000 * percentile(latencies, 99),
        "requests_per_second": len(latencies) / elapsed,
    }


def percentile(values: list[float], percent: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, round(percent / 100 * (len(values) - 1)))]


# -- report ---------------------------------------------------------------------------------------------------------


def described(backbone: str) -> str:
    """The built checkpoint's backbone as the report names it (the packaged all-MiniLM-L6-v2, as stored)."""
    return "packaged all-MiniLM-L6-v2" if backbone == MINILM else backbone_name(backbone)


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, no GPU"


def speed_rows(texts_per_second: dict[str, float], speedups: dict[str, float]) -> list[str]:
    """A markdown row per path: its texts per second and the measured side's speed-up over it (blank for itself)."""
    rows = []
    for name, rate in texts_per_second.items():
        ratio = speedups.get(name)
        rows.append(f"| {name} | {rate:.1f} | {'' if ratio is None else f'{ratio:.2f}x'} |")
    return rows


def report_markdown(results: dict) -> str:
    settings, offline_results, online_results = results["settings"], results["offline"], results["online"]
    lines = [
        "# Serving: vLLM with the pooled_models plugin against transformers",
        "",
        f"Written by `{results['command']}` ({PROGRAM}); machine: {results['machine']}; vLLM {results['versions']['vllm']}, "
        f"transformers {results['versions']['transformers']}, torch {results['versions']['torch']}. GPU figures were not "
        "taken.",
        "",
        f"Checkpoint: {settings['model']}. Texts: {settings['texts']} Debian fortunes quotations of at most "
        f"{MAX_TOKENS} tokens. Offline: {settings['rounds']} rounds, the median.",
        "",
        "## Offline throughput (same process, same texts)",
        "",
        "| path | texts/s | vLLM's speed-up over it |",
        "| --- | ---: | ---: |",
    ]
    lines += speed_rows(offline_results["texts_per_second"], offline_results["vllm_speedup"])
    lines += [
        "",
        f"vLLM's scores against the pipeline's: largest difference {offline_results['max_score_difference']:.1e}; "
        f"same top label on {offline_results['same_top_label']}/{settings['texts']} texts.",
        "",
        "## HTTP server under bounded load (/classify, one text per request)",
        "",
        "| clients x requests | p50 latency | p99 latency | requests/s | failed | labels unlike transformers' |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        f"| {online_results['clients']} x {online_results['requests_per_client']} | {online_results['p50_ms']:.1f} ms | "
        f"{online_results['p99_ms']:.1f} ms | {online_results['requests_per_second']:.1f} | {online_results['failed']} | "
        f"{online_results['wrong_labels']} |",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=1000, help="fortunes quotations to classify")
    parser.add_argument("--rounds", type=int, default=3, help="timed offline rounds (the median is reported)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients")
    parser.add_argument(
        "--requests", type=int, default=50, help="requests each client sends, one after the other"
    )
    parser.add_argument("--model", type=Path, help="a pooled classifier folder (default: built, see above)")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results" / "serving")
    add_backbone_argument(parser)
    args = parser.parse_args(argv)

    import transformers
    import vllm

    backbone = resolve_backbone(PROGRAM, args.backbone)
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    texts, topics = fortunes_texts(args.texts, tokenizer)
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as scratch:
        work = Path(scratch)
        if args.model is None:
            folder = build_checkpoint(work / "model", topics, tokenizer, backbone)
            model = f"{described(args.backbone)}, weighted_layer pooling (mean of each layer), dense head, random head"
        else:
            folder, model = args.model, str(args.model)
        config = PooledConfig.from_pretrained(folder)
        labels = [config.id2label[index] for index in range(config.num_labels)]
        offline_results = offline(folder, texts, labels, args.rounds, work)
        online_results = online(
            folder,
            texts,
            offline_results.pop("expected_labels"),
            args.clients,
            args.requests,
            work / "server.log",
        )
    results = {
        "command": "python bench/serving.py"
        + "".join(f" {arg}" for arg in (argv if argv is not None else sys.argv[1:])),
        "machine": machine(),
        "versions": {
            "vllm": vllm.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        },
        "settings": {"texts": len(texts), "rounds": args.rounds, "model": model},
        "offline": offline_results,
        "online": online_results,
    }
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.output / "report.md").write_text(report_markdown(results))
    print(report_markdown(results))
    equal = offline_results["max_score_difference"] <= TOLERANCE and offline_results["same_top_label"] == len(
        texts
    )
    ok = equal and online_results["failed"] == 0 and online_results["wrong_labels"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
