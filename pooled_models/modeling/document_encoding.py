"""``encode`` of a model in document mode: one vector per document, every window read.

Documents are tokenized into windows (``documents.py``), sorted by their number of windows and batched by windows: a
batch holds whole documents up to ``batch_size`` windows (at least one document, however long), so a batch's memory
follows its windows, not its documents; the vectors come back in input order.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.nn import functional as F
from transformers.utils import logging

from .documents import document_batch, tokenize_documents

__all__ = ["encode_documents", "batches_by_windows", "embedded", "refuse_text_length"]


def batches_by_windows(window_counts: list[int], batch_size: int) -> Iterator[list[int]]:
    """Indices of documents, most windows first, in batches of at most ``batch_size`` windows (a longer document
    alone)."""
    order = sorted(range(len(window_counts)), key=lambda index: -window_counts[index])
    batch: list[int] = []
    windows = 0
    for index in order:
        if batch and windows + window_counts[index] > batch_size:
            yield batch
            batch, windows = [], 0
        batch.append(index)
        windows += window_counts[index]
    if batch:
        yield batch


def refuse_text_length(config, max_length: int | None) -> None:
    """A length to cut texts at has no use in document mode: the text is read whole, in the model's windows."""
    if max_length is not None:
        raise ValueError(
            f"max_length={max_length}: a model in document mode reads the whole text in windows of "
            f"document_window={config.document_window} tokens; set model.config.document_window instead."
        )


def embedded(model, batch: dict[str, torch.Tensor], label_index: int | None, normalize: bool) -> torch.Tensor:
    """``model.embed`` of a batch (moved to the model's device) as ``encode`` returns it: one label's vector where
    ``label_index`` is given, float32, normalised where asked."""
    vectors = model.embed(**{name: tensor.to(model.device) for name, tensor in batch.items()})
    if label_index is not None:
        vectors = vectors[:, label_index]
    vectors = vectors.float()
    return F.normalize(vectors, dim=-1) if normalize else vectors


def encode_documents(
    model,
    texts: list,
    tokenizer,
    *,
    batch_size: int,
    label_index: int | None,
    normalize: bool,
    output_device: torch.device,
    show_progress_bar: bool = False,
) -> torch.Tensor | None:
    """The float32 vectors of ``texts`` (documents) in their order, None for no text."""
    if any(not isinstance(text, str) for text in texts):
        bad = next(index for index, text in enumerate(texts) if not isinstance(text, str))
        raise ValueError(
            f"sentences[{bad}] is {texts[bad]!r}: a model in document mode (document_window="
            f"{model.config.document_window}) encodes single texts, not pairs."
        )
    if not texts:
        return None
    config = model.config
    documents = tokenize_documents(tokenizer, texts, config.document_window, config.document_stride)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else model.pad_token_id
    names = list(documents)
    result = None
    progress = logging.tqdm(total=len(texts), disable=not show_progress_bar, desc="Encoding", unit="document")
    try:
        for rows in batches_by_windows([len(windows) for windows in documents["input_ids"]], batch_size):
            batch = document_batch([{name: documents[name][row] for name in names} for row in rows], pad_id)
            vectors = embedded(model, batch, label_index, normalize)
            if result is None:
                result = torch.empty(
                    (len(texts), *vectors.shape[1:]), dtype=torch.float32, device=output_device
                )
            result[torch.as_tensor(rows)] = vectors.to(output_device)
            progress.update(len(rows))
    finally:
        progress.close()
    return result
