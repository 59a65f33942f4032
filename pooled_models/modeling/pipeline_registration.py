"""Putting the package's subclass of a transformers pipeline in the place of a task's own class.

transformers' ``pipeline(task, model=...)`` builds the class ``PIPELINE_REGISTRY`` holds for the task. For the tasks
where a pooled model needs more than transformers' pipeline does (``text_classification_pipeline.py``,
``zero_shot_pipeline.py``), the package registers a subclass that keeps transformers' behaviour for every other model,
with the task's default model and model classes kept.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only transformers.
"""

from __future__ import annotations

from transformers.pipelines import PIPELINE_REGISTRY
from transformers.utils import logging

__all__ = ["replace_task_class"]


def replace_task_class(task_name: str, pipeline_class: type) -> None:
    """Make ``pipeline_class`` the class of ``pipeline(task_name)``; a no-op where it is already (registered by the
    package, or by a checkpoint's copy of the module that defines it: the same name)."""
    task = PIPELINE_REGISTRY.supported_tasks[task_name]
    if isinstance(task["impl"], type) and task["impl"].__name__ == pipeline_class.__name__:
        return
    base_logger = logging.get_logger("transformers.pipelines.base")
    level = base_logger.level
    base_logger.setLevel(logging.ERROR)  # "already registered. Overwriting": that is the point
    try:
        PIPELINE_REGISTRY.register_pipeline(
            task_name,
            pipeline_class=pipeline_class,
            pt_model=task.get("pt"),
            default=task.get("default"),
            type=task.get("type"),
        )
    finally:
        base_logger.setLevel(level)
