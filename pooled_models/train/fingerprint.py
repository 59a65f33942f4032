"""A fingerprint for tokenizing a dataset, without pickling the tokenizer.

``datasets.Dataset.map`` names its result (the fingerprint that keys its cache) by hashing the function with dill,
which pickles whatever the function closes over: the tokenizer, vocabulary included, takes 0.7 s a split for a BERT
vocabulary, several seconds of every train.py start. This hashes what decides the result instead: the dataset's
own fingerprint, the source of the module the function is written in (the function and the helpers it calls), the
tokenizer's serialised form and settings, and every other value the function closes over.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

from datasets import Dataset
from datasets.fingerprint import Hasher

__all__ = ["tokenizing_fingerprint"]


def tokenizing_fingerprint(dataset: Dataset, function: Callable, tokenizer) -> str | None:
    """The ``new_fingerprint`` for ``dataset.map(function)``, or None (let datasets hash it) when the tokenizer has
    no serialised form (a slow tokenizer) or the dataset no fingerprint."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not getattr(dataset, "_fingerprint", None):
        return None
    closure = {
        name: None if cell.cell_contents is tokenizer else cell.cell_contents
        for name, cell in zip(function.__code__.co_freevars, function.__closure__ or (), strict=True)
    }
    return Hasher.hash(
        [
            dataset._fingerprint,
            function.__qualname__,
            Path(inspect.getfile(function)).read_bytes(),
            backend.to_str(),
            repr(
                tokenizer
            ),  # class, model_max_length, padding and truncation sides, special and added tokens
            closure,
        ]
    )
