"""Sentence embeddings: our ``encode`` against ``SentenceTransformer(...).encode`` on the same all-MiniLM-L6-v2 and
the same texts, in one run, each called as a user calls it: with no settings passed by hand.

Both sides embed Debian fortunes quotations (bench/corpora/fortunes.py) of several lengths: short, medium and long
quotations apart, then all of them together in one shuffled list (where sorting by length matters most). Ours is
``PooledModel.from_backbone(folder).encode(texts)``, theirs ``SentenceTransformer(folder).encode(texts)``, on the
packaged folder (Transformer, mean Pooling, Normalize, max_seq_length 256) or ``--backbone minilm|mpnet|PATH``'s
(bench/backbones.py): ours must take the folder's pooling, normalisation and token limit by itself (the run checks
that it did). Each side's batch size is its own default unless --batch-size gives one to both.

Measurements are paired: every round times ours and theirs on the same texts, one right after the other, the one
that goes first alternating from round to round, and a workload's ratio is the median over rounds of
theirs / ours (a throughput ratio: above 1.0, ours embeds more texts per second). Before any timing, each
workload's embeddings are compared: they must be equal to 1e-5.

    python bench/embeddings.py --output bench/results/embeddings/report.md   # the stored report (quiet machine)
    python bench/embeddings.py --per-length 8 --rounds 1                     # a quick check that it runs
    python bench/embeddings.py --backbone mpnet --output bench/results/mpnet/embeddings/report.md   # base size

Exit status 0 when the embeddings are equal and every ratio is at least the target (1.0), else 1.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from backbones import add_backbone_argument, backbone_name, resolve_backbone  # noqa: E402  (bench/: this folder)
from corpora.fortunes import FortunesMissing, build_fortunes  # noqa: E402

import pooled_models  # noqa: E402
from pooled_models import PooledModel  # noqa: E402

TARGET = 1.0
TOLERANCE = 1e-5
# Character lengths of the three groups of quotations: a one-liner, a few sentences, a paragraph (MiniLM's
# tokenizer gives about 4-5 characters per token, so "long" quotations run from ~70 tokens to the 256 cut).
LENGTHS = {"short": (0, 80), "medium": (80, 300), "long": (300, 10**9)}
PROGRAM = "bench/embeddings.py"


def shown(backbone: str) -> str:
    """The backbone as the report's header names it (all-MiniLM-L6-v2 for MiniLM, as the stored report has it)."""
    return backbone_name(backbone).split("/")[-1]


def fortunes_by_length(per_length: int, seed: int = 0) -> dict[str, list[str]]:
    """``per_length`` distinct quotations of each length group, chosen by ``seed``; exits with the reason when the
    fortunes package is missing."""
    try:
        splits = build_fortunes(min_quotations=1, seed=seed)
    except FortunesMissing as error:
        sys.exit(f"{PROGRAM}: the benchmark cannot run. {error}")
    quotations = sorted({row["text"] for rows in splits.values() for row in rows})
    return choose_by_length(quotations, per_length, seed)


def choose_by_length(texts: list[str], per_length: int, seed: int = 0) -> dict[str, list[str]]:
    """``{"short": [...], "medium": [...], "long": [...]}``: up to ``per_length`` texts of each group (see
    ``LENGTHS``), sampled with ``seed``."""
    rng = random.Random(seed)
    groups = {}
    for name, (low, high) in LENGTHS.items():
        members = [text for text in texts if low <= len(text) < high]
        groups[name] = rng.sample(members, min(per_length, len(members)))
    return groups


def workloads(groups: dict[str, list[str]], seed: int = 0) -> dict[str, list[str]]:
    """Each length group alone, then all of them in one shuffled list."""
    mixed = [text for texts in groups.values() for text in texts]
    random.Random(seed).shuffle(mixed)
    return {**groups, "mixed": mixed}


def check_same_defaults(ours, theirs) -> None:
    """Exits with the reason when our model did not take the folder's settings by itself: the run would then measure
    other work than sentence-transformers does."""
    theirs_settings = {
        "max tokens": theirs.max_seq_length,
        "normalised": type(theirs[-1]).__name__ == "Normalize",
    }
    ours_settings = {
        "max tokens": ours.config.max_seq_length,
        "normalised": ours.config.normalize_embeddings,
    }
    if ours_settings != theirs_settings:
        sys.exit(f"{PROGRAM}: our defaults {ours_settings} are not sentence-transformers' {theirs_settings}.")


def write_report(report: str, output: Path | None) -> None:
    """Prints the report, and stores it in ``output`` (its folder made) when given."""
    print("\n" + report)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(report + "\n")


def timed(encode, texts: list[str]) -> float:
    start = time.perf_counter()
    encode(texts)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--per-length", type=int, default=256, help="quotations of each length group")
    parser.add_argument(
        "--batch-size", type=int, help="texts per batch, for both sides (default: each side's own default)"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="which quotations are chosen, and their order")
    parser.add_argument(
        "--output", type=Path, help="also write the report (markdown, with the command that made it) here"
    )
    add_backbone_argument(parser)
    args = parser.parse_args(argv)
    if args.per_length < 1 or (args.batch_size or 1) < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--per-length, --batch-size and --rounds must be at least 1, --warmup at least 0")
    try:
        from sentence_transformers import SentenceTransformer
        from sentence_transformers import __version__ as st_version
    except ImportError:
        sys.exit(f"{PROGRAM}: sentence-transformers is missing: pip install 'pooled_models[embed]'.")

    backbone = resolve_backbone(PROGRAM, args.backbone)
    texts = workloads(fortunes_by_length(args.per_length, args.seed), args.seed)
    theirs = SentenceTransformer(backbone, device="cpu")  # where ours runs: a CPU benchmark on any machine
    ours = PooledModel.from_backbone(backbone)
    check_same_defaults(ours, theirs)
    chosen = {} if args.batch_size is None else {"batch_size": args.batch_size}

    def encode_ours(batch: list[str]) -> np.ndarray:
        return ours.encode(batch, **chosen)

    def encode_theirs(batch: list[str]) -> np.ndarray:
        return theirs.encode(batch, **chosen)

    equal = True
    differences = {}
    for name, batch in texts.items():
        difference = float(np.abs(encode_ours(batch) - encode_theirs(batch)).max())
        differences[name] = difference
        equal &= difference <= TOLERANCE

    pairs: dict[str, list[tuple[float, float]]] = {name: [] for name in texts}
    for round_index in range(args.warmup + args.rounds):
        ours_first = round_index % 2 == 0
        for name, batch in texts.items():
            if ours_first:
                own, other = timed(encode_ours, batch), timed(encode_theirs, batch)
            else:
                other, own = timed(encode_theirs, batch), timed(encode_ours, batch)
            if round_index >= args.warmup:
                pairs[name].append((own, other))
        print(f"round {round_index + 1}/{args.warmup + args.rounds} done", file=sys.stderr, flush=True)

    lines = [
        f"Command: python bench/embeddings.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        "",
        f"PooledModel.from_backbone(folder).encode(texts) vs SentenceTransformer(folder).encode(texts), "
        f"{shown(args.backbone)}, Debian fortunes quotations, batch size {args.batch_size or 'each default'}, "
        f"max {ours.config.max_seq_length} tokens, normalised: {ours.config.normalize_embeddings}, "
        f"{args.rounds} paired rounds ({args.warmup} warm-up), {torch.get_num_threads()} CPU threads, "
        f"torch {torch.__version__}, sentence-transformers {st_version}, pooled_models {pooled_models.__version__}",
        "",
        "| texts | count | mean characters | ours (texts/s) | theirs (texts/s) | throughput ratio ours/theirs "
        f"| largest difference | equal to {TOLERANCE:g} |",
        "|---|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    all_within = equal
    for name, batch in texts.items():
        own = statistics.median(pair[0] for pair in pairs[name])
        other = statistics.median(pair[1] for pair in pairs[name])
        ratio = statistics.median(other_time / own_time for own_time, other_time in pairs[name])
        all_within &= ratio >= TARGET
        characters = sum(map(len, batch)) / len(batch)
        lines.append(
            f"| {name} | {len(batch)} | {characters:.0f} | {len(batch) / own:.1f} | {len(batch) / other:.1f} | "
            f"{ratio:.3f} | {differences[name]:.1e} | {'yes' if differences[name] <= TOLERANCE else 'NO'} |"
        )
    lines += [
        "",
        f"Target: throughput ratio >= {TARGET:.1f} and embeddings equal to {TOLERANCE:g}: "
        + ("met." if all_within else "NOT met."),
    ]
    write_report("\n".join(lines), args.output)
    return 0 if all_within else 1


if __name__ == "__main__":
    sys.exit(main())
