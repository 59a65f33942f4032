"""Where a run's model comes from: a backbone (a Hub id, a folder, or a ``package:`` name resolved to the folder its
package ships), or a model an earlier train.py run saved, which the run continues or evaluates. A saved model is
checked before anything is written: its config.json names no code to run (``custom_pipelines`` or an ``auto_map``
other than pooled_models' own), its weights are safetensors, and it has the run's tasks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import AutoConfig, PreTrainedConfig
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME

from ..errors import UsageError
from ..modeling.configuration_multitask import SEQUENCE, TOKEN, PooledMultiTaskConfig
from ..modeling.configuration_pooled import PooledConfig
from ..modeling.modeling_multitask import MULTITASK_AUTO_MAP
from ..modeling.modeling_pooled import AUTO_MAP
from ..modeling.pipeline_reference import PIPELINES, pipeline_entry
from ..modeling.sources import PackagedBackboneError, code_refusal, resolve_packaged_backbone

if TYPE_CHECKING:  # an annotation only
    from .tasks import TaskSpec

__all__ = ["ModelSource", "model_source", "resolve_backbone", "TOKEN_CLASSIFIER"]

TOKEN_CLASSIFIER = "PooledForTokenClassification"


@dataclass(frozen=True)
class ModelSource:
    path: str  # the folder or Hub id the model (or its backbone) is loaded from
    base_model: (
        str  # what the model card names as the base model: a packaged backbone's Hub id, else ``path``
    )
    tokenizer: str  # where the tokenizer is loaded from
    revision: str | None = None
    cache_dir: str | None = None
    saved: PooledConfig | PooledMultiTaskConfig | None = None  # the config of a model saved by train.py

    def hub_kwargs(self) -> dict[str, Any]:
        return {
            key: value for key, value in (("revision", self.revision), ("cache_dir", self.cache_dir)) if value
        }

    @property
    def saved_kind(self) -> str | None:
        """What the saved model is: a sequence classifier, a token classifier, a multi-task model (None: a backbone)."""
        if isinstance(self.saved, PooledMultiTaskConfig):
            return "multitask"
        if isinstance(self.saved, PooledConfig):
            return TOKEN if self.saved.architectures == [TOKEN_CLASSIFIER] else SEQUENCE
        return None

    def task_config(self, task: str) -> PooledConfig | None:
        """The saved model's config of ``task`` (None when the run starts from a backbone)."""
        if isinstance(self.saved, PooledMultiTaskConfig):
            return self.saved.task_config(task)
        return self.saved

    def check_tasks(self, specs: list[TaskSpec], from_tasks_setting: bool) -> None:
        """Refuse a saved model that does not have the run's tasks, before any data is read."""
        kind = self.saved_kind
        if kind is None:
            return
        if kind == "multitask":
            self._check_multitask(specs, from_tasks_setting)
        elif len(specs) > 1 or from_tasks_setting:
            raise UsageError(
                "A multi-task run starts from a backbone or from a multi-task model saved by train.py; this model is a "
                "single-task one. Start from its backbone."
            )
        elif specs[0].kind != kind:
            raise UsageError(
                f"{self.path} is a token classifier; a token-classification run (--tags_column) continues it."
                if kind == TOKEN
                else f"{self.path} is a sequence classifier; a token-classification run starts from a backbone."
            )

    def _check_multitask(self, specs: list[TaskSpec], from_tasks_setting: bool) -> None:
        saved = self.saved
        if not from_tasks_setting:
            raise UsageError(
                f"{self.path} is a multi-task model; a run continues it with a config file listing its tasks "
                f"({', '.join(saved.tasks)}), or export one head with PooledForMultiTask.export_head."
            )
        for spec in specs:
            if spec.name not in saved.tasks or saved.kind(spec.name) != spec.kind:
                raise UsageError(
                    f"The multi-task model has no {spec.kind} task {spec.name!r}; its tasks are: "
                    f"{', '.join(f'{name} ({saved.kind(name)})' for name in saved.tasks)}."
                )


def resolve_backbone(name_or_path: str) -> tuple[str, str | None]:
    """``(local folder or Hub id, Hub id of a packaged backbone or None)`` for a ``model_name_or_path``."""
    try:
        return resolve_packaged_backbone(name_or_path)
    except PackagedBackboneError as error:
        raise UsageError(str(error)) from error


def model_source(model_args) -> ModelSource:
    """The source ``model_args`` names, its saved config (if train.py saved it) checked."""
    if not model_args.model_name_or_path:
        raise UsageError(
            "model_name_or_path is required: a backbone (Hub id or folder) or a model saved by train.py."
        )
    path, hub_id = resolve_backbone(model_args.model_name_or_path)
    tokenizer = resolve_backbone(model_args.tokenizer_name)[0] if model_args.tokenizer_name else path
    revision, cache_dir = model_args.model_revision, model_args.cache_dir
    return ModelSource(
        path=path,
        base_model=hub_id or path,
        tokenizer=tokenizer,
        revision=revision,
        cache_dir=cache_dir,
        saved=saved_model_config(path, revision, cache_dir),
    )


def saved_model_config(
    name: str, revision=None, cache_dir=None
) -> PooledConfig | PooledMultiTaskConfig | None:
    """The config of a model saved by train.py (a pooled classifier, a token classifier or a multi-task model), when
    ``name`` is one; None for a plain backbone. Refuses code references and pickled weights."""
    hub_kwargs = {"revision": revision, "cache_dir": cache_dir}
    try:
        config_dict, _ = PreTrainedConfig.get_config_dict(name, **hub_kwargs)
        _refuse_code_references(name, config_dict)
        config = AutoConfig.from_pretrained(name, trust_remote_code=False, **hub_kwargs)
    except (OSError, ValueError) as error:
        refusal = code_refusal(name, error)  # instead of transformers' advice to pass trust_remote_code=True
        raise UsageError(
            refusal or f"Cannot load the model {name!r}: {' '.join(str(error).split())}"
        ) from error
    _require_safetensors(name)
    return config if isinstance(config, (PooledConfig, PooledMultiTaskConfig)) else None


# The auto_map entries a checkpoint of ours names: a pooled model's (a token classifier's adds its class), or a
# multi-task model's. Anything else names code of someone else's.
OUR_AUTO_MAPS = (
    {**AUTO_MAP, "AutoModelForTokenClassification": "modeling_token.PooledForTokenClassification"},
    MULTITASK_AUTO_MAP,
)


def _refuse_code_references(name: str, config_dict: dict) -> None:
    found = [key for key in ("trust_remote_code",) if config_dict.get(key)]
    # A checkpoint of ours names the package's own pipelines (modeling/pipeline_reference.py): never run here.
    pipelines = config_dict.get("custom_pipelines")
    if pipelines and not (
        isinstance(pipelines, dict)
        and all(task in PIPELINES and entry == pipeline_entry(task) for task, entry in pipelines.items())
    ):
        found.insert(0, "custom_pipelines")
    auto_map = config_dict.get("auto_map") or {}
    if isinstance(auto_map, dict):
        ours = next(
            (known for known in OUR_AUTO_MAPS if known.get("AutoConfig") == auto_map.get("AutoConfig")), {}
        )
        foreign = {key: value for key, value in auto_map.items() if ours.get(key) != value}
    else:
        foreign = {"auto_map": auto_map}
    if foreign:
        found.append(f"auto_map ({', '.join(f'{key}: {value}' for key, value in foreign.items())})")
    if found:
        raise UsageError(
            f"The model {name!r} names code to run in its config.json: {', '.join(found)}. train.py never runs code "
            "from a checkpoint; start from a model whose code ships with transformers (or pooled_models)."
        )


def _require_safetensors(name: str) -> None:
    folder = Path(name)
    if not folder.is_dir():
        return  # a Hub model: from_pretrained(use_safetensors=True) refuses pickled weights when it downloads them
    if any(folder.glob("*.safetensors")) or (folder / SAFE_WEIGHTS_INDEX_NAME).is_file():
        return
    pickled = sorted(
        path.name for path in folder.iterdir() if path.suffix in (".bin", ".pt", ".pth", ".ckpt")
    )
    found = f" (only {', '.join(pickled)})" if pickled else ""
    raise UsageError(
        f"The model folder {folder} holds no safetensors weights{found}; train.py never unpickles weights. Convert "
        "them once with a loader you trust: model.save_pretrained(folder, safe_serialization=True)."
    )
