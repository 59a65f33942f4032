"""Padding-free (packed) batches against padded ones, on real text of mixed length: which is faster on this machine.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/packing.py                 # 512 texts per phase, 5 rounds
    OMP_NUM_THREADS=1 taskset -c 1 python bench/packing.py --texts 256 --rounds 3 --output packing.md
    OMP_NUM_THREADS=1 taskset -c 1 python bench/packing.py --backbone mpnet --output bench/results/mpnet/packing.md

The packaged all-MiniLM-L6-v2 backbone (``--backbone minilm|mpnet|PATH``: another one, see bench/backbones.py) with a
mean pooling and a linear head, on quotations of Debian's fortunes package (truncated at 128 tokens, as
bench/accuracy.py; synthetic long-tailed lengths if the package is missing).
Each phase runs ``--texts`` texts once per round, in batches of train.py's sizes (16 for training, 32 for
inference), in these ways:

* ``random, padded``: random batches, each padded to its longest text (transformers' Trainer default);
* ``by length, padded``: train.py's defaults: for training its length-grouped batches (similar lengths, random
  between groups), for inference the texts sorted longest first in batches that end early rather than pad more
  than 5%; padded;
* ``random, packed``: the random batches with ``packed_batches=True``: each batch's texts packed into rows as long
  as its longest text, with a block-diagonal mask (what sdpa on CPU runs);
* ``random, packed in one row``: the same with every text of a batch in one row (the layout flash-attention varlen
  runs without a mask; on CPU the mask makes its attention quadratic in the whole batch).

Phases: ``train`` (forward, loss and backward, dropout on; the optimizer step costs the same in every mode and is
left out) and ``inference`` (forward under ``torch.no_grad``). For each it reports samples per second and the
fraction of computed positions that are real tokens. Rounds run the modes in a shuffled order on the same batches,
and the speed ratio against ``by length, padded`` is the median of the per-round ratios, so a slow patch of the
machine affects both sides of a ratio.
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

import torch  # noqa: E402
from backbones import MINILM, add_backbone_argument, backbone_name, resolve_backbone  # noqa: E402
from corpora.fortunes import FortunesMissing, build_fortunes  # noqa: E402  (bench/ is this script's folder)
from transformers import AutoTokenizer  # noqa: E402

import pooled_models.modeling.packing as packing  # noqa: E402
from pooled_models import PooledForSequenceClassification  # noqa: E402
from pooled_models.train.arguments import TRAIN_BATCH_SIZE  # noqa: E402
from pooled_models.train.data.batching import length_grouped_batches, length_sorted_batches  # noqa: E402

MAX_SEQ_LENGTH = 128
EVAL_BATCH_SIZE = 32
BASELINE = "by length, padded"
MODES = ("random, padded", BASELINE, "random, packed", "random, packed in one row")
PHASES = ("train", "inference")


def shown(backbone: str) -> str:
    """The backbone as the report names it: MiniLM-L6 as the stored report has it, else its Hub or folder name."""
    return "MiniLM-L6" if backbone == MINILM else backbone_name(backbone).split("/")[-1]


def corpus(seed: int) -> tuple[list[str], str]:
    """The fortunes benchmark's training split, or synthetic words of long-tailed lengths when it is missing."""
    try:
        return [row["text"] for row in build_fortunes(seed=seed)["train"]], "fortunes (train split)"
    except FortunesMissing:
        rng = random.Random(seed)
        lengths = [min(int(rng.lognormvariate(3.3, 0.9)) + 1, 400) for _ in range(8000)]
        words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
        return [
            " ".join(rng.choice(words) for _ in range(n)) for n in lengths
        ], "synthetic (lognormal lengths)"


def orders(lengths: list[int], count: int, seed: int) -> dict[tuple[str, str], list[list[int]]]:
    """(phase, order) -> the batches each phase runs, in that order; both orders of a phase hold the same texts.

    Training: ``count // 16`` batches drawn at random from an epoch of train.py's length-grouped batches over the
    whole split (its groups of 50 batches need the whole split to group as they do in train.py), and the same texts
    in random batches. Inference: ``count`` random texts, in random batches of 32 or in train.py's evaluation and
    prediction batches (sorted longest first, at most 32 texts, ending early rather than pad more than 5%).
    """
    rng = random.Random(seed)
    rows = rng.sample(range(len(lengths)), len(lengths))
    grouped = length_grouped_batches(rows, lengths, TRAIN_BATCH_SIZE, rng)
    full = [batch for batch in grouped if len(batch) == TRAIN_BATCH_SIZE]
    chosen = rng.sample(full, count // TRAIN_BATCH_SIZE)
    train_texts = [index for batch in chosen for index in batch]
    shuffled = rng.sample(train_texts, len(train_texts))
    sample = rng.sample(range(len(lengths)), count)
    by_length = sorted(sample, key=lambda index: -lengths[index])
    return {
        ("train", "random"): fixed_size(shuffled, TRAIN_BATCH_SIZE),
        ("train", "by length"): chosen,
        ("inference", "random"): fixed_size(sample, EVAL_BATCH_SIZE),
        ("inference", "by length"): length_sorted_batches(by_length, lengths, EVAL_BATCH_SIZE),
    }


def fixed_size(order: list[int], size: int) -> list[list[int]]:
    return [order[start : start + size] for start in range(0, len(order), size)]


def batches(encoded: list[list[int]], groups: list[list[int]], pad_id: int) -> list[dict[str, torch.Tensor]]:
    out = []
    for group in groups:
        rows = [encoded[index] for index in group]
        width = max(len(row) for row in rows)
        ids = torch.full((len(rows), width), pad_id)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for number, row in enumerate(rows):
            ids[number, : len(row)] = torch.tensor(row)
            mask[number, : len(row)] = 1
        out.append(
            {"input_ids": ids, "attention_mask": mask, "labels": torch.zeros(len(rows), dtype=torch.long)}
        )
    return out


LAYOUT = packing.PackedLayout  # rows as long as the batch's longest text


class OneRowLayout(LAYOUT):
    """Every text of the batch in one row (flash-attention varlen's layout), here still with a mask."""

    def __init__(self, attention_mask, one_row=False):
        super().__init__(attention_mask, one_row=True)


def computed_positions(batch, mode: str) -> int:
    """Positions the backbone computes for ``batch`` in ``mode``."""
    mask = batch["attention_mask"]
    if "packed" not in mode:
        return mask.numel()
    layout = (OneRowLayout if "one row" in mode else LAYOUT)(mask)
    return layout.num_rows * layout.width


def run(model, data: list[dict], mode: str, phase: str) -> float:
    """Seconds to run ``data`` once in ``mode``."""
    model.config.packed_batches = "packed" in mode
    packing.PackedLayout = OneRowLayout if "one row" in mode else LAYOUT
    model.train(phase == "train")
    start = time.perf_counter()
    for batch in data:
        if phase == "train":
            model(**batch).loss.backward()
            model.zero_grad(set_to_none=True)
        else:
            with torch.no_grad():
                model(**batch)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, help="also write the table (markdown) here")
    add_backbone_argument(parser)
    args = parser.parse_args(argv)

    path = resolve_backbone("bench/packing.py", args.backbone)
    tokenizer = AutoTokenizer.from_pretrained(path)
    texts, source = corpus(args.seed)
    encoded = tokenizer(texts, truncation=True, max_length=MAX_SEQ_LENGTH)["input_ids"]
    torch.manual_seed(args.seed)
    model = PooledForSequenceClassification.from_backbone(path, pooling="mean", num_labels=4)
    rng = random.Random(args.seed)
    order_of = orders([len(ids) for ids in encoded], args.texts, args.seed)
    data = {
        (phase, order): batches(encoded, groups, tokenizer.pad_token_id)
        for (phase, order), groups in order_of.items()
    }

    def data_for(phase, mode):
        return data[phase, mode.split(", ")[0]]

    # Same vectors before timing anything: packing changes the speed, never the result.
    model.eval()
    check = data["inference", "random"][0]
    with torch.no_grad():
        model.config.packed_batches = False
        padded = model(**check).logits
        model.config.packed_batches = True
        packed = model(**check).logits
    difference = float((padded - packed).abs().max())

    seconds = {(phase, mode): [] for phase in PHASES for mode in MODES}
    for phase in PHASES:  # warm-up
        for mode in MODES:
            run(model, data_for(phase, mode)[:2], mode, phase)
    for round_number in range(args.rounds):
        for phase in PHASES:
            for mode in rng.sample(MODES, len(MODES)):
                seconds[phase, mode].append(run(model, data_for(phase, mode), mode, phase))
        print(f"round {round_number + 1}/{args.rounds} done", file=sys.stderr)

    texts_of = {phase: [index for batch in order_of[phase, "random"] for index in batch] for phase in PHASES}
    lengths = [len(encoded[index]) for phase in PHASES for index in texts_of[phase]]
    sorted_lengths = sorted(lengths)
    lines = [
        f"{args.texts} texts per phase from {source}, {shown(args.backbone)} (mean pooling), {torch.get_num_threads()} torch thread(s), "
        f"{args.rounds} rounds; tokens per text: median {sorted_lengths[len(lengths) // 2]}, "
        f"90th percentile {sorted_lengths[int(len(lengths) * 0.9)]}, max {sorted_lengths[-1]}; "
        f"packed vs padded logits differ by at most {difference:.1e}.",
        "",
        "| phase | batches | real tokens / computed | samples/s (median) | speed vs by length, padded |",
        "|---|---|---|---|---|",
    ]
    for phase in PHASES:
        for mode in MODES:
            batches_ = data_for(phase, mode)
            real = sum(int(batch["attention_mask"].sum()) for batch in batches_)
            computed = sum(computed_positions(batch, mode) for batch in batches_)
            speed = len(texts_of[phase]) / statistics.median(seconds[phase, mode])
            ratio = statistics.median(
                base / own for base, own in zip(seconds[phase, BASELINE], seconds[phase, mode], strict=True)
            )
            lines.append(f"| {phase} | {mode} | {real / computed:.0%} | {speed:.1f} | {ratio:.2f}x |")
    table = "\n".join(lines)
    print(table)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
