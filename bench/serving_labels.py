"""Serving label text: vLLM with the pooled_models plugin against transformers' pipelines, on the same checkpoints and
the same Debian fortunes quotations, in one run, each called as a user calls it (bench/serving.py's method, whose
helpers it reuses).

The checkpoints: the packaged all-MiniLM-L6-v2 (``--backbone minilm|mpnet|PATH``: another, see bench/backbones.py; the
report then names it) as train.py's few-example default builds it (``pooling="label_text"``,
``label_text_scorer="per_label"``, one label per fortunes topic), its head drawn at random with a fixed seed and weights
large enough that the labels are well apart; a mean-pooled classifier on the same backbone and labels (what a user could
serve before: ``--pooling mean``); and for the open label set the untrained label-text backbone with the shared scorer
(the cosine of text and label, docs/label-text.md), asked about the fortunes topics, which it never saw.

Offline, in this process (one untimed warm-up call each, then ``--rounds`` timed rounds, the order alternating):

- ``LLM(model=label_text_folder, runner="pooling", enforce_eager=True, dtype="float32").classify(texts)``;
- ``pipeline("text-classification", model=label_text_folder, top_k=None)(texts)``;
- ``LLM(model=mean_folder, ...).classify(texts)``: the mean-pooled classifier served by the plugin.

Each side's texts/s and the ratios of vLLM's label-text classifier over the others (the median over rounds). Before
any timing, vLLM's scores must equal the pipeline's (1e-4) with the same top label.

Online: the OpenAI-compatible server on the shared-scorer checkpoint with ``--io-processor-plugin
pooled_models_zero_shot``, under three loads in turn, each ``--clients`` threads sending ``--requests`` one-text
requests one after the other: ``/classify`` (the checkpoint's own two labels; the answers' labels must be the
pipeline's), ``/pooling`` with every fortunes topic as candidate labels, the same topics each time (warm: one untimed
request caches their vectors first), and ``/pooling`` with labels no other request asked (cold: each topic with the
request's own suffix, so every label's prompt runs). Each: p50 and p99 latency, requests/s and its ratio to
``/classify``'s (the issue's goal: warm at 0.8x or more), failed requests (must be 0), answers whose top label differs
from the zero-shot pipeline's (must be 0; cold: each client's first answer checked). Against it,
``pipeline("zero-shot-classification", model=folder)(texts, candidate_labels=topics)`` over the same texts in one
call (texts/s, as users call it on a batch) and one text per call on the first 10 (p50 latency, as an endpoint that
wraps the pipeline calls it).

    python bench/serving_labels.py                     # 100 texts, 3 rounds, 8 clients x 50 requests x 3 loads
    python bench/serving_labels.py --texts 24 --clients 2 --requests 3 --rounds 1 --output /tmp/labels-check
    python bench/serving_labels.py --backbone mpnet --output bench/results/mpnet/serving/labels

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
from backbones import MINILM, add_backbone_argument, backbone_name, resolve_backbone  # noqa: E402  (standard library)
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
SHARED_OWN_LABELS = [
    "yes",
    "no",
]  # the shared-scorer checkpoint's own labels (/classify); it is asked about others


def build(folder: Path, topics: list[str], tokenizer, random_head: bool, backbone: str, **settings) -> Path:
    """A classifier on ``backbone`` (a model folder) with ``settings``, saved with ``tokenizer`` in ``folder``."""
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        backbone,
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
    """The same server (the shared-scorer checkpoint, the zero-shot plugin on) under three loads of ``clients`` x
    ``requests`` one-text requests, one after the other: /classify (the model's own labels), the open label set with
    the fortunes topics asked again and again (warm: one untimed request caches them first), and with labels no other
    request asked (cold: each topic with the request's own suffix, so every label's prompt runs)."""
    from pooled_models.serving.zero_shot import MAX_CANDIDATE_LABELS

    assert len(topics) <= MAX_CANDIDATE_LABELS
    own = Pipeline(folder, SHARED_OWN_LABELS).scores(texts)  # what /classify answers must match
    classify_labels = [SHARED_OWN_LABELS[row.index(max(row))] for row in own]
    zero_shot = pipeline("zero-shot-classification", model=str(folder))
    with Server(folder, log, extra_args=["--io-processor-plugin", PLUGIN_NAME]) as server:
        server.post("/classify", {"input": texts[:2]})  # warm-up, untimed
        server.post(
            "/pooling", {"data": {"texts": texts[:2], "candidate_labels": topics}}
        )  # caches the topics

        def classify(row: int, index: int, request: int) -> tuple[str, dict, object]:
            return "/classify", {"input": [texts[row]]}, classify_labels[row]

        def warm(row: int, index: int, request: int) -> tuple[str, dict, object]:
            return "/pooling", {"data": {"texts": [texts[row]], "candidate_labels": topics}}, expected[row]

        def cold_labels(index: int, request: int) -> list[str]:
            return [f"{topic} {index}.{request}" for topic in topics]

        # Each client's first cold answer is checked against the pipeline's, worked out before any load runs.
        cold_expected = {
            index: zero_shot(texts[(index * requests) % len(texts)], candidate_labels=cold_labels(index, 0))
            for index in range(clients)
        }

        def cold(row: int, index: int, request: int) -> tuple[str, dict, object]:
            want = cold_expected[index] if request == 0 else None
            return (
                "/pooling",
                {"data": {"texts": [texts[row]], "candidate_labels": cold_labels(index, request)}},
                want,
            )

        loads = {name: _load(server, make, clients, requests, len(texts)) for name, make in
                 (("classify", classify), ("warm", warm), ("cold", cold))}  # fmt: skip
    for name in ("warm", "cold"):
        loads[name]["over_classify"] = (
            loads[name]["requests_per_second"] / loads["classify"]["requests_per_second"]
        )
    return {"clients": clients, "requests_per_client": requests, "labels": len(topics), **loads}


def _load(server, make, clients: int, requests: int, rows: int) -> dict:
    """``clients`` threads, each sending ``requests`` requests one after the other; ``make(row, client, request)``
    gives the path, the body and what the answer must be (None: not checked)."""
    latencies: list[float] = []
    failures: list[str] = []
    checked, wrong, difference = 0, 0, 0.0
    lock = threading.Lock()

    def client(index: int) -> None:
        nonlocal checked, wrong, difference
        for request in range(requests):
            row = (index * requests + request) % rows
            path, body, want = make(row, index, request)
            start = time.perf_counter()
            try:
                answer = server.post(path, body)["data"][0]
            except Exception as error:  # a failed request is counted and reported, not raised
                with lock:
                    failures.append(f"{type(error).__name__}: {error}")
                continue
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                if want is None:
                    continue
                checked += 1
                if isinstance(want, str):  # /classify: the label
                    wrong += answer["label"] != want
                    continue
                scores = dict(zip(answer["labels"], answer["scores"], strict=True))
                wrong += answer["labels"][0] != want["labels"][0]
                difference = max(
                    difference,
                    *(
                        abs(scores[label] - score)
                        for label, score in zip(want["labels"], want["scores"], strict=True)
                    ),
                )

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "failed": len(failures),
        "failures": failures[:5],
        "checked": checked,
        "wrong_labels": wrong,
        "max_score_difference": difference,
        "p50_ms": 1000 * percentile(latencies, 50),
        "p99_ms": 1000 * percentile(latencies, 99),
        "requests_per_second": len(latencies) / elapsed,
    }


def described(backbone: str) -> str:
    """The backbone as the report names it (the packaged MiniLM, as the stored report has it)."""
    return "the packaged MiniLM" if backbone == MINILM else backbone_name(backbone)


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
        "## Offline classify: train.py's few-example default (label_text, per_label) on "
        + described(settings.get("backbone", MINILM)),
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
        f"## The open label set against /classify: the same server and checkpoint (HTTP, {on['clients']} clients x "
        f"{on['requests_per_client']} one-text requests each)",
        "",
        "The shared-scorer checkpoint, its own labels on /classify; on /pooling (the zero-shot plugin) the "
        f"{on['labels']} fortunes topics it never saw: asked again and again (warm: their vectors cached) or, cold, "
        "each with the request's own suffix (every label's prompt runs). The cold answers checked are each client's "
        "first.",
        "",
        "| requests | p50 latency | p99 latency | requests/s | over /classify | failed | answers checked | top labels "
        "unlike the pipeline's | largest score difference |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    names = {
        "classify": "/classify (its own labels)",
        "warm": f"/pooling, {on['labels']} labels, warm",
        "cold": f"/pooling, {on['labels']} labels, cold",
    }
    for key, name in names.items():
        row = on[key]
        ratio = f"{row['over_classify']:.2f}x" if "over_classify" in row else ""
        difference = f"{row['max_score_difference']:.1e}" if key != "classify" else ""
        lines.append(
            f"| {name} | {row['p50_ms']:.1f} ms | {row['p99_ms']:.1f} ms | {row['requests_per_second']:.1f} | {ratio} "
            f"| {row['failed']} | {row['checked']} | {row['wrong_labels']} | {difference} |"
        )
    lines += [
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
    add_backbone_argument(parser)
    args = parser.parse_args(argv)

    import transformers
    import vllm

    if PLUGIN_NAME not in importlib.metadata.entry_points(group="vllm.io_processor_plugins").names:
        sys.exit(
            f"{PROGRAM}: vLLM finds no IO-processor plugin {PLUGIN_NAME!r}: install the package again (pip install -e "
            ".) so that its metadata holds setup.cfg's vllm.io_processor_plugins entry point."
        )
    backbone = resolve_backbone(PROGRAM, args.backbone)
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    texts, topics = fortunes_texts(args.texts, tokenizer)
    with tempfile.TemporaryDirectory(prefix="bench-serving-labels-") as scratch:
        work = Path(scratch)
        label_text = build(
            work / "label_text",
            topics,
            tokenizer,
            True,
            backbone,
            pooling="label_text",
            label_text_scorer="per_label",
        )
        mean = build(work / "mean", topics, tokenizer, True, backbone, pooling="mean")
        # Untrained, shared scorer: built with other labels than the topics it is asked about.
        shared = build(work / "shared", SHARED_OWN_LABELS, tokenizer, False, backbone, pooling="label_text")
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
        # a MiniLM run stores no backbone: the stored reports are MiniLM's, and render the same
        "settings": {
            "texts": len(texts),
            "labels": len(topics),
            "rounds": args.rounds,
            **({} if args.backbone == MINILM else {"backbone": args.backbone}),
        },
        "offline": offline_results,
        "zero_shot_pipeline": pipeline_results,
        "online": online_results,
    }
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.output / "report.md").write_text(report_markdown(results))
    print(report_markdown(results))
    loads = [online_results[name] for name in ("classify", "warm", "cold")]
    equal = (
        offline_results["max_score_difference"] <= TOLERANCE
        and offline_results["same_top_label"] == len(texts)
        and all(load["max_score_difference"] <= TOLERANCE for load in loads)
    )
    ok = equal and not any(load["failed"] or load["wrong_labels"] for load in loads)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
