"""The embedding room: sentence-transformers folders from a pooled model (``export_sentence_transformers``), the
labelled similarity heatmap (``save_similarity_heatmap``) and the embedding CLI (``python -m pooled_models.embed``,
``pooled-embed``): texts in, embeddings, similarities and a heatmap out. Imports the model room, never the training
room or the sweep. It needs the ``[embed]`` extra; without it, importing this package says so in one line instead
of failing somewhere inside."""

from importlib.util import find_spec

# Import name -> what to pip install (find_spec looks without importing).
_NEEDED = {"sentence_transformers": "sentence-transformers", "matplotlib": "matplotlib"}
_missing = [package for module, package in _NEEDED.items() if find_spec(module) is None]
if _missing:
    raise ImportError(
        f"pooled_models' embedding tools need {', '.join(_missing)}: pip install 'pooled_models[embed]'"
    )

from .export import (  # noqa: E402  (after the check: a missing extra is named before anything fails)
    MODULE_CHOICES,
    NATIVE_POOLING_MODES,
    ExportError,
    export_sentence_transformers,
    sentence_transformers_route,
)
from .heatmap import MAX_TEXTS, save_similarity_heatmap  # noqa: E402

__all__ = [
    "export_sentence_transformers",
    "sentence_transformers_route",
    "ExportError",
    "NATIVE_POOLING_MODES",
    "MODULE_CHOICES",
    "save_similarity_heatmap",
    "MAX_TEXTS",
]
