"""Document mode's inputs: texts cut into overlapping windows, and the flat batch a document model reads.

A text's tokens are cut into windows of ``document_window`` tokens, the tokenizer's special tokens added to every
window, consecutive windows sharing ``document_stride`` tokens: the tokenizer's own ``return_overflowing_tokens``
with ``stride``, so a text that fits in one window gets exactly the ids ``tokenizer(text)`` gives it, and every window
starts with ``[CLS]``/``<s>`` and runs at the backbone's first positions (the model counts positions from each row's
mask: RoBERTa's offset past ``padding_idx``, and ModernBERT's local attention window, both per row).

A batch travels flat: ``input_ids`` / ``attention_mask`` ``[total_windows, L]`` hold every window of the batch's
documents (no all-padding window), and ``document_windows`` ``[documents, max_windows]`` holds, for each document in
order, the rows of its windows in order, then -1. Shapes come from the layout tensor, not from its values, so a
compiled model needs no ``int(tensor.max())``.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "WINDOW_KEEPING",
    "tokenize_documents",
    "select_windows",
    "DocumentCollator",
    "document_windows_from",
    "document_batch",
    "WindowedText",
]

# Which windows a document capped at max_windows keeps: its first ones, its first and last ones, or ones spread
# evenly from its first to its last.
WINDOW_KEEPING = ("start", "start_end", "spread")
# The inputs a window carries (the tokenizer's; the mask is rebuilt when a batch is padded).
WINDOW_INPUTS = ("input_ids", "token_type_ids")


def select_windows(count: int, max_windows: int | None, keep: str = "start") -> list[int]:
    """The indices of the windows a document of ``count`` windows keeps under a cap of ``max_windows`` (None: all)."""
    if keep not in WINDOW_KEEPING:
        raise ValueError(f"Unknown keep={keep!r}. Valid choices: {', '.join(WINDOW_KEEPING)}.")
    if max_windows is not None and (
        isinstance(max_windows, bool) or not isinstance(max_windows, int) or max_windows < 1
    ):
        raise ValueError(
            f"max_windows must be an integer >= 1 (the most windows a document keeps) or None (all), got {max_windows!r}."
        )
    if max_windows is None or count <= max_windows:
        return list(range(count))
    if keep == "start":
        return list(range(max_windows))
    if keep == "start_end":
        head = (max_windows + 1) // 2
        return list(range(head)) + list(range(count - (max_windows - head), count))
    if max_windows == 1:
        return [0]
    return sorted({round(i * (count - 1) / (max_windows - 1)) for i in range(max_windows)})


def tokenize_documents(
    tokenizer,
    texts: Sequence[str],
    window: int,
    stride: int,
    max_windows: int | None = None,
    keep: str = "start",
) -> dict[str, list[list[list[int]]]]:
    """Each text's windows: ``{"input_ids": [text][window][token], "token_type_ids": ...}`` (token type ids where the
    tokenizer makes them), unpadded.

    Args:
        tokenizer: a fast tokenizer (``return_overflowing_tokens`` cuts the windows).
        texts: the documents.
        window: the tokens of one window, special tokens included (the config's ``document_window``).
        stride: the tokens consecutive windows share (``document_stride``).
        max_windows: keep at most this many windows of a document (None: every window), chosen by ``keep``.
        keep: which windows a capped document keeps: one of ``WINDOW_KEEPING``.

    An empty text, or one of special tokens only, is refused: it has no window to read.
    """
    if isinstance(texts, str):
        raise ValueError("tokenize_documents takes a list of texts; wrap a single text in a list.")
    content = window - tokenizer.num_special_tokens_to_add(pair=False)
    if content < 1 or not 0 <= stride < content:
        raise ValueError(
            f"document_stride={stride} must be smaller than the text tokens of a window: document_window={window} "
            f"less the tokenizer's {window - content} special tokens = {content}; valid strides: 0 to {content - 1}."
        )
    if not texts:
        return {"input_ids": []}
    encoded = _overflowing(tokenizer, list(texts), window, stride)
    names = [name for name in WINDOW_INPUTS if name in encoded]
    documents: dict[str, list[list[list[int]]]] = {name: [[] for _ in texts] for name in names}
    special = set(
        tokenizer.all_special_ids
    )  # "[SEP]" written in a text is tokenized as the special token itself
    real_tokens = [0] * len(texts)
    for row, text_index in enumerate(encoded["overflow_to_sample_mapping"]):
        for name in names:
            documents[name][text_index].append(list(encoded[name][row]))
        real_tokens[text_index] += sum(token not in special for token in encoded["input_ids"][row])
    for index, count in enumerate(real_tokens):
        if count == 0:
            raise ValueError(
                f"texts[{index}] = {texts[index][:60]!r} has no token besides the tokenizer's special tokens: a document "
                "model reads a document's windows, and an empty text has none. Remove empty texts (or give them text)."
            )
    for index in range(len(texts)):
        kept = select_windows(len(documents[names[0]][index]), max_windows, keep)
        for name in names:
            documents[name][index] = [documents[name][index][k] for k in kept]
    return documents


def _overflowing(tokenizer, texts: list[str], window: int, stride: int):
    """The tokenizer's windows (read from its start, whatever its ``truncation_side``)."""
    side = getattr(tokenizer, "truncation_side", "right")
    tokenizer.truncation_side = "right"
    try:
        return tokenizer(
            texts,
            max_length=window,
            truncation=True,
            stride=stride,
            return_overflowing_tokens=True,
            return_attention_mask=False,
            padding=False,
        )
    finally:
        tokenizer.truncation_side = side


def document_batch(
    documents: Sequence[dict[str, list[list[int]]]],
    pad_token_id: int,
    padding_side: str = "right",
    pad_to_multiple_of: int | None = None,
) -> dict[str, torch.Tensor]:
    """The flat batch of ``documents`` (each ``{"input_ids": [window][token], ...}``): ``input_ids``,
    ``attention_mask`` (and ``token_type_ids``) ``[total_windows, L]`` and ``document_windows``."""
    if padding_side not in ("right", "left"):
        raise ValueError(f"Unknown padding_side={padding_side!r}. Valid choices: right, left.")
    windows = [window for document in documents for window in document["input_ids"]]
    counts = [len(document["input_ids"]) for document in documents]
    for index, count in enumerate(counts):
        if count == 0:
            raise ValueError(f"documents[{index}] has no window: an empty text has none to read.")
    width = max((len(window) for window in windows), default=1)
    if pad_to_multiple_of:
        width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
    names = [name for name in WINDOW_INPUTS if all(name in document for document in documents)]
    batch = {
        name: torch.full((len(windows), width), pad_token_id if name == "input_ids" else 0) for name in names
    }
    batch["attention_mask"] = torch.zeros(len(windows), width, dtype=torch.long)
    for name in names:
        rows = [window for document in documents for window in document[name]]
        for row, values in enumerate(rows):
            span = slice(0, len(values)) if padding_side == "right" else slice(width - len(values), width)
            batch[name][row, span] = torch.tensor(values, dtype=torch.long)
            if name == "input_ids":
                batch["attention_mask"][row, span] = 1
    # The layout first: Trainer counts a batch's rows from its first tensor (find_batch_size), and weights the
    # evaluation loss by them: one row per document, not per window.
    return {"document_windows": _layout(counts), **batch}


def _layout(counts: list[int]) -> torch.Tensor:
    layout = torch.full((len(counts), max(counts, default=0)), -1, dtype=torch.long)
    start = 0
    for document, count in enumerate(counts):
        layout[document, :count] = torch.arange(start, start + count)
        start += count
    return layout


def document_windows_from(window_document: torch.Tensor | Sequence[int]) -> torch.Tensor:
    """``document_windows`` from a window-to-document index (the tokenizer's ``overflow_to_sample_mapping``: the
    document of every row, documents numbered from 0 in order, each document's windows in a row)."""
    index = torch.as_tensor(window_document, dtype=torch.long).reshape(-1)
    if index.numel() and (
        index[0] != 0 or ((index[1:] - index[:-1]) < 0).any() or ((index[1:] - index[:-1]) > 1).any()
    ):
        raise ValueError(
            "window_document must number the documents from 0 in order, each document's windows next to each other "
            "(as overflow_to_sample_mapping does)."
        )
    return _layout(torch.bincount(index).tolist() if index.numel() else [])


class DocumentCollator:
    """A ``data_collator`` for ``Trainer``: rows of whole documents -> the flat batch a document model reads.

    A row holds its document's windows (``tokenize_documents`` per row: ``input_ids`` ``[window][token]``, maybe
    ``token_type_ids``) and its ``labels`` (or ``label``); the batch is ``input_ids`` / ``attention_mask`` (/
    ``token_type_ids``) ``[total_windows, L]``, ``document_windows`` ``[documents, max_windows]`` and ``labels``, one
    per document (integers stay ``torch.long``, numbers ``float``).

    Args:
        tokenizer: gives the pad token id and the padding side (or give ``pad_token_id``).
        pad_token_id: the id padding windows get (default: the tokenizer's, else 0).
        padding_side: ``"right"`` or ``"left"`` (default: the tokenizer's, else right).
        pad_to_multiple_of: pad the window length to a multiple of this (tensor cores like multiples of 8).

    Every window a row holds is read: a document is capped where it is tokenized (``tokenize_documents``'s
    ``max_windows`` and ``keep``), once.
    """

    def __init__(
        self,
        tokenizer=None,
        pad_token_id: int | None = None,
        padding_side: str | None = None,
        pad_to_multiple_of: int | None = None,
    ):
        if pad_token_id is None:
            pad_token_id = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = 0 if pad_token_id is None else pad_token_id
        self.padding_side = padding_side or getattr(tokenizer, "padding_side", None) or "right"
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        documents = []
        for index, feature in enumerate(features):
            windows = feature.get("input_ids")
            if not windows or not isinstance(windows[0], (list, tuple)) and not torch.is_tensor(windows[0]):
                raise ValueError(
                    f"features[{index}]['input_ids'] must be a document's windows (a list of token id lists, as "
                    "tokenize_documents gives per text), with at least one window."
                )
            documents.append(
                {
                    name: [list(window) for window in feature[name]]
                    for name in WINDOW_INPUTS
                    if name in feature
                }
            )
        batch = document_batch(documents, self.pad_token_id, self.padding_side, self.pad_to_multiple_of)
        label_key = "labels" if "labels" in features[0] else "label" if "label" in features[0] else None
        if label_key is not None:
            labels = [feature[label_key] for feature in features]
            batch["labels"] = torch.stack(labels) if torch.is_tensor(labels[0]) else torch.tensor(labels)
        return batch


class WindowedText:
    """One text's windows on their way through a pipeline's batching: not a tensor, so that transformers' collation
    lists a batch's documents (it would pad tensors as one-row inputs) and the pipeline's forward builds their flat
    batch (:meth:`batch`)."""

    def __init__(self, windows: dict[str, list[list[int]]]):
        self.windows = windows

    @classmethod
    def of(cls, text: str, tokenizer, config) -> WindowedText:
        windows = tokenize_documents(tokenizer, [text], config.document_window, config.document_stride)
        return cls({name: values[0] for name, values in windows.items()})

    @staticmethod
    def batch(documents, pad_token_id: int | None, device) -> dict[str, torch.Tensor]:
        """The flat batch of one ``WindowedText`` or a list of them (what the pipeline's collation gives), on
        ``device``."""
        documents = documents if isinstance(documents, list) else [documents]
        batch = document_batch(
            [document.windows for document in documents], 0 if pad_token_id is None else pad_token_id
        )
        return {name: tensor.to(device) for name, tensor in batch.items()}
