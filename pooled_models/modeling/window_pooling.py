"""Cross-window pooling (document mode): the vectors of a document's windows -> one vector per document.

A document model runs every window of a document through the backbone and the model's own pooler, which gives one
vector per window (``[W, D]``, or ``[W, labels, D]`` for label tokens and label text); the cross-window pooler chosen by
``document_pooling`` reduces them to the document's vector, which the head reads. Every reduction works slot by slot:
a per-label pooling's label vectors are pooled across windows label by label.

The poolers take the windows in the ``[documents, max_windows, ...]`` layout with a mask of real windows
(``documents.py`` gathers them from the flat batch), so no reduction depends on how many padded windows a document
has next to its batch mates: max ignores padded windows even where every real value is negative, the softmax of
attention gives them no weight, the transformer's attention cannot see them.

``transformer`` starts as the identity (its residual branches' output projections start at zero, as ReZero and
Fixup do), so a classifier put into document mode starts with the scores it had; its window positions are sinusoidal
(no table, so no cap on a document's windows at prediction), scaled by a learned number.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.utils import logging

from .inputs import checks_values
from .pooling import attention_pool, reduce_max, reduce_mean, require_int
from .registry import Component, Registry

__all__ = [
    "reads_documents",
    "WINDOW_POOLINGS",
    "WindowPooler",
    "sinusoidal_positions",
    "default_transformer_heads",
    "gather_documents",
    "document_gate_parameters",
    "check_document_windows",
    "DocumentPooler",
    "NoDocuments",
    "build_document_pooler",
    "warn_rows_may_be_cut",
]

logger = logging.get_logger(__name__)

WINDOW_POOLINGS = Registry("document_pooling")
# The start of the learned scale of the transformer's sinusoidal window positions: small next to a pooled vector.
POSITION_SCALE_START = 0.1


def sinusoidal_positions(count: int, width: int, device, dtype) -> torch.Tensor:
    """``[count, width]``: Vaswani et al.'s sine/cosine encoding of positions 0..count-1 (an odd width ends in a
    sine), less that of position 0, so that the first window's vector is left as it is (a one-window document keeps
    the vector it has without document mode)."""
    positions = torch.arange(count, device=device, dtype=torch.float32).unsqueeze(1)
    frequencies = torch.exp(
        torch.arange(0, width, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / max(width, 1))
    )
    table = torch.zeros(count, width, device=device, dtype=torch.float32)
    table[:, 0::2] = torch.sin(positions * frequencies)
    table[:, 1::2] = torch.cos(positions * frequencies[: width // 2])
    return (table - table[:1]).to(dtype)


def default_transformer_heads(width: int) -> int:
    """64 dimensions per head where the width allows it (BERT's), else the largest divisor of the width up to 8."""
    if width % 64 == 0:
        return width // 64
    return max(heads for heads in range(1, 9) if width % heads == 0)


class WindowPooler(nn.Module, Component):
    """Base class: ``forward(vectors [B, W, *slots, D], mask [B, W])`` -> ``[B, *slots, D]``. Subclasses implement
    ``reduce([N, W, D], [N, W]) -> [N, D]`` on windows of one slot."""

    def __init__(self, config, width: int):
        super().__init__()
        self.width = width

    def init_parameters(self, config, input_embeddings: nn.Module | None = None) -> None:
        """Parameters ``PreTrainedModel._init_weights`` does not set as this pooler needs; none by default."""

    def forward(self, vectors: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        documents, windows = vectors.shape[:2]
        slots = vectors.shape[2:-1]
        # [B, W, *slots, D] -> [B * slots, W, D]: each slot (label) pooled across windows on its own.
        per_slot = vectors.movedim(1, -2).reshape(-1, windows, vectors.shape[-1])
        slot_count = per_slot.shape[0] // max(documents, 1)
        slot_mask = mask.bool().repeat_interleave(slot_count, dim=0)
        pooled = self.reduce(per_slot, slot_mask)
        return pooled.reshape(documents, *slots, pooled.shape[-1])

    def reduce(self, vectors: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


@WINDOW_POOLINGS.register("mean")
class MeanWindowPooler(WindowPooler):
    """The mean of the windows' vectors, every window counted once (the token mean's reduction, float32 sums)."""

    def reduce(self, vectors, mask):
        return reduce_mean(vectors, mask)


@WINDOW_POOLINGS.register("max")
class MaxWindowPooler(WindowPooler):
    """The element-wise maximum over the windows (the cross-segment pooling of LexGLUE's hierarchical models)."""

    def reduce(self, vectors, mask):
        return reduce_max(vectors, mask)  # padded windows never win, as padded tokens


@WINDOW_POOLINGS.register("attention")
class AttentionWindowPooler(WindowPooler):
    """A learned weighting of the windows: scores from ``Linear -> Tanh -> Linear``, softmax over the real windows."""

    def __init__(self, config, width):
        super().__init__(config, width)
        # Not named "score": PEFT would train and save it a second time on its own (see pooling.AttentionPooler).
        self.scorer = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 1))

    def reduce(self, vectors, mask):
        return attention_pool(self.scorer(vectors), vectors, mask)[:, 0]


@WINDOW_POOLINGS.register("first_plus_rest")
class FirstPlusRestWindowPooler(AttentionWindowPooler):
    """The first window's vector, plus the attention-weighted mean of the other windows (``attention``'s scorer)
    through a learned gate, one number per dimension, that starts at zero: the model starts as the model cut at one
    window, and the rest of the document adds only what training finds it worth. Why: on manual pages a page's first
    window says the most, and the mean or a free attention over every window trained below the cut model
    (docs/long-documents.md)."""

    def __init__(self, config, width):
        super().__init__(config, width)
        self.gate = nn.Parameter(torch.zeros(width))

    def init_parameters(self, config, input_embeddings=None) -> None:
        init.zeros_(self.gate)

    def reduce(self, vectors, mask):
        later = torch.arange(vectors.shape[1], device=vectors.device) > 0
        rest_mask = mask & later
        # A document of one window has no rest: every score is masked, and the weighted sum of zeroed values is 0.
        rest = super().reduce(vectors, rest_mask)
        return vectors[:, 0] + self.gate.to(vectors.dtype) * rest


def document_gate_parameters(model) -> set[int]:
    """ids of the gates of every ``first_plus_rest`` pooler in ``model`` (PEFT's trained copies included): an
    optimizer gives them a rate of their own (train.py's ``--document_gate_learning_rate``)."""
    return {id(module.gate) for module in model.modules() if isinstance(module, FirstPlusRestWindowPooler)}


class WindowTransformerLayer(nn.Module):
    """A pre-norm transformer layer over a document's windows, attending to real windows only."""

    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.attention_norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.attention_output = nn.Linear(width, width)
        self.feed_forward_norm = nn.LayerNorm(width)
        self.feed_forward = nn.Linear(width, 2 * width)
        self.feed_forward_output = nn.Linear(2 * width, width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, states: torch.Tensor, attends: torch.Tensor) -> torch.Tensor:
        """``states [N, W, D]``; ``attends [N, 1, 1, W]`` (True: a key window that may be attended to)."""
        count, windows, width = states.shape
        query, key, value = self.qkv(self.attention_norm(states)).chunk(3, dim=-1)
        split = [
            t.reshape(count, windows, self.heads, width // self.heads).transpose(1, 2)
            for t in (query, key, value)
        ]
        attended = F.scaled_dot_product_attention(*split, attn_mask=attends)
        attended = attended.transpose(1, 2).reshape(count, windows, width)
        states = states + self.dropout(self.attention_output(attended))
        hidden = F.gelu(self.feed_forward(self.feed_forward_norm(states)))
        return states + self.dropout(self.feed_forward_output(self.dropout(hidden)))


@WINDOW_POOLINGS.register("transformer")
class TransformerWindowPooler(WindowPooler):
    """A small transformer over the windows' vectors with their positions (hierarchical BERT, Chalkidis et al. 2022;
    Dai et al. 2022), then the maximum over the real windows."""

    # document_transformer_heads unset: chosen from the width when the pooler is built (the width is the model's
    # pooler's, which the config does not state)
    config_options = {"document_transformer_layers": 2, "document_transformer_heads": None}

    @classmethod
    def check_config(cls, config):
        require_int("document_transformer_layers", config.document_transformer_layers, 1)
        if config.document_transformer_heads is not None:
            require_int("document_transformer_heads", config.document_transformer_heads, 1)

    def __init__(self, config, width):
        super().__init__(config, width)
        heads = config.document_transformer_heads or default_transformer_heads(width)
        if width % heads:
            raise ValueError(
                f"document_transformer_heads={heads} must divide the width of the window vectors ({width}); "
                f"valid choices up to 8: {[h for h in range(1, 9) if width % h == 0]}."
            )
        dropout = float(getattr(config, "classifier_dropout", 0.0) or 0.0)
        self.layers = nn.ModuleList(
            WindowTransformerLayer(width, heads, dropout) for _ in range(config.document_transformer_layers)
        )
        self.position_scale = nn.Parameter(torch.tensor(POSITION_SCALE_START))

    def init_parameters(self, config, input_embeddings=None) -> None:
        init.constant_(self.position_scale, POSITION_SCALE_START)
        for layer in self.layers:  # the residual branches start at zero: the layers start as the identity
            for output in (layer.attention_output, layer.feed_forward_output):
                init.zeros_(output.weight)
                init.zeros_(output.bias)

    def reduce(self, vectors, mask):
        count, windows, width = vectors.shape
        positions = sinusoidal_positions(windows, width, vectors.device, vectors.dtype)
        states = vectors + self.position_scale.to(vectors.dtype) * positions
        # A document without a real window (only in a compiled graph, where the model cannot refuse it) attends to
        # all, so that no softmax runs over nothing (NaN); its vector is zeroed by the max below.
        keys = mask | ~mask.any(dim=1, keepdim=True)
        attends = keys[:, None, None, :]
        for layer in self.layers:
            states = layer(states, attends)
        return reduce_max(states, mask)


def gather_documents(
    vectors: torch.Tensor, document_windows: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The flat windows' vectors ``[N, ...]`` in the documents' layout ``[B, W, ...]`` and its mask ``[B, W]``:
    ``document_windows[b, k]`` is the flat index of document b's k-th window, -1 past its last. Shapes come from the
    index's, never from its values (no ``int(tensor.max())``), so the gather compiles and exports."""
    mask = document_windows >= 0
    gathered = vectors[document_windows.clamp(min=0)]
    fill = mask.reshape(*mask.shape, *([1] * (gathered.ndim - 2)))
    return gathered.masked_fill(~fill, 0.0), mask


def check_document_windows(document_windows: torch.Tensor, windows: int) -> None:
    """A document layout a model can pool: ``[documents, max_windows]`` integers, each document's windows first
    (indices of the flat batch's ``windows`` rows, each used once) and -1 after them, every document with a window."""
    if (
        document_windows.ndim != 2
        or document_windows.dtype.is_floating_point
        or document_windows.dtype == torch.bool
    ):
        raise ValueError(
            "document_windows must be an integer tensor [documents, max_windows] of window indices (-1: no window), "
            f"got dtype {document_windows.dtype} and shape {tuple(document_windows.shape)}."
        )
    if not checks_values():  # reads values back from the device: not in compiled graphs, nor where checked
        return
    real = document_windows >= 0
    problems = []
    if ((document_windows < -1) | (document_windows >= windows)).any():
        problems.append(f"indices must be -1 or a row of the batch's {windows} windows")
    elif int(real.sum()) != windows or document_windows[real].unique().numel() != windows:
        problems.append(f"each of the batch's {windows} windows must belong to exactly one document")
    if real.shape[1] == 0 or not bool(real[:, 0].all()):
        problems.append("every document needs at least one window (an empty text has none)")
    if real.shape[1] > 1 and bool((real[:, 1:] & ~real[:, :-1]).any()):
        problems.append("a document's -1 entries must come after its windows")
    if problems:
        raise ValueError(f"document_windows: {'; '.join(problems)}. Build batches with DocumentCollator.")


class DocumentPooler(nn.Module):
    """The flat batch's window vectors -> one vector per document, by the ``document_pooling`` chosen (under
    ``across``). Without ``document_windows`` every row is a document of one window."""

    def __init__(self, config, width: int):
        super().__init__()
        self.across = WINDOW_POOLINGS.lookup(config.document_pooling)(config, width)

    def forward(self, vectors: torch.Tensor, document_windows: torch.Tensor | None) -> torch.Tensor:
        if document_windows is None:
            one_window = torch.ones(vectors.shape[0], 1, dtype=torch.bool, device=vectors.device)
            return self.across(vectors.unsqueeze(1), one_window)
        check_document_windows(document_windows, vectors.shape[0])
        gathered, mask = gather_documents(vectors, document_windows.to(vectors.device))
        return self.across(gathered, mask)


class NoDocuments(nn.Module):
    """A model without document mode: the rows' vectors as they are; a document layout is refused."""

    def forward(self, vectors: torch.Tensor, document_windows: torch.Tensor | None) -> torch.Tensor:
        if document_windows is not None:
            raise ValueError(
                "document_windows was given, but this model has no document mode (document_window is unset): load "
                "it with from_pretrained(folder, document_window=...) to read documents in windows."
            )
        return vectors


def reads_documents(config) -> bool:
    """Whether ``config`` is in document mode (its window set): ``PooledConfig.reads_documents``, and the one test for
    any config (a multi-task or a plain transformers config has no window)."""
    return getattr(config, "document_window", None) is not None


def warn_rows_may_be_cut(model, rows: torch.Tensor | None, document_windows: torch.Tensor | None) -> None:
    """Warn once per model where a model in document mode reads rows as long as its window without
    ``document_windows``: each row is then a document of one window, so a text cut to fit (as sentence-transformers'
    ``SentenceTransformer(folder)`` cuts it at ``max_seq_length``) is read from its first window only, a different
    score from the whole document's. Shapes only (no value read back from the device); not in compiled graphs."""
    if not reads_documents(model.config) or document_windows is not None or rows is None:
        return
    if torch.compiler.is_compiling():
        return
    window = model.config.document_window
    if (
        rows.ndim < 2
        or rows.shape[1] < window - model.pooler.added_tokens
        or getattr(model, "_warned_cut", False)
    ):
        return
    model._warned_cut = True
    logger.warning(
        f"{type(model).__name__} is in document mode (document_window={window}) and got rows of {rows.shape[1]} "
        "tokens without document_windows: each row is read as a document of one window, so a text cut to fit is read "
        "from its first window only. pipeline(...), model.encode(...) and batches of DocumentCollator read every "
        "window of a document."
    )


def build_document_pooler(config, width: int) -> nn.Module:
    """The cross-window pooler of ``config`` (``document_pooling``), or ``NoDocuments`` outside document mode."""
    if not reads_documents(config):
        return NoDocuments()
    return DocumentPooler(config, width)
