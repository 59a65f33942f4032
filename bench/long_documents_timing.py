"""Time and peak memory of document mode against a document's number of windows (bench/long_documents.py's timing
part; run alone with ``python bench/long_documents.py --timing-only`` on a quiet machine).

* Prediction: one document of 1, 2, 4 ... 64 windows through a document model (all-MiniLM-L6-v2, mean pooling across
  windows), the median time of a few forward passes and the peak memory the pass adds;
* Training: one step (forward and backward) on a batch of a fixed window budget (32 windows), made of documents of 1,
  2, 4 ... 32 windows each: at a fixed budget the peak memory should not grow with the documents' length.

Each point runs in a fresh process, so the peak is its own: on a GPU ``torch.cuda.max_memory_allocated``, on the CPU
the growth of the process' peak resident memory (``ru_maxrss``) over the model's loading. Times from a shared
machine are not comparable: rerun on a quiet one.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WINDOW_COUNTS = (1, 2, 4, 8, 16, 32, 64)
TRAINING_BUDGET = 32
# Words that are one token each in BERT's vocabulary.
COMMON_WORDS = (
    "the",
    "file",
    "system",
    "call",
    "returns",
    "a",
    "value",
    "of",
    "process",
    "and",
    "data",
    "page",
)
REPEATS = 5

__all__ = ["measure", "write_timing"]


def _model(path: str, window: int):
    import torch
    from transformers import AutoTokenizer

    from pooled_models import PooledForSequenceClassification

    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        path, num_labels=6, pooling="mean", document_window=window, document_pooling="mean"
    )
    return model, AutoTokenizer.from_pretrained(path)


def _document(tokenizer, window: int, windows: int) -> dict:
    """A document of exactly ``windows`` windows: words enough for them, tokenized as train.py does."""
    from pooled_models.modeling.documents import tokenize_documents

    stride = window // 8
    content = window - tokenizer.num_special_tokens_to_add()
    words = content + (windows - 1) * (content - stride)  # one token each: exactly ``windows`` full windows
    text = " ".join(COMMON_WORDS[index % len(COMMON_WORDS)] for index in range(words))
    document = {"input_ids": tokenize_documents(tokenizer, [text], window, stride)["input_ids"][0]}
    assert len(document["input_ids"]) == windows, (len(document["input_ids"]), windows)
    return document


def _peak(device) -> float:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def point(path: str, window: int, kind: str, windows: int) -> dict:
    """One measurement, in this process: ``kind`` "predict" (one document of ``windows``) or "train" (a step on
    TRAINING_BUDGET windows of documents of ``windows`` each)."""
    import torch

    from pooled_models.modeling.documents import DocumentCollator

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, tokenizer = _model(path, window)
    model.to(device)
    collator = DocumentCollator(tokenizer)
    count = 1 if kind == "predict" else max(1, TRAINING_BUDGET // windows)
    features = [{**_document(tokenizer, window, windows), "labels": 0} for _ in range(count)]
    batch = {key: value.to(device) for key, value in collator(features).items()}
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = _peak(device)
    seconds = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        if kind == "predict":
            model.eval()
            with torch.no_grad():
                model(**{key: value for key, value in batch.items() if key != "labels"})
        else:
            model.train()
            model(**batch).loss.backward()
            model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
    return {
        "kind": kind,
        "windows": windows,
        "documents": count,
        "device": str(device),
        "seconds": statistics.median(seconds[1:]),  # the first pass warms up
        "peak_mib": _peak(device) - (0 if device.type == "cuda" else before),
    }


def measure(path: str, window: int) -> list[dict]:
    """Every point, each in a fresh process."""
    points = []
    for kind, counts in (
        ("predict", WINDOW_COUNTS),
        ("train", [n for n in WINDOW_COUNTS if n <= TRAINING_BUDGET]),
    ):
        for windows in counts:
            done = subprocess.run(
                [sys.executable, __file__, path, str(window), kind, str(windows)],
                capture_output=True,
                text=True,
                check=True,
                env={
                    **os.environ,
                    "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                },
            )
            points.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(points[-1], flush=True)
    return points


def write_timing(folder: Path, points: list[dict], command: str) -> None:
    lines = [
        f"Command: {command}",
        "",
        f"Device: {points[0]['device']}. Prediction: one document; training: one step on {TRAINING_BUDGET} windows "
        "(documents of the given windows each). Median of "
        f"{REPEATS - 1} passes after a warm-up; peak memory added by the pass (GPU: allocated; CPU: resident).",
        "",
        "| phase | windows per document | documents | seconds | ms per window | peak MiB |",
        "|---|---|---|---|---|---|",
    ]
    for p in points:
        per_window = 1000 * p["seconds"] / (p["windows"] * p["documents"])
        lines.append(
            f"| {p['kind']} | {p['windows']} | {p['documents']} | {p['seconds']:.3f} | {per_window:.1f} | "
            f"{p['peak_mib']:.0f} |"
        )
    (folder / "timing.md").write_text("\n".join(lines) + "\n")
    (folder / "timing.json").write_text(json.dumps({"command": command, "points": points}, indent=1) + "\n")


if __name__ == "__main__":
    model_path, window_text, kind_text, windows_text = sys.argv[1:5]
    print(json.dumps(point(model_path, int(window_text), kind_text, int(windows_text))))
