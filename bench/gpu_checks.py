"""bench/gpu.py's checks on the GPU, before anything is timed.

Parity: a pooled classifier's logits and gradients on a batch of real texts, padding-free with torch's varlen
kernel against the padded batch through sdpa, both in bf16 autocast as training runs them, each against the same
model in float32 (sdpa, no autocast). bf16 keeps 8 bits of mantissa, so each bf16 path lands about 1e-2 from float32
after a dozen layers, whichever kernel runs; the padding-free path passes where its distance from float32 is at most
twice the padded bf16 path's (plus 1e-3), and its gradient points the padded path's way (cosine >= 0.99). A layout
bug (a token pooled into the wrong text, a text attending to another) moves it by far more.

Host synchronisations: ``torch.cuda.set_sync_debug_mode("warn")`` during a few training steps of train.py (its
defaults) and of a plain Trainer; each synchronising call warns once per step, with the Python line it came from.
"""

from __future__ import annotations

import warnings

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
    return outputs.logits.float().detach(), gradient


def _relative(value: torch.Tensor, reference: torch.Tensor) -> float:
    return float((value - reference).norm() / reference.norm().clamp_min(1e-12))


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
