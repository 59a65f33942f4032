"""Overhead of the pooling heads against vanilla AutoModelForSequenceClassification, measured in one run.

Every model wraps the same packaged all-MiniLM-L6-v2 backbone (``--backbone minilm|mpnet|PATH``: another one, see
bench/backbones.py) and sees the same batches. Measurements are paired: in every round each model is timed right
next to the vanilla model (in a random order of the two), and its ratio is the median over rounds of its time divided
by that vanilla time, so a slow patch of the machine affects both sides of a ratio. The rounds visit the models in a
shuffled order.

    python bench/overhead.py --output bench/results/overhead.md   # every registered pooling: the stored report
    python bench/overhead.py --poolings mean lstm --label-counts 4 --rounds 5
    python bench/overhead.py --poolings mean --label-counts 25 100 --label-token-layers all 3 2 1
    python bench/overhead.py --backbone mpnet --output bench/results/mpnet/overhead.md   # all-mpnet-base-v2

Targets: token poolings at most 1.03x, layer strategies at most 1.10x, and label tokens (L labels in
front of a T-token text) at most 1.05 x (T + L) / T. That last target assumes the backbone's cost grows
linearly with the sequence; attention does not, so each label-token row is also timed against the vanilla
model on a batch of T + L tokens, which isolates what the label tokens themselves add. With
``--label-token-layers``, one row per number k of top layers the label tokens join (``label_token_layers``):
the lower N - k layers see the T text tokens only, so the target becomes 1.05 x (N T + k L) / (N T).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from backbones import add_backbone_argument, backbone_name, resolve_backbone  # noqa: E402  (bench/: this folder)
from transformers import AutoModelForSequenceClassification  # noqa: E402

import pooled_models  # noqa: E402
from pooled_models import PooledForSequenceClassification  # noqa: E402
from pooled_models.modeling.layer_pooling import LayerPooler  # noqa: E402

TOKEN_TARGET, LAYER_TARGET, LABEL_TOKEN_TARGET = 1.03, 1.10, 1.05
VANILLA = "vanilla"


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
    batch: dict[str, torch.Tensor]
    labels: torch.Tensor
    target: float | None = None
    reference: str | None = None  # a second candidate to compare with (vanilla on the same number of tokens)
    # peer name -> [(this model's train, infer, the peer's train, infer)] timed side by side, one per round
    pairs: dict[str, list[tuple[float, float, float, float]]] = field(default_factory=dict)


def timed(action: Callable[[], None]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def train_step(candidate: Candidate) -> None:
    candidate.model.train()
    loss = candidate.model(**candidate.batch, labels=candidate.labels).loss
    loss.backward()
    candidate.optimizer.step()
    candidate.optimizer.zero_grad(set_to_none=True)


def inference(candidate: Candidate) -> None:
    candidate.model.eval()
    with torch.inference_mode():
        candidate.model(**candidate.batch)


def build_candidates(backbone: str, args) -> list[Candidate]:
    torch.manual_seed(0)
    vanilla = AutoModelForSequenceClassification.from_pretrained(backbone, num_labels=args.num_labels)
    vocab_size = vanilla.config.vocab_size
    batch, labels = make_batch(args.batch_size, args.seq_len, vocab_size, args.num_labels)

    def candidate(name, model, **settings):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        return Candidate(name, model, optimizer, settings.pop("batch", batch), labels, **settings)

    candidates = [candidate(VANILLA, vanilla)]
    for pooling in args.poolings:
        model = PooledForSequenceClassification.from_backbone(
            backbone, pooling=pooling, num_labels=args.num_labels
        )
        is_layer_strategy = isinstance(model.pooler, LayerPooler)
        candidates.append(
            candidate(pooling, model, target=LAYER_TARGET if is_layer_strategy else TOKEN_TARGET)
        )
    num_layers = vanilla.config.num_hidden_layers
    for count in args.label_counts:
        longer = f"{VANILLA} on {args.seq_len + count} tokens"
        longer_batch, _ = make_batch(args.batch_size, args.seq_len + count, vocab_size, args.num_labels)
        candidates.append(candidate(longer, vanilla, batch=longer_batch))
        for layers in args.label_token_layers:
            # The batch's class ids stay below num_labels <= count, so the same labels fit every model.
            model = PooledForSequenceClassification.from_backbone(
                backbone,
                pooling="label_tokens",
                num_labels=count,
                label_token_init="vocab_mean",
                label_token_layers=layers,
            )
            joined = num_layers if layers == "all" else layers  # layers that see the T + L tokens
            cost = (num_layers * args.seq_len + joined * count) / (num_layers * args.seq_len)
            name = f"label_tokens, {count} labels" + (
                "" if layers == "all" else f", label_token_layers={layers}"
            )
            candidates.append(candidate(name, model, target=LABEL_TOKEN_TARGET * cost, reference=longer))
    return candidates


def time_both(candidate: Candidate) -> tuple[float, float]:
    return timed(lambda: train_step(candidate)), timed(lambda: inference(candidate))


def measure(candidates: list[Candidate], rounds: int, warmup: int) -> None:
    by_name = {candidate.name: candidate for candidate in candidates}
    vanilla = by_name[VANILLA]
    timed_models = [
        candidate for candidate in candidates if candidate is not vanilla and not _is_reference(candidate)
    ]
    order = random.Random(0)
    for round_index in range(warmup + rounds):
        order.shuffle(timed_models)
        for candidate in timed_models:
            for peer in [vanilla] + ([by_name[candidate.reference]] if candidate.reference else []):
                first, second = order.sample([candidate, peer], 2)
                times = {first.name: time_both(first), second.name: time_both(second)}
                if round_index >= warmup:
                    candidate.pairs.setdefault(peer.name, []).append(
                        (*times[candidate.name], *times[peer.name])
                    )
        print(f"round {round_index + 1}/{warmup + rounds} done", file=sys.stderr, flush=True)


def _is_reference(candidate: Candidate) -> bool:
    return candidate.name.startswith(f"{VANILLA} on ")


def median_ratios(pairs: list[tuple[float, float, float, float]]) -> tuple[float, float]:
    """Median over rounds of (train, inference) time / the peer's time in the same pair."""
    return (
        statistics.median(own_train / peer_train for own_train, _, peer_train, _ in pairs),
        statistics.median(own_infer / peer_infer for _, own_infer, _, peer_infer in pairs),
    )


def report(candidates: list[Candidate], args, command: str) -> tuple[str, bool]:
    """The markdown report (the command that made it, the setting, one row per model) and whether every ratio is
    within its target."""
    by_name = {candidate.name: candidate for candidate in candidates}
    vanilla = by_name[VANILLA]
    lines = [
        f"Command: {command}",
        "",
        "PooledForSequenceClassification vs vanilla AutoModelForSequenceClassification, "
        f"{backbone_name(args.backbone).split('/')[-1]}, "
        f"batch {args.batch_size} x {args.seq_len} tokens, {args.rounds} paired rounds, "
        f"{torch.get_num_threads()} CPU threads, torch {torch.__version__}, pooled_models {pooled_models.__version__}",
        "",
        "| model | train step (ms) | train ratio | inference (ms) | inference ratio | target | within "
        "| train / inference ratio vs vanilla on T+L tokens |",
        "|---|---:|---:|---:|---:|---:|:---:|---:|",
    ]
    all_within = True
    vanilla_pairs = [pair for candidate in candidates for pair in candidate.pairs.get(VANILLA, [])]
    lines.append(
        f"| {VANILLA} | {1000 * statistics.median(p[2] for p in vanilla_pairs):.0f} | 1.00 | "
        f"{1000 * statistics.median(p[3] for p in vanilla_pairs):.0f} | 1.00 | - | - | - |"
    )
    for candidate in candidates:
        if candidate is vanilla or _is_reference(candidate):
            continue  # references are shown through the label-token rows that refer to them
        pairs = candidate.pairs[VANILLA]
        train_ms = 1000 * statistics.median(pair[0] for pair in pairs)
        infer_ms = 1000 * statistics.median(pair[1] for pair in pairs)
        train_ratio, infer_ratio = median_ratios(pairs)
        within = max(train_ratio, infer_ratio) <= candidate.target
        all_within &= within
        versus_longer = "-"
        if candidate.reference:
            versus_longer = "{:.3f} / {:.3f}".format(*median_ratios(candidate.pairs[candidate.reference]))
        lines.append(
            f"| {candidate.name} | {train_ms:.0f} | {train_ratio:.3f} | {infer_ms:.0f} | {infer_ratio:.3f} | "
            f"<= {candidate.target:.2f} | {'yes' if within else 'NO'} | {versus_longer} |"
        )
    return "\n".join(lines), all_within


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--poolings", nargs="+", default=None, help="default: every registered pooling")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--num-labels", type=int, default=4)
    parser.add_argument(
        "--label-counts",
        type=int,
        nargs="*",
        default=[4, 25, 100],
        help="label_tokens models to time, one per number of labels",
    )
    parser.add_argument(
        "--label-token-layers",
        type=_label_token_layers,
        nargs="+",
        default=["all"],
        help="label_token_layers of the label_tokens models: 'all' and/or numbers of top layers, one row each",
    )
    parser.add_argument(
        "--output", type=Path, help="also write the report (markdown, with the command that made it) here"
    )
    add_backbone_argument(parser)
    args = parser.parse_args(argv)
    if any(count < args.num_labels for count in args.label_counts):
        parser.error(
            f"--label-counts must be >= --num-labels ({args.num_labels}): the batch has that many classes"
        )

    args.poolings = args.poolings or [
        name for name in sorted(pooled_models.POOLERS) if name != "label_tokens"
    ]
    candidates = build_candidates(resolve_backbone("bench/overhead.py", args.backbone), args)
    measure(candidates, args.rounds, args.warmup)
    command = f"python bench/overhead.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip()
    table, all_within = report(candidates, args, command)
    print("\n" + table)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(table + "\n")
    return 0 if all_within else 1


def _label_token_layers(text: str) -> str | int:
    if text == "all":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'all' or a number of top layers, got {text!r}") from None


if __name__ == "__main__":
    sys.exit(main())
