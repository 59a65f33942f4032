"""bench/gpu.py's checks on the GPU, before anything is timed.

Parity: a pooled classifier's logits and gradients on a batch of real texts, padding-free with torch's varlen
kernel against the padded batch through sdpa, both in bf16 autocast as training runs them, each against the same
model in float32 (sdpa, no autocast). bf16 keeps 8 bits of mantissa, so each bf16 path lands about 1e-2 from float32
after a dozen layers, whichever kernel runs; the padding-free path passes where its distance from float32 is at most
twice the padded bf16 path's (plus 1e-3), and its gradient points the padded path's way (cosine >= 0.99). A layout
bug (a token pooled into the wrong text, a text attending to another) moves it by far more.

Compiled parity: the same pooled classifier eager and compiled as train.py compiles it on length buckets (static
shapes, CUDA graphs: ``mode="reduce-overhead"``), both in bf16 autocast: logits and gradients on one batch, then the
losses of a few hundred AdamW steps on the same batches from the same start. Compilation reorders and fuses bf16
arithmetic, so the two paths differ by about what bf16 rounding gives; a wrong graph (a stale CUDA graph replaying
another batch's inputs, a shape guard missed) differs by far more and diverges over the steps.

Host synchronisations: ``torch.cuda.set_sync_debug_mode("warn")`` during a few training steps of train.py (its
defaults) and of a plain Trainer; each synchronising call warns once per step, with the Python line it came from.
"""

from __future__ import annotations

import warnings
from unittest.mock import patch

import torch
from transformers import TrainerCallback

PARITY_TEXTS = 16


def parity(backbone: str, texts: list[str], pooling: str, max_length: int, device: str = "cuda") -> dict:
    """Logits and gradients of the padded (sdpa) and padding-free (torch_varlen) paths against float32 (``device``
    "cpu": the plumbing only, the attention then runs its per-text reference)."""
    from transformers import AutoTokenizer

    from pooled_models import TORCH_VARLEN, PooledForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(backbone)
    encoded = tokenizer(texts[:PARITY_TEXTS], truncation=True, max_length=max_length)
    padded = tokenizer.pad(encoded, return_tensors="pt").to(device)
    flat = _flat(encoded["input_ids"], device)
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(backbone, pooling=pooling, num_labels=4)
    model = model.to(device).eval()
    labels = torch.arange(len(encoded["input_ids"]), device=device) % 4
    reference = _logits_and_gradient(model, padded, labels, autocast=False)
    sdpa = _logits_and_gradient(model, padded, labels, autocast=True)
    model.get_backbone().set_attn_implementation(TORCH_VARLEN)
    varlen = _logits_and_gradient(model, flat, labels, autocast=True)
    model.get_backbone().set_attn_implementation("sdpa")
    figures = {
        "logits_sdpa_vs_fp32": _relative(sdpa[0], reference[0]),
        "logits_varlen_vs_fp32": _relative(varlen[0], reference[0]),
        "grad_sdpa_vs_fp32": _relative(sdpa[1], reference[1]),
        "grad_varlen_vs_fp32": _relative(varlen[1], reference[1]),
        "grad_cosine_varlen_sdpa": float(torch.nn.functional.cosine_similarity(varlen[1], sdpa[1], dim=0)),
        "texts": len(encoded["input_ids"]),
        "tokens": int(flat["input_ids"].numel()),
    }
    figures["passed"] = (
        figures["logits_varlen_vs_fp32"] <= 2 * figures["logits_sdpa_vs_fp32"] + 1e-3
        and figures["grad_varlen_vs_fp32"] <= 2 * figures["grad_sdpa_vs_fp32"] + 1e-3
        and figures["grad_cosine_varlen_sdpa"] >= 0.99
    )
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return figures


def _flat(rows: list[list[int]], device: str) -> dict:
    lengths = [len(ids) for ids in rows]
    boundaries = torch.tensor(
        [0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device
    )
    longest = max(lengths)
    ids = torch.tensor([token for ids in rows for token in ids], device=device).view(1, -1)
    return {
        "input_ids": ids,
        "cu_seq_lens_q": boundaries,
        "cu_seq_lens_k": boundaries,
        "max_length_q": longest,
        "max_length_k": longest,
    }


def _logits_and_gradient(model, batch, labels, autocast: bool):
    model.zero_grad(set_to_none=True)
    device = batch["input_ids"].device.type
    with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
        outputs = model(**batch, labels=labels)
    outputs.loss.backward()
    gradient = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
    return outputs.logits.float().detach().clone(), gradient  # a CUDA graph reuses its outputs' memory


def _relative(value: torch.Tensor, reference: torch.Tensor) -> float:
    return float((value - reference).norm() / reference.norm().clamp_min(1e-12))


def compiled_parity(
    backbone: str, texts: list[str], max_length: int, dry_run: bool = False, steps: int = 200
) -> dict:
    """Eager against compiled (train.py's way on buckets) on the GPU; ``dry_run``: dynamo's eager backend on the CPU,
    a few steps (the plumbing only)."""
    import torch._inductor.config
    from transformers import AutoTokenizer

    from pooled_models import PooledForSequenceClassification
    from pooled_models.train.data.buckets import bucket_lengths

    device = "cpu" if dry_run else "cuda"
    steps = 3 if dry_run else steps
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    encoded = tokenizer(texts[: PARITY_TEXTS * steps], truncation=True, max_length=max_length)["input_ids"]
    buckets = bucket_lengths([len(ids) for ids in encoded], 6, max_length)
    batches = _bucket_batches(tokenizer, encoded, buckets, max_length, steps, device)
    labels = torch.arange(PARITY_TEXTS, device=device) % 4
    models = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = PooledForSequenceClassification.from_backbone(backbone, pooling="mean", num_labels=4).to(
            device
        )
        model.train()
        if compiled:
            options = {"backend": "eager"} if dry_run else {"mode": "reduce-overhead"}
            model = torch.compile(model, dynamic=False, **options)
        models.append(model)
    first, losses = [], []
    # Dropout draws the same masks on both paths (inductor draws its own random numbers unless told to use torch's).
    with patch.object(torch._inductor.config, "fallback_random", True):
        for model in models:
            torch.manual_seed(1)
            first.append(
                _logits_and_gradient(model, batches[0], labels[: len(batches[0]["input_ids"])], True)
            )
            torch.manual_seed(2)
            losses.append(_losses(model, batches, labels))
    eager, compiled = (torch.tensor(curve) for curve in losses)
    figures = {
        "logits_compiled_vs_eager": _relative(first[1][0], first[0][0]),
        "grad_compiled_vs_eager": _relative(first[1][1], first[0][1]),
        "steps": steps,
        "loss_max_abs_difference": float((eager - compiled).abs().max()),
        "loss_first_last_eager": [float(eager[0]), float(eager[-1])],
        "loss_first_last_compiled": [float(compiled[0]), float(compiled[-1])],
        "buckets": list(buckets),
    }
    figures["passed"] = (
        figures["logits_compiled_vs_eager"] <= 5e-2
        and figures["grad_compiled_vs_eager"] <= 5e-2
        and figures["loss_max_abs_difference"] <= 0.1 * max(float(eager.abs().max()), 1e-3)
    )
    del models
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return figures


def _bucket_batches(tokenizer, encoded, buckets, max_length: int, steps: int, device: str) -> list[dict]:
    """``steps`` batches of PARITY_TEXTS texts each, padded to their length bucket as train.py pads them."""
    from pooled_models.train.data.buckets import bucket_for

    batches = []
    for start in range(0, PARITY_TEXTS * steps, PARITY_TEXTS):
        rows = encoded[start : start + PARITY_TEXTS] or encoded[:PARITY_TEXTS]
        width = bucket_for(max(map(len, rows)), buckets, max_length)
        padded = tokenizer.pad(
            {"input_ids": rows}, padding="max_length", max_length=width, return_tensors="pt"
        )
        batches.append({key: value.to(device) for key, value in padded.items()})
    return batches


def _losses(model, batches, labels) -> list[float]:
    """The training losses of AdamW steps on ``batches`` (one read back at the end, none per step)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    losses = []
    device = batches[0]["input_ids"].device.type
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(**batch, labels=labels[: len(batch["input_ids"])]).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().float().clone())
    return torch.stack(losses).tolist()


class SyncCounter(TrainerCallback):
    """Counts the host synchronisations of steps ``first .. last`` (torch's sync debug mode, in warn mode)."""

    def __init__(self, first: int = 3, last: int = 6):
        self.first, self.last = first, last
        self.sources: dict[str, int] = {}
        self.steps = 0
        self._recording = None

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.first - 1:
            self._recording = warnings.catch_warnings(record=True)
            self._log = self._recording.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")

    def on_step_end(self, args, state, control, **kwargs):
        if self._recording is None:
            return
        if state.global_step >= self.first:
            self.steps += 1
        if state.global_step == self.last:
            torch.cuda.set_sync_debug_mode("default")
            self._recording.__exit__(None, None, None)
            for record in self._log:
                if "synchroniz" in str(record.message):
                    where = f"{record.filename.rsplit('site-packages/', 1)[-1]}:{record.lineno}"
                    self.sources[where] = self.sources.get(where, 0) + 1
            self._recording = None
            control.should_training_stop = True

    def figures(self) -> dict:
        total = sum(self.sources.values())
        return {"per_step": total / max(self.steps, 1), "steps": self.steps, "sources": self.sources}
