"""Serving a document model: windows per second through vLLM's ``/classify`` on a document classifier (the plugin sends
every window of a document as a prompt and pools them across, pooled_models/serving/document_route.py) against the same
checkpoint without document mode (the truncated model) on ``/classify``, sent the very same windows as prompts of
their own (token ids). Issue 46's goal: at least 0.9x the truncated model's windows per second.

The checkpoint: the packaged all-MiniLM-L6-v2 (``--backbone minilm|mpnet|PATH``: another, see bench/backbones.py; the
report then names it), mean pooling, ``document_window=256`` (MiniLM's length) with the default stride (32), the
cross-window pooling ``--pooling`` (default transformer), one label per fortunes topic, its head and cross-window pooler
drawn at random with a fixed seed. The truncated model: the same checkpoint loaded with ``document_window=None`` and
saved (``from_pretrained(folder, document_window=None)``). The documents: Debian fortunes quotations
(bench/corpora/fortunes.py, every split in its fixed order) joined until each runs past ``--tokens`` tokens.

Both servers are started with the command docs/serving.md prints (bench/vllm_server.py, 127.0.0.1). Before any timing,
the document server's scores must equal ``pipeline("text-classification")``'s on the first documents (1e-4). Timed:
``--clients`` threads each sending ``--requests`` requests of one document (document side: its text; truncated side:
its windows' token ids, one prompt each), ``--rounds`` rounds, the sides alternating first; windows per second over
the whole load, the median over rounds, and the ratio document / truncated.

    python bench/serving_documents.py                       # 64 documents of 2,000 tokens, 4 clients x 16, 3 rounds
    python bench/serving_documents.py --documents 4 --clients 2 --requests 2 --rounds 1 --output /tmp/docs-check
    python bench/serving_documents.py --backbone mpnet --output bench/results/mpnet/serving_documents

Runs in the venv ``make test-vllm`` builds. Writes report.md and results.json to ``--output`` (default
bench/results/serving_documents). Exit status 0 when the scores are equal and no request failed, else 1. Time it on a
machine nothing else loads.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from backbones import MINILM, add_backbone_argument, backbone_name, resolve_backbone  # noqa: E402  (standard library)
from corpora.fortunes import FortunesMissing, build_fortunes  # noqa: E402  (bench/ is on sys.path: this folder)
from serving import machine, percentile  # noqa: E402
from transformers import AutoTokenizer, pipeline  # noqa: E402
from vllm_server import Server  # noqa: E402

from pooled_models import PooledForSequenceClassification, tokenize_documents  # noqa: E402

PROGRAM = "bench/serving_documents.py"
TOLERANCE = 1e-4
WINDOW = 256  # the packaged MiniLM folder's max_seq_length (kept for any --backbone)
CHECKED = 4  # documents compared with the pipeline before timing


def documents(count: int, tokens: int, tokenizer) -> tuple[list[str], list[str]]:
    """``count`` documents of fortunes quotations joined past ``tokens`` tokens each, and the topics."""
    try:
        splits = build_fortunes()
    except FortunesMissing as error:
        sys.exit(f"{PROGRAM}: {error}")
    rows = [row for name in ("train", "validation", "test") for row in splits[name]]
    built, current = [], []
    for row in rows:
        current.append(row["text"])
        if len(tokenizer("\n".join(current))["input_ids"]) > tokens:
            built.append("\n".join(current))
            current = []
            if len(built) == count:
                return built, sorted({row["label"] for row in rows})
    sys.exit(f"{PROGRAM}: the corpus makes only {len(built)} documents of {tokens} tokens; ask for fewer.")


def build_checkpoints(
    work: Path, topics: list[str], pooling: str, tokenizer, backbone: str
) -> tuple[Path, Path]:
    """The document classifier on ``backbone`` (a model folder) and the same checkpoint without document mode."""
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        backbone,
        pooling="mean",
        id2label=dict(enumerate(topics)),
        problem_type="single_label_classification",
        document_window=WINDOW,
        document_pooling=pooling,
    )
    with torch.no_grad():
        for parameter in model.classifier.head.parameters():
            parameter.normal_(std=1.0)
        for parameter in model.classifier.document_pooler.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    folders = work / "document", work / "truncated"
    model.save_pretrained(folders[0])
    PooledForSequenceClassification.from_pretrained(folders[0], document_window=None).save_pretrained(
        folders[1]
    )
    for folder in folders:
        tokenizer.save_pretrained(folder)
    return folders


def check_scores(server: Server, texts: list[str]) -> float:
    """The largest difference between the document server's scores and the pipeline's."""
    expected = pipeline("text-classification", model=str(server.folder), top_k=None)(texts)
    labels = [entry["label"] for entry in sorted(expected[0], key=lambda entry: entry["label"])]
    served = server.post("/classify", {"input": texts})["data"]
    config = json.loads((server.folder / "config.json").read_text())
    names = [config["id2label"][str(index)] for index in range(len(config["id2label"]))]
    worst = 0.0
    for row, item in zip(expected, served, strict=True):
        want = {entry["label"]: entry["score"] for entry in row}
        got = dict(zip(names, item["probs"], strict=True))
        worst = max(worst, *(abs(want[label] - got[label]) for label in labels))
    return worst


def load(server: Server, bodies: list[dict], clients: int, requests: int) -> dict:
    """Send the bodies (client i, request r: body (i * requests + r) mod len) and time the whole load."""
    latencies, failures = [], []

    def client(index: int) -> None:
        for request in range(requests):
            start = time.perf_counter()
            status, answer = server.send("/classify", bodies[(index * requests + request) % len(bodies)])
            if status != 200:
                failures.append(f"{status}: {str(answer)[:200]}")
                continue
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return {"seconds": time.perf_counter() - start, "latencies": sorted(latencies), "failures": failures}


def measure(servers: dict[str, Server], bodies: dict[str, list[dict]], windows: list[int], args) -> dict:
    sent = sum(
        windows[(i * args.requests + r) % len(windows)]
        for i in range(args.clients)
        for r in range(args.requests)
    )
    rounds: dict[str, list[dict]] = {name: [] for name in servers}
    for round_index in range(args.rounds):
        order = list(servers) if round_index % 2 == 0 else list(reversed(servers))
        for name in order:
            servers[name].send("/classify", bodies[name][0])  # warm-up, untimed
            rounds[name].append(load(servers[name], bodies[name], args.clients, args.requests))
    results = {}
    for name, runs in rounds.items():
        rates = [sent / run["seconds"] for run in runs]
        latencies = sorted(value for run in runs for value in run["latencies"])
        results[name] = {
            "windows_per_second": statistics.median(rates),
            "rounds": rates,
            "p50_ms": 1000 * percentile(latencies, 50),
            "p99_ms": 1000 * percentile(latencies, 99),
            "failed": sum(len(run["failures"]) for run in runs),
            "failures": [failure for run in runs for failure in run["failures"]][:5],
        }
    results["ratio"] = results["document"]["windows_per_second"] / results["truncated"]["windows_per_second"]
    return results


def report_markdown(results: dict) -> str:
    rows = [
        f"| {name} | {results[name]['windows_per_second']:.1f} | {results[name]['p50_ms']:.0f} | "
        f"{results[name]['p99_ms']:.0f} | {results[name]['failed']} |"
        for name in ("document", "truncated")
    ]
    return "\n".join(
        [
            "# Serving a document model: windows per second",
            "",
            f"Command: `{results['command']}`",
            f"Machine: {results['machine']}. {results['documents']} documents of about {results['tokens']} tokens "
            f"({results['mean_windows']:.1f} windows of {WINDOW} tokens each on average), cross-window pooling "
            f"{results['pooling']}; {results['clients']} clients x {results['requests']} requests, "
            f"{results['rounds_run']} rounds (median).",
            *([f"Backbone: {backbone_name(results['backbone'])}."] if "backbone" in results else []),
            f"Scores equal to the pipeline's before timing: largest difference {results['max_difference']:.2e}.",
            "",
            "| served | windows/s | p50 ms | p99 ms | failed |",
            "|---|---|---|---|---|",
            *rows,
            "",
            f"Document route / truncated model: **{results['ratio']:.2f}x** windows per second (goal: 0.9x).",
            "",
        ]
    )


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=2000, help="each document runs past this many tokens")
    parser.add_argument(
        "--pooling", default="transformer", help="the cross-window pooling (document_pooling)"
    )
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=16, help="requests per client, one document each")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results" / "serving_documents")
    add_backbone_argument(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    backbone = resolve_backbone(PROGRAM, args.backbone)
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    texts, topics = documents(args.documents, args.tokens, tokenizer)
    args.output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        document_folder, truncated_folder = build_checkpoints(
            Path(work), topics, args.pooling, tokenizer, backbone
        )
        windows = tokenize_documents(tokenizer, texts, WINDOW, WINDOW // 8)["input_ids"]
        bodies = {
            "document": [{"input": [text]} for text in texts],
            "truncated": [{"input": document} for document in windows],
        }
        with (
            Server(document_folder, Path(work) / "document_server.log") as document_server,
            Server(truncated_folder, Path(work) / "truncated_server.log") as truncated_server,
        ):
            difference = check_scores(document_server, texts[:CHECKED])
            servers = {"document": document_server, "truncated": truncated_server}
            results = measure(servers, bodies, [len(document) for document in windows], args)
    results.update(
        command=" ".join(["python", PROGRAM, *(argv if argv is not None else sys.argv[1:])]),
        machine=machine(),
        documents=args.documents,
        tokens=args.tokens,
        mean_windows=statistics.mean(len(document) for document in windows),
        pooling=args.pooling,
        clients=args.clients,
        requests=args.requests,
        rounds_run=args.rounds,
        max_difference=difference,
    )
    # a MiniLM report says nothing more: the stored ones are MiniLM's, and render the same
    if args.backbone != MINILM:
        results["backbone"] = args.backbone
    (args.output / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.output / "report.md").write_text(report_markdown(results))
    print(report_markdown(results))
    failed = results["document"]["failed"] + results["truncated"]["failed"]
    return 0 if difference <= TOLERANCE and failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
