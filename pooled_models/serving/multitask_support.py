"""How the vLLM plugin serves a ``PooledForMultiTask`` checkpoint: one task per served model, all sharing the folder.

vLLM's pooling runner asks one pooler for one output per request, and a served model answers one pooling task
(``ModelConfig.get_pooling_task``: ``classify`` or ``token_classify``, never both). So a multi-task checkpoint is
served once per task, each engine naming its task with a config override::

    LLM(model=folder, runner="pooling", hf_overrides={"served_task": "team"})
    python -m vllm.entrypoints.launchers.api_server.entry --model FOLDER --runner pooling --hf-overrides '{"served_task": "team"}'

A sequence task is served as its ``export_head`` checkpoint would be (``PooledForSequenceClassification``:
``classify``, its own pooling and head), a token task as a ``PooledForTokenClassification`` (``token_classify``).
Each engine loads the backbone and that task's head; the other heads' weights are left unread. Plain Python over the
config (no vLLM), so the package's own tests check every message.
"""

from __future__ import annotations

from ..modeling.modeling_multitask import PooledForMultiTask
from ..modeling.modeling_pooled import PooledForSequenceClassification

__all__ = [
    "SERVED_TASK",
    "TASK_ARCHITECTURES",
    "served_task",
    "task_architecture",
    "served_config",
    "head_location",
]

SERVED_TASK = "served_task"  # the config attribute the override sets
# The standalone architecture each kind of task is served as (the class export_head writes).
TASK_ARCHITECTURES = {"sequence": "PooledForSequenceClassification", "token": "PooledForTokenClassification"}


def _how_to_choose(tasks: list[str]) -> str:
    example = tasks[0]
    return (
        f"serve one task per engine, named with a config override: LLM(model=folder, runner='pooling', "
        f"hf_overrides={{'{SERVED_TASK}': '{example}'}}), or --hf-overrides '{{\"{SERVED_TASK}\": \"{example}\"}}' "
        f"on the server. This model's tasks: {', '.join(tasks)}"
    )


def served_task(config) -> str:
    """The task this engine serves: the one the ``served_task`` override names (or the only one). Raises a
    ValueError naming the override and the tasks when none or an unknown one is named."""
    tasks = list(config.tasks)
    task = getattr(config, SERVED_TASK, None)
    if task is None and len(tasks) == 1:
        return tasks[0]
    if task is None:
        raise ValueError(
            "pooled_models' vLLM plugin serves one task of a PooledForMultiTask per engine (vLLM's pooling runner "
            "answers one pooling task per served model, from one pooler), and none is named: "
            f"{_how_to_choose(tasks)}."
        )
    if task not in tasks:
        raise ValueError(
            f"{SERVED_TASK}={task!r} is not a task of this PooledForMultiTask: {_how_to_choose(tasks)}."
        )
    return task


def task_architecture(config, task: str) -> str:
    return TASK_ARCHITECTURES[config.kind(task)]


def served_config(config):
    """The pooled config this engine serves: a multi-task checkpoint's served task's (``task_config``), any other
    checkpoint's own. A multi-task checkpoint without a valid task gives its own config (its model refuses to load,
    naming the override)."""
    if getattr(config, "tasks", None) is None:
        return config
    try:
        return config.task_config(served_task(config))
    except ValueError:
        return config


def head_location(config) -> tuple[str, dict[str, str]]:
    """Where the checkpoint holds the served classifier's head, and the renaming of its earlier key layouts:
    ``classifier.head.`` (PooledForSequenceClassification's), or a multi-task checkpoint's served task's,
    ``classifier.heads.<task>.head.`` (PooledForMultiTask's)."""
    if getattr(config, "tasks", None) is None:
        return "classifier.head.", PooledForSequenceClassification._legacy_key_mapping
    return f"classifier.heads.{served_task(config)}.head.", PooledForMultiTask._legacy_key_mapping
