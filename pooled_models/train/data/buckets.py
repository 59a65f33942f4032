"""Length buckets (``--pad_to_buckets``): every padded batch padded to one of a few lengths chosen from the training
texts' lengths, so that a compiled model (``--torch_compile``) meets a few shapes, each compiled (and, with CUDA
graphs, recorded) once, instead of one per batch length, while a batch of short texts still pads little.

The lengths are quantiles of the training texts' token counts, rounded up to a multiple of ``BUCKET_MULTIPLE``
(tensor cores work in multiples of 8), the last one the longest text's (rounded up likewise), none past the run's
text length. A batch is padded to the smallest bucket at least as long as its longest text; a longer batch (an
evaluation text longer than every training text) to the run's text length."""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from collections.abc import Sequence

__all__ = ["BUCKET_MULTIPLE", "bucket_lengths", "bucket_for", "warm_up_rows"]

# Bucket lengths are rounded up to a multiple of this many tokens (tensor-core tiles; a few tokens of padding).
BUCKET_MULTIPLE = 8


def bucket_lengths(lengths: Sequence[int], count: int, max_length: int) -> tuple[int, ...]:
    """At most ``count`` bucket lengths, increasing, for texts of ``lengths`` tokens: the ``i/count`` quantiles of
    the lengths (i = 1..count, the last the longest text), rounded up to a multiple of BUCKET_MULTIPLE and capped at
    ``max_length``; equal ones merged (short or uniform data yields fewer). Every text fits the last bucket."""
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}.")
    if not lengths:
        raise ValueError("bucket_lengths needs the lengths of at least one text.")
    ordered = sorted(max(int(length), 1) for length in lengths)
    buckets = set()
    for index in range(1, count + 1):
        # The length that index/count of the texts do not exceed (the last: the longest).
        quantile = ordered[math.ceil(index * len(ordered) / count) - 1]
        buckets.add(min(_round_up(quantile, BUCKET_MULTIPLE), max_length))
    return tuple(sorted(buckets))


def bucket_for(length: int, buckets: Sequence[int], max_length: int) -> int:
    """The smallest bucket at least ``length`` long; ``max_length`` for a longer batch (never shorter than
    ``length``: a text the run cut at max_length is never longer)."""
    position = bisect_left(buckets, length)
    return buckets[position] if position < len(buckets) else max(max_length, length)


def warm_up_rows(
    lengths: Sequence[int], buckets: Sequence[int], batch_size: int, seed: int = 0
) -> list[list[int]]:
    """One batch of ``batch_size`` training rows per bucket, whose longest text pads to that bucket: the longest
    rows that fit it (drawn again where fewer rows fit than a batch holds), so that compiling the model on them
    meets exactly the shapes the run's batches have. Buckets no text pads to are left out."""
    rng = random.Random(seed)
    by_length = sorted(range(len(lengths)), key=lambda row: -lengths[row])
    batches = []
    below = 0
    for bucket in buckets:
        fitting = [row for row in by_length if below < max(lengths[row], 1) <= bucket]
        if fitting:
            shorter = [row for row in by_length if max(lengths[row], 1) <= below]
            rows = (fitting + shorter)[:batch_size]
            rows += [rng.choice(rows) for _ in range(batch_size - len(rows))]
            batches.append(rows)
        below = bucket
    return batches


def _round_up(number: int, multiple: int) -> int:
    return -(-number // multiple) * multiple
