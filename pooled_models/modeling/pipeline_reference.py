"""How a checkpoint's own code finds ``pipeline("zero-shot-classification")`` for a label-text classifier, where the
package is not installed.

The installed package registers the pipeline when it is imported (``pooled_models/__init__.py``, where it registers its
Auto classes); no config module imports a pipeline. A checkpoint loaded with ``trust_remote_code=True`` where the
package is absent has only the model files saved next to it, and ``pipeline()`` picks the task's class after reading
the config and before loading the model. transformers' way for a checkpoint to bring its own pipeline is config.json's
``custom_pipelines``: with ``trust_remote_code=True``, ``pipeline()`` loads the named class from the checkpoint's files
(``get_class_from_dynamic_module``, transformers/pipelines/__init__.py). So a label-text config writes the entry
(``configuration_pooled.PooledConfig.to_dict``) and ``save_pretrained`` saves the pipeline's file next to the
checkpoint (``checkpoint_loading.py``).

The package's own config class drops the entry when it reads a config.json: ``pipeline()`` refuses a config with
``custom_pipelines`` for that task without ``trust_remote_code``, where the package's registered pipeline needs none.
A checkpoint's copy of the config module (its ``__name__`` is transformers' ``transformers_modules...``) keeps it.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "TASK",
    "PIPELINE_MODULE",
    "PIPELINE_CLASS",
    "custom_pipelines",
    "keeps_custom_pipelines",
    "pipeline_files",
]

TASK = "zero-shot-classification"
PIPELINE_MODULE = "zero_shot_pipeline"  # this folder's zero_shot_pipeline.py
PIPELINE_CLASS = "LabelTextZeroShotPipeline"


def custom_pipelines(pooling: str) -> dict[str, Any] | None:
    """config.json's ``custom_pipelines`` for a config of ``pooling`` (None: no entry)."""
    if pooling != "label_text":
        return None
    return {
        TASK: {
            "impl": f"{PIPELINE_MODULE}.{PIPELINE_CLASS}",
            "pt": ["AutoModelForSequenceClassification"],
            "type": "text",
        }
    }


def keeps_custom_pipelines(config_module: str) -> bool:
    """Whether the config module named ``config_module`` is a checkpoint's copy (transformers loaded it as remote
    code), which reads ``custom_pipelines``, rather than the installed package's, which registers the pipeline."""
    return not config_module.startswith("pooled_models.")


def pipeline_files() -> list[Path]:
    """The pipeline's file and the sibling files it imports (the model files a label-text checkpoint saves)."""
    from transformers.dynamic_module_utils import get_relative_import_files

    pipeline_file = Path(__file__).with_name(f"{PIPELINE_MODULE}.py")
    return [pipeline_file, *(Path(path) for path in get_relative_import_files(str(pipeline_file)))]
