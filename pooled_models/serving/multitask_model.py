"""The model vLLM builds for a ``PooledForMultiTask`` checkpoint: one task of it, the one the engine's
``served_task`` override names (serving/multitask_support.py), served exactly as that task's ``export_head``
checkpoint would be: a sequence task as ``PooledForSequenceClassification`` (``classify``), a token task as
``PooledForTokenClassification`` (``token_classify``).

The backbone is the shared one; the head is read from ``classifier.heads.<task>.*`` and the other tasks' heads are
left unread, so several engines (one per task) serve the same folder.
"""

from __future__ import annotations

from ..modeling.modeling_multitask import PooledForMultiTask
from .model import ServedPooledClassifier, _ServedPooled
from .multitask_support import served_task, task_architecture
from .support import multitask_refusal
from .token_model import ServedPooledTokenClassifier

__all__ = ["ServedPooledMultiTask"]

# The served model of each standalone architecture a task is served as: its pooler, head and weight names.
_SERVED_AS = {served.architecture: served for served in (ServedPooledClassifier, ServedPooledTokenClassifier)}
_HEADS = "classifier.heads."
_STANDALONE = "classifier."


class ServedPooledMultiTask(_ServedPooled):
    """One task of a ``PooledForMultiTask`` checkpoint: ``classify`` or ``token_classify``, as its kind says."""

    architecture = "PooledForMultiTask"
    legacy_key_mapping = PooledForMultiTask._legacy_key_mapping

    def served_config(self, config):
        reason = multitask_refusal(config)
        if reason is not None:
            raise ValueError(reason)
        self.task = served_task(config)
        self.architecture = task_architecture(config, self.task)
        self.served_as = _SERVED_AS[self.architecture]
        # The task's head under classifier.heads.<task>., where its standalone checkpoint has it under classifier.
        own = f"{_HEADS}{self.task}."
        self.own_prefixes = {
            own + name[len(_STANDALONE) :]: target for name, target in self.served_as.own_prefixes.items()
        }
        self.ignored_prefixes = tuple(
            f"{_HEADS}{other}." for other in config.tasks if other != self.task
        ) or ("\0",)
        return config.task_config(self.task)

    def pooled_parts(self, config):
        return self.served_as.pooled_parts(config)

    def make_pooler(self, config, pooling, head):
        return self.served_as.make_pooler(self, config, pooling, head)
