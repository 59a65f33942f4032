"""The sweep room: one model per pooling plus baselines, and a report (``python -m pooled_models.sweep``,
``pooled-sweep``). A client of the training room; needs the ``[sweep]`` extra, and says so in one line without it."""

from importlib.util import find_spec

from .. import train  # noqa: F401  (the sweep runs train.py's runs: its extra's check comes first)

_missing = [
    package
    for module, package in {
        "matplotlib": "matplotlib",
        "sentence_transformers": "sentence-transformers",
    }.items()
    if find_spec(module) is None
]
if _missing:
    raise ImportError(f"pooled_models' sweep needs {', '.join(_missing)}: pip install 'pooled_models[sweep]'")
