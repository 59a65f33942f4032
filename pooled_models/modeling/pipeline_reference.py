"""How a checkpoint's own code finds the package's pipelines, where the package is not installed:
``pipeline("text-classification")`` cutting a pooled classifier's texts at its length
(``text_classification_pipeline.py``), and ``pipeline("zero-shot-classification")`` for a label-text classifier
(``zero_shot_pipeline.py``).

The installed package registers them when it is imported (``pooled_models/__init__.py``, where it registers its Auto
classes); no config module imports a pipeline. A checkpoint loaded with ``trust_remote_code=True`` where the package is
absent has only the model files saved next to it, and ``pipeline()`` picks the task's class after reading the config
and before loading the model. transformers' way for a checkpoint to bring its own pipeline is config.json's
``custom_pipelines``: with ``trust_remote_code=True``, ``pipeline()`` loads the named class from the checkpoint's files
(``get_class_from_dynamic_module``, transformers/pipelines/__init__.py). So a config writes the entries
(``configuration_pooled.PooledConfig.to_dict``) and ``save_pretrained`` saves the pipelines' files next to the
checkpoint. With two entries (a label-text classifier), ``pipeline(model=folder, trust_remote_code=True)`` asks for
the task, as transformers does for any checkpoint with several.

The package's own config class drops the entries when it reads a config.json: ``pipeline()`` refuses a config with
``custom_pipelines`` for a task without ``trust_remote_code``, where the package's registered pipelines need none.
A checkpoint's copy of the config module (its ``__name__`` is transformers' ``transformers_modules...``) keeps them.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "TEXT_CLASSIFICATION",
    "ZERO_SHOT",
    "PIPELINES",
    "custom_pipelines",
    "keeps_custom_pipelines",
    "pipeline_entry",
    "pipeline_files",
]

TEXT_CLASSIFICATION = "text-classification"
ZERO_SHOT = "zero-shot-classification"
# task -> (this folder's module, its pipeline class)
PIPELINES = {
    TEXT_CLASSIFICATION: ("text_classification_pipeline", "PooledTextClassificationPipeline"),
    ZERO_SHOT: ("zero_shot_pipeline", "LabelTextZeroShotPipeline"),
}


# The model class both pipelines load: only a sequence classifier's checkpoint names them. transformers' pipeline()
# picks a checkpoint's only entry when the call names no task, which would turn a token classifier or an embedding
# model into a sequence classifier with a new head.
CLASSIFIER = "PooledForSequenceClassification"


def _tasks(pooling: str, architectures: list[str] | None) -> list[str]:
    if CLASSIFIER not in (architectures or []):
        return []
    return [TEXT_CLASSIFICATION, *([ZERO_SHOT] if pooling == "label_text" else [])]


def pipeline_entry(task: str) -> dict[str, Any]:
    """config.json's ``custom_pipelines`` entry of the package's pipeline for ``task``."""
    return {
        "impl": "{}.{}".format(*PIPELINES[task]),
        "pt": ["AutoModelForSequenceClassification"],
        "type": "text",
    }


def custom_pipelines(pooling: str, architectures: list[str] | None) -> dict[str, Any]:
    """config.json's ``custom_pipelines`` for a config of ``pooling`` saved by a model of ``architectures``."""
    return {task: pipeline_entry(task) for task in _tasks(pooling, architectures)}


def keeps_custom_pipelines(config_module: str) -> bool:
    """Whether the config module named ``config_module`` is a checkpoint's copy (transformers loaded it as remote
    code), which reads ``custom_pipelines``, rather than the installed package's, which registers the pipelines."""
    return not config_module.startswith("pooled_models.")


def pipeline_files(pooling: str, architectures: list[str] | None) -> list[Path]:
    """The pipelines' files and the sibling files they import (what a checkpoint of ``pooling`` saves)."""
    from transformers.dynamic_module_utils import get_relative_import_files

    files: list[Path] = []
    for task in _tasks(pooling, architectures):
        pipeline_file = Path(__file__).with_name(f"{PIPELINES[task][0]}.py")
        for path in [pipeline_file, *(Path(path) for path in get_relative_import_files(str(pipeline_file)))]:
            if path not in files:
                files.append(path)
    return files
