"""The open label set's label vectors, kept across requests: a bounded, thread-safe, least-recently-used cache.

A label's vector (what ``label_text.LabelTextModelPooler`` returns for its prompt) depends on the label's text as the
model reads it (the request's template filled in) and on the model: nothing of the request's texts (``label_text_layers
=0``, the only label text vLLM serves). The zero-shot IO processor (``zero_shot.py``) keeps one cache per served model
(vLLM builds one IO processor per model), keyed by the label text; a request whose labels are all cached sends the
engine its texts only. vLLM calls ``pre_process`` on its event loop and ``post_process`` on worker threads, so every
read and write holds a lock; a request takes the vectors it found at ``pre_process`` along (references: eviction later
cannot take them from it).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

__all__ = ["LabelVectorCache", "MAX_CACHED_LABELS"]

# Label vectors kept per served model: 4,096 x hidden size float32 (6 MB for MiniLM's 384, 64 MB for a 4,096-wide
# decoder); real traffic asks about a few label sets again and again.
MAX_CACHED_LABELS = 4096


class LabelVectorCache:
    def __init__(self, max_entries: int = MAX_CACHED_LABELS):
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}.")
        self.max_entries = max_entries
        self._vectors: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._lock = threading.Lock()

    def lookup(self, keys: list[str]) -> dict[str, torch.Tensor]:
        """The cached vectors among ``keys`` (each marked as just used)."""
        found = {}
        with self._lock:
            for key in keys:
                vector = self._vectors.get(key)
                if vector is not None:
                    self._vectors.move_to_end(key)
                    found[key] = vector
        return found

    def store(self, vectors: dict[str, torch.Tensor]) -> None:
        """Keep ``vectors`` (key -> vector), dropping the least recently used beyond ``max_entries``."""
        with self._lock:
            for key, vector in vectors.items():
                self._vectors[key] = vector
                self._vectors.move_to_end(key)
            while len(self._vectors) > self.max_entries:
                self._vectors.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._vectors)
