"""The training room: train.py's CLI over Trainer (``python -m pooled_models.train``, ``pooled-train``). Imports the
model room, never the reverse. It needs the ``[train]`` extra; without it, importing this package says so in one
line instead of failing somewhere inside."""

from importlib.util import find_spec

# Import name -> what to pip install (find_spec looks without importing).
_NEEDED = {
    "datasets": "datasets",
    "accelerate": "accelerate",
    "yaml": "pyyaml",
    "sklearn": "scikit-learn",
    "scipy": "scipy",
    "jinja2": "jinja2",
}
_missing = [package for module, package in _NEEDED.items() if find_spec(module) is None]
if _missing:
    raise ImportError(
        f"pooled_models' training CLI needs {', '.join(_missing)}: pip install 'pooled_models[train]'"
    )
