"""PooledMultiTaskConfig: one backbone's config and named tasks, each a sequence head or a token head.

Each task's settings are ``PooledConfig`` settings (its pooling and the pooling's settings, its head, its labels and
problem type, its multi-label loss...), so a task is validated by building the ``PooledConfig`` it describes around
the shared backbone config: the same checks, the same clear errors (prefixed with the task's name), the same
defaults filled in, and ``task_config(name)`` gives that config to the task's head and to ``export_head``.

The config holds data, as ``PooledConfig`` does: typed fields (``@strict``), one validation, and a snapshot of the
settings as last validated, against which edits (``config.tasks["team"]["pooling"] = "max"``, ``from_pretrained(folder,
tasks=...)``) are read and validated when a model is built, runs or is saved.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers (and its huggingface_hub) and its sibling model files.
"""

import copy
import dataclasses
import re
from typing import Any

from huggingface_hub.dataclasses import strict
from huggingface_hub.errors import StrictDataclassFieldValidationError
from transformers.configuration_utils import PreTrainedConfig

from .compat import BACKBONE_SUB_CONFIGS, backbone_sub_config_defaults
from .configuration_pooled import (
    BUILT_WITH,
    INITIALISATION_ONLY,
    PooledConfig,
    _clean_backbone_config,
    _serialised,
)
from .document_settings import DOCUMENT_FIELDS
from .engines import refuse_engine_without_plugin
from .heads import HEADS
from .label_text_margin import stated_before_the_margin
from .pooling import POOLINGS
from .problem_types import SINGLE_LABEL
from .text_config import TextConfigSizes
from .text_length import check_max_seq_length

__all__ = ["PooledMultiTaskConfig", "TASK_KINDS", "SEQUENCE", "TOKEN", "RUNTIME_SETTINGS"]

SEQUENCE = "sequence"  # one prediction per text: a pooler and a head
TOKEN = "token"  # one prediction per token: a head over every token (NER, tagging)
TASK_KINDS = (SEQUENCE, TOKEN)

# Settings of the whole model rather than of one task: the backbone is shared, and so is what feeds it.
SHARED_SETTINGS = (
    "backbone_config",
    "position_ids_from_mask",
    "packed_batches",
    "initializer_range",
    "max_seq_length",
)
LABEL_SETTINGS = ("id2label", "label2id", "num_labels", "problem_type")
# Document mode pools one head's windows across a document; a multi-task model's tasks share one pass of the backbone
# over one text, so it has no document mode (document_settings.py's DOCUMENT_FIELDS).
DOCUMENT_REFUSAL = (
    " is a setting of document mode, which a multi-task model has not (its tasks share one backbone pass over a text): "
    "train a PooledForSequenceClassification with document_window for a task that reads whole documents"
)
# A task's name becomes a module name (no dots) and part of metric names (eval_<task>_f1); "mean" names the mean of
# every task's main metric (eval_mean_score).
TASK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
RESERVED_TASK_NAMES = ("mean",)
# The task settings a built model follows without rebuilding a head: they are read when the loss is computed or a
# decision is made (train.py infers the problem type, tunes the thresholds, computes the positive weights).
RUNTIME_SETTINGS = (
    "problem_type",
    "pos_weight",
    "decision_threshold",
    "multi_label_loss",
    "focal_gamma",
    "asymmetric_gamma_neg",
    "asymmetric_gamma_pos",
    "asymmetric_clip",
)
# Settings of the whole model that are checked again when changed after construction (by attribute, or by
# from_pretrained's keywords, which transformers sets one by one after __init__).
VALIDATED = ("tasks", "position_ids_from_mask", "packed_batches", "initializer_range", "max_seq_length")
# A sequence task's setting in 0.3 (PooledConfig's embedding_max_length), now the whole model's max_seq_length.
LEGACY_TASK_LENGTH = "embedding_max_length"


def _own_fields() -> list[str]:
    """PooledConfig's own settings (pooling, head, losses...), without the base config's and the shared ones."""
    base = {item.name for item in dataclasses.fields(PreTrainedConfig)}
    return [
        item.name
        for item in dataclasses.fields(PooledConfig)
        if item.name not in base and item.name not in SHARED_SETTINGS and item.name not in DOCUMENT_FIELDS
    ]


def _token_settings() -> set[str]:
    """What a token task may set: its labels and its head (a token head has no pooling and one loss)."""
    return (
        {"classifier_head", "classifier_dropout", "classifier_dropout_samples"}
        | HEADS.every_option()
        | set(LABEL_SETTINGS)
    )


@strict
class PooledMultiTaskConfig(TextConfigSizes, PreTrainedConfig):
    r"""
    Configuration of [`PooledForMultiTask`]: one Transformers backbone shared by named tasks, each with its own head.

    Args:
        backbone_config (`dict` or `PreTrainedConfig`, *optional*):
            The backbone's configuration, of any model type built into Transformers, as in `PooledConfig`.
        tasks (`dict[str, dict]`):
            Task name -> its settings. Every task has a `kind`: `"sequence"` (one prediction per text: a pooling
            and a head) or `"token"` (one label per token: NER, tagging). Its labels: `id2label` (or `num_labels`).
            A sequence task takes any `PooledConfig` setting: `pooling` and the pooling's settings,
            `classifier_head` and its settings, `problem_type` (`single_label_classification`,
            `multi_label_classification`, `regression`; inferred from the first labels when unset),
            `multi_label_loss`, `pos_weight`, `decision_threshold`, `classifier_dropout_samples`. A token task takes
            `classifier_head`, its settings, `classifier_dropout` and `classifier_dropout_samples`. Names are letters, digits and `_`, starting with a letter.
        position_ids_from_mask (`bool`, *optional*, defaults to `True`):
            Derive the backbone's position ids from the attention mask (see `PooledConfig`).
        packed_batches (`bool`, *optional*, defaults to `False`):
            Run the shared backbone on padding-free (packed) rows (see `PooledConfig`).
        initializer_range (`float`, *optional*):
            Standard deviation used to initialise the poolers and heads. Defaults to the backbone's.
        max_seq_length (`int`, *optional*):
            The most tokens of a text the model reads, on every path, for every task (see `PooledConfig`); train.py
            sets it to the length it trained with. Unset: the tokenizer's `model_max_length`. A task's
            `embedding_max_length` (0.3) is read as it.
        task_order (`list[str]`, *optional*):
            The tasks in their order (outputs without a task and metrics follow it); written by the config itself,
            because config.json sorts the keys of `tasks`. Defaults to the order of `tasks`.

    Every task is checked by building its `PooledConfig` (a setting that does not apply, an unknown pooling...,
    raise a `ValueError` naming the task), and its settings are saved with their defaults filled in.
    """

    model_type = "pooled_multitask"
    sub_configs_defaults = backbone_sub_config_defaults()  # compat.py: empty before transformers 5.20
    sub_configs = BACKBONE_SUB_CONFIGS
    # A multi-task config has no default tasks: transformers before 5.20 would otherwise build one without arguments
    # to compare against when it saves (to_diff_dict, _get_generation_parameters); later versions read no such flag.
    has_no_defaults_at_init = True

    # The config class first: huggingface_hub's strict validation tries the union in order, and a config that fails
    # `dict` is serialised whole (repr) into the discarded TypeError, which made building a model several times slower.
    backbone_config: PreTrainedConfig | dict | None = None
    tasks: dict[str, dict] | None = None
    task_order: list[str] | None = None
    position_ids_from_mask: bool = True
    packed_batches: bool = False
    initializer_range: float | None = None
    max_seq_length: int | None = None

    def __post_init__(self, **kwargs):
        refuse_engine_without_plugin()  # engines.py: vLLM without the plugin would serve another pooling
        self.backbone_config = _clean_backbone_config(self.backbone_config)
        self._read_legacy_task_lengths()
        super().__post_init__(**kwargs)
        if self.initializer_range is None:
            self.initializer_range = getattr(self.backbone_config, "initializer_range", None) or 0.02
        self._validate()

    # -- validation -----------------------------------------------------------------------------------------
    # The config keeps a copy of what it last validated and validates again whenever the settings differ from that
    # copy: after from_pretrained's keywords, attribute or nested edits (config.tasks["team"]["pooling"] = "max").

    def _validate(self) -> None:
        if not isinstance(self.tasks, dict) or not self.tasks:
            raise ValueError(
                "tasks must be a mapping of task names to their settings, e.g. {'topic': {'kind': 'sequence', "
                f"'id2label': {{0: 'a', 1: 'b'}}}}; got {self.tasks!r}."
            )
        check_max_seq_length(self.max_seq_length)
        if isinstance(self.task_order, list) and sorted(self.task_order) == sorted(self.tasks):
            # config.json sorts the keys of tasks: the saved order puts them back in the order they were given.
            self.tasks = {name: self.tasks[name] for name in self.task_order}
        validated = (self.__dict__.get("_validated") or {}).get("tasks") or {}
        tasks = {
            name: self._checked_task(name, settings, previous=validated.get(name))
            for name, settings in self.tasks.items()
        }
        self.tasks = tasks
        self.task_order = list(tasks)
        # Private state, kept out of config.json (to_dict): the settings as last validated.
        self._validated = self._current()

    def _read_legacy_task_lengths(self) -> None:
        """A 0.3 config whose sequence tasks set ``embedding_max_length``: the shortest becomes the model's length
        (one backbone reads every task's text once), unless the config sets ``max_seq_length`` itself."""
        if not isinstance(self.tasks, dict) or not any(
            isinstance(settings, dict) and LEGACY_TASK_LENGTH in settings for settings in self.tasks.values()
        ):
            return
        lengths = [
            settings.get(LEGACY_TASK_LENGTH) for settings in self.tasks.values() if isinstance(settings, dict)
        ]
        lengths = [length for length in lengths if length is not None]
        self.tasks = {
            name: {key: value for key, value in settings.items() if key != LEGACY_TASK_LENGTH}
            if isinstance(settings, dict)
            else settings
            for name, settings in self.tasks.items()
        }
        if lengths and self.max_seq_length is None:
            self.max_seq_length = min(lengths)

    def _current(self) -> dict[str, Any]:
        return copy.deepcopy({name: getattr(self, name, None) for name in VALIDATED})

    @property
    def reads_documents(self) -> bool:
        """Always False: a multi-task model's tasks share one backbone pass over one text (DOCUMENT_REFUSAL)."""
        return False

    @property
    def has_pending_changes(self) -> bool:
        """True when settings changed (by attribute, nested or not) since the config was last validated."""
        validated = self.__dict__.get("_validated")
        return validated is not None and validated != {name: getattr(self, name, None) for name in VALIDATED}

    def ensure_valid(self) -> None:
        """Validate the tasks again if any setting changed since the last validation (a no-op when none did)."""
        if self.has_pending_changes:
            self._validate()

    def structure(self) -> dict[str, Any]:
        """What a built model's modules depend on, per task: its kind, pooling and head with their settings, and
        the number of labels. A model cannot follow a change of these (it keeps its modules); loading it again can."""
        shaping = (
            {"kind", "pooling", "classifier_head", *BUILT_WITH}
            | POOLINGS.every_option()
            | HEADS.every_option()
        ) - set(INITIALISATION_ONLY)
        return {
            name: {
                "num_labels": len(settings["id2label"]),
                **{key: value for key, value in settings.items() if key in shaping},
            }
            for name, settings in self.tasks.items()
        }

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs):
        """The saved config with the load-time keywords (``from_pretrained(folder, tasks=...)``) applied, which
        transformers sets after building the config: validated once all are in."""
        tasks = config_dict.get("tasks")
        if isinstance(tasks, dict):  # a label-text task saved before the seen-label margin existed keeps none
            tasks = {name: stated_before_the_margin(settings) for name, settings in tasks.items()}
            config_dict = {**config_dict, "tasks": tasks}
        loaded = super().from_dict(config_dict, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded).ensure_valid()
        return loaded

    def save_pretrained(self, save_directory, push_to_hub: bool = False, **kwargs):
        self.ensure_valid()  # never save settings that would not load back
        return super().save_pretrained(save_directory, push_to_hub=push_to_hub, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        return _serialised(super().to_dict())

    def get_text_config(self, decoder=None, encoder=None) -> PreTrainedConfig:
        """The backbone's config, which holds the text settings (``vocab_size``...): transformers reads and writes
        them through this method (``resize_token_embeddings`` sets ``vocab_size`` on it), as for PooledConfig."""
        return self.backbone_config.get_text_config(decoder=decoder, encoder=encoder)

    def kind(self, task: str) -> str:
        return self.tasks[self._known(task)]["kind"]

    def task_config(self, task: str) -> PooledConfig:
        """The ``PooledConfig`` of one task: the shared backbone and the task's own settings. A sequence task's head
        (and ``export_head``) is built from it; so is a token task's, whose pooling is left at the default."""
        return self._build(
            {key: value for key, value in self.tasks[self._known(task)].items() if key != "kind"}
        )

    def _known(self, task: str) -> str:
        if task not in self.tasks:
            raise ValueError(f"Unknown task {task!r}. This model's tasks are: {', '.join(self.tasks)}.")
        return task

    def _checked_task(
        self, name: Any, settings: Any, previous: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The task's settings, checked and filled in with their defaults, as config.json saves them.

        ``previous``: the task's settings as last validated. The ones that differ are then applied to them as edits
        are applied to a ``PooledConfig``, so that the settings of a choice left behind are dropped (a pooling
        changed from ``attention`` to ``max`` loses ``attention_heads``) rather than refused."""
        if not isinstance(name, str) or not TASK_NAME.match(name) or name in RESERVED_TASK_NAMES:
            raise ValueError(
                f"Task name {name!r} is not allowed: use letters, digits and '_', starting with a letter "
                f"(it becomes part of metric names such as eval_<task>_f1), and not {', '.join(RESERVED_TASK_NAMES)}."
            )
        if not isinstance(settings, dict):
            raise ValueError(f"tasks[{name!r}] must be a mapping of settings, got {type(settings).__name__}.")
        settings = dict(settings)
        kind = settings.pop("kind", None)
        if kind not in TASK_KINDS:
            raise ValueError(
                f"tasks[{name!r}] needs a kind: one of {', '.join(map(repr, TASK_KINDS))}; got {kind!r}."
            )
        allowed = set(_own_fields()) | set(LABEL_SETTINGS) if kind == SEQUENCE else _token_settings()
        unknown = sorted(set(settings) - allowed)
        if unknown:
            shared = [key for key in unknown if key in SHARED_SETTINGS]
            where = (
                " is a setting of the whole model (the backbone is shared), not of a task"
                if shared
                else DOCUMENT_REFUSAL
                if unknown[0] in DOCUMENT_FIELDS
                else (
                    " does not apply to a token task, which has no pooling and one loss (cross-entropy per token)"
                    if kind == TOKEN and unknown[0] in _own_fields()
                    else " is not a setting"
                )
            )
            raise ValueError(
                f"tasks[{name!r}]: {unknown[0]!r}{where}. The settings of a {kind} task are: "
                f"kind, {', '.join(sorted(allowed))}."
            )
        if "id2label" in settings and isinstance(settings["id2label"], dict):
            # JSON turns the ids into strings; Transformers does the same conversion for a config's own id2label.
            settings["id2label"] = {int(key): value for key, value in settings["id2label"].items()}
        settings.pop("label2id", None)  # derived from id2label
        if "id2label" not in settings and "num_labels" not in settings:
            raise ValueError(f"tasks[{name!r}] needs its labels: id2label (or num_labels).")
        if kind == TOKEN:
            if settings.get("problem_type", SINGLE_LABEL) != SINGLE_LABEL:
                raise ValueError(
                    f"tasks[{name!r}] is a token task: each token gets one label (problem_type "
                    f"{SINGLE_LABEL!r}), not {settings['problem_type']!r}."
                )
            settings["problem_type"] = SINGLE_LABEL
        try:
            if previous is not None and previous.get("kind") == kind:
                built = self._build({key: value for key, value in previous.items() if key != "kind"})
                for key in sorted(set(settings) | set(previous) - {"kind"}):
                    if settings.get(key) != previous.get(key):
                        setattr(built, key, settings.get(key))
                built.ensure_valid()
            else:
                built = self._build(settings)
        except (
            StrictDataclassFieldValidationError
        ) as error:  # a setting of the wrong type, or an unknown name
            raise ValueError(f"tasks[{name!r}]: {error.__cause__}") from error
        except ValueError as error:
            raise ValueError(f"tasks[{name!r}]: {error}") from error
        keep = _own_fields() if kind == SEQUENCE else sorted(_token_settings() - set(LABEL_SETTINGS))
        filled = {key: getattr(built, key) for key in keep if getattr(built, key, None) is not None}
        return {
            "kind": kind,
            "id2label": dict(built.id2label),
            "problem_type": built.problem_type,
            **filled,
        }

    def _build(self, settings: dict[str, Any]) -> PooledConfig:
        return PooledConfig(
            backbone_config=self.backbone_config,
            position_ids_from_mask=self.position_ids_from_mask,
            packed_batches=self.packed_batches,
            initializer_range=self.initializer_range,
            max_seq_length=self.max_seq_length,
            **settings,
        )


PooledMultiTaskConfig.register_for_auto_class()
