"""The model of a run: train.py's model settings (those that differ from ``PooledConfig``'s defaults), a packaged
backbone resolved to its folder, a saved pooled model checked (safetensors only, no code references) and loaded, or a
new one built on a backbone (a sequence classifier, or a multi-task model with a head per task); train.py's
data-derived defaults (pos_weight, multi-label loss, label-token layers and attention); the tokenizer and the length
limit; freezing."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedConfig,
)
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME

from ..errors import UsageError
from ..modeling.backbone import position_offset
from ..modeling.configuration_multitask import SEQUENCE, TOKEN, PooledMultiTaskConfig
from ..modeling.configuration_pooled import PooledConfig
from ..modeling.label_token_layers import ALL_LAYERS, LAYER_STACKS, ONE_WAY, TWO_WAY, supports_top_layers
from ..modeling.modeling_multitask import MULTITASK_AUTO_MAP, PooledForMultiTask
from ..modeling.modeling_pooled import AUTO_MAP, PooledForSequenceClassification, PooledPreTrainedModel
from ..modeling.modeling_token import PooledForTokenClassification
from ..modeling.problem_types import MULTI_LABEL
from ..modeling.sources import (
    PACKAGE_PREFIX,
    PACKAGED_BACKBONES,
    PackagedBackbone,
    PackagedBackboneError,
    code_refusal,
    resolve_packaged_backbone,
)
from ..thresholds import positive_weights
from .data import TaskData, TaskSpec
from .data.sequence import Labels, Split
from .options import REMOVED_OPTIONS, backbone_of

__all__ = [
    "pooled_config_fields",
    "pooled_config_kwargs",
    "parse_pos_weight",
    "build_task_model",
    "freeze_heads",
    "MULTI_LABEL_DEFAULT_LOSS",
    "saved_pooled_config",
    "saved_model_config",
    "resolve_pos_weight",
    "resolve_multi_label_loss",
    "LABEL_TOKEN_LAYERS_DEFAULT",
    "LABEL_TOKEN_ATTENTION_DEFAULT",
    "default_label_token_settings",
    "build_model",
    "load_tokenizer",
    "backbone_max_length",
    "choose_max_length",
    "PACKAGE_PREFIX",
    "PackagedBackbone",
    "PACKAGED_BACKBONES",
    "resolve_backbone",
    "freeze_backbone",
]

# Where train.py's default differs from PooledConfig's (see the README's "Defaults" section for the measurements).
# multi_label_loss: unset, train.py chooses by problem type (model_setup.resolve_multi_label_loss).
CLI_MODEL_DEFAULTS: dict[str, Any] = {"multi_label_loss": None}


# Settings train.py can also compute from the training split, when given as "auto"; the flag takes text (the word, or
# the numbers), which parse_pos_weight turns into the config's value. name -> what the help adds.
FROM_TRAINING_DATA = "auto"


def _base_config_fields() -> set[str]:
    return {item.name for item in dataclasses.fields(PreTrainedConfig)}


def pooled_config_fields(config_class: type = PooledConfig) -> list[dataclasses.Field]:
    """PooledConfig's own settings (pooling, head...), without the base config's and ``backbone_config``."""
    # The removed settings stay config fields (saved models load) but are no longer train.py settings.
    skipped = _base_config_fields() | {"backbone_config"} | set(REMOVED_OPTIONS)
    return [item for item in dataclasses.fields(config_class) if item.init and item.name not in skipped]


def _config_default(config_field: dataclasses.Field) -> Any:
    if config_field.default is not dataclasses.MISSING:
        return config_field.default
    if config_field.default_factory is not dataclasses.MISSING:
        return config_field.default_factory()
    return None


def parse_pos_weight(value: Any) -> str | list[float] | None:
    """``pos_weight`` as a flag or a config file gives it: None, ``"auto"`` or one number per label.

    Accepted: ``--pos_weight auto``, ``--pos_weight 1 4.5 2``, ``--pos_weight '[1, 4.5, 2]'``, and in a config file
    ``pos_weight: auto`` or ``pos_weight: [1, 4.5, 2]``.
    """
    if value is None:
        return None
    items = [value] if isinstance(value, str) else list(value)
    if len(items) == 1 and isinstance(items[0], str):
        text = items[0].strip()
        if text == FROM_TRAINING_DATA:
            return FROM_TRAINING_DATA
        if text.startswith("["):
            try:
                items = json.loads(text)
            except json.JSONDecodeError:
                items = None
    try:
        numbers = [float(item) for item in items if not isinstance(item, bool)]
    except (TypeError, ValueError):
        numbers = []
    if not numbers or len(numbers) != len(items):
        raise UsageError(
            f"pos_weight must be '{FROM_TRAINING_DATA}' (negatives / positives per label in the training split) or "
            f"one number per label, got {value!r}."
        )
    return numbers


def pooled_config_kwargs(model_args) -> dict[str, Any]:
    """The PooledConfig settings the user chose: those that differ from PooledConfig's own defaults."""
    chosen = {}
    for config_field in pooled_config_fields():
        value = getattr(model_args, config_field.name)
        if value is None and config_field.name in CLI_MODEL_DEFAULTS:
            continue  # left to train.py, which fills it in once the problem type is known
        if value != _config_default(config_field):
            chosen[config_field.name] = value
    return chosen


logger = logging.getLogger("pooled_models.train")


def _task_settings(task: TaskData) -> dict[str, Any]:
    """The task's entry in the model config: kind, labels and head settings (multi-label defaults filled in)."""
    labels = task.labels
    settings = {"kind": task.kind, **task.spec.model}
    if labels.num_labels and getattr(labels, "names", None):
        settings["id2label"] = labels.id2label
    else:
        settings["num_labels"] = labels.num_labels
    settings["problem_type"] = labels.problem_type
    if task.kind == SEQUENCE and labels.problem_type == MULTI_LABEL:
        settings.setdefault("multi_label_loss", MULTI_LABEL_DEFAULT_LOSS)
        if settings.get("pos_weight") == FROM_TRAINING_DATA:
            if "train" not in task.splits:
                raise UsageError(
                    f"task {task.spec.name!r}: pos_weight auto is computed from the training split."
                )
            settings["pos_weight"] = positive_weights(task.splits["train"].targets)
    elif settings.get("pos_weight") is not None:
        raise UsageError(
            f"task {task.spec.name!r}: pos_weight weights the positive labels of a multi-label loss; this task is "
            f"{labels.problem_type}."
        )
    return settings


def build_task_model(
    model_args, tasks: dict[str, TaskData], saved, single: bool, tokenizer
) -> PooledForMultiTask:
    """The model of a run of tasks: a saved multi-task model, a saved token classifier, or built on a backbone. The
    run's packed_batches is a setting of the whole model (the backbone is shared), set once it is built."""
    model = _task_model(model_args, tasks, saved, single, tokenizer)
    packed_batches = pooled_config_kwargs(model_args).get("packed_batches")
    if packed_batches is not None:
        _set_packed_batches(model, packed_batches)
    return model


def _task_model(model_args, tasks: dict[str, TaskData], saved, single: bool, tokenizer) -> PooledForMultiTask:
    path = model_args.model_name_or_path
    hub = {"revision": model_args.model_revision, "cache_dir": model_args.cache_dir}
    try:
        if isinstance(saved, PooledMultiTaskConfig):
            changed = [name for name, task in tasks.items() if task.spec.model]
            if changed:
                raise UsageError(
                    f"{path} is a trained multi-task model; the head settings of its tasks cannot change (task "
                    f"{changed[0]!r} sets {', '.join(tasks[changed[0]].spec.model)}). Start from its backbone instead."
                )
            model = PooledForMultiTask.from_pretrained(
                path, use_safetensors=True, trust_remote_code=False, **hub
            )
        elif isinstance(saved, PooledConfig):
            model = _from_token_classifier(
                PooledForTokenClassification.from_pretrained(path, trust_remote_code=False, **hub),
                next(iter(tasks)),
            )
        else:
            backbone_kwargs = {key: value for key, value in hub.items() if value}
            settings = {name: _task_settings(task) for name, task in tasks.items()}
            if any(leaves_label_token_defaults_unset(task) for task in settings.values()):
                # train.py's label-token defaults, as a single-task run gets them (they depend on the backbone)
                backbone_config = AutoConfig.from_pretrained(path, trust_remote_code=False, **backbone_kwargs)
                for task in settings.values():
                    default_label_token_settings(task, backbone_config)
            model = PooledForMultiTask.from_backbone(
                path,
                tasks=settings,
                backbone_kwargs=backbone_kwargs,
                tokenizer=tokenizer,
            )
    except ValueError as error:  # a task setting the config refuses, a pooling the backbone cannot take...
        raise UsageError(str(error)) from error
    except OSError as error:
        raise UsageError(f"Cannot load the model {path!r}: {error}") from error
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def _set_packed_batches(model: PooledForMultiTask, packed: bool) -> None:
    try:
        model.config.packed_batches = packed
        model.config.ensure_valid()
        if packed:
            model.check_packable()
    except ValueError as error:  # position_ids_from_mask=False, a backbone that cannot run packed rows
        raise UsageError(str(error)) from error


def _from_token_classifier(token: PooledForTokenClassification, name: str) -> PooledForMultiTask:
    """A one-task multi-task model holding a saved token classifier's backbone and head, to train or evaluate."""
    config = token.config
    settings = {
        key: getattr(config, key)
        for key in ("classifier_head", "classifier_dropout", "classifier_dropout_samples")
    }
    for key in ("classifier_hidden_size", "classifier_activation"):
        if getattr(config, key, None) is not None:
            settings[key] = getattr(config, key)
    multitask_config = PooledMultiTaskConfig(
        backbone_config=config.backbone_config,
        tasks={name: {"kind": TOKEN, "id2label": dict(config.id2label), **settings}},
        position_ids_from_mask=config.position_ids_from_mask,
        packed_batches=config.packed_batches,
        initializer_range=config.initializer_range,
    )
    model = PooledForMultiTask(multitask_config, backbone=token.backbone)
    model.classifier.heads[name].load_state_dict(token.classifier.state_dict())
    return model


def freeze_heads(model: PooledForMultiTask, specs: list[TaskSpec]) -> None:
    """Freeze the heads of the tasks whose settings say ``freeze_head``."""
    for spec in specs:
        if spec.freeze_head:
            frozen = 0
            for parameter in model.head_parameters(spec.name):
                parameter.requires_grad_(False)
                frozen += parameter.numel()
            logger.info("Head of task %r frozen: %d parameters will not be trained.", spec.name, frozen)


def saved_pooled_config(model_args) -> PooledConfig | None:
    """The config of a model saved by train.py, when ``model_name_or_path`` is one; None for a plain backbone.

    Refuses, before anything is written, a model whose config.json names code to run (``custom_pipelines``, an
    ``auto_map`` other than pooled_models' own) and a local folder whose weights are not safetensors; and a multi-task
    model, which only a multi-task run (a config file with ``tasks``) continues.
    """
    config = saved_model_config(model_args)
    if isinstance(config, PooledMultiTaskConfig):
        raise UsageError(
            f"{model_args.model_name_or_path} is a multi-task model; a run continues it with a config file listing its "
            f"tasks ({', '.join(config.tasks)}), or export one head with PooledForMultiTask.export_head."
        )
    if isinstance(config, PooledConfig) and config.architectures == ["PooledForTokenClassification"]:
        raise UsageError(
            f"{model_args.model_name_or_path} is a token classifier; a token-classification run (--tags_column) "
            "continues it."
        )
    return config


def saved_model_config(model_args) -> PooledConfig | PooledMultiTaskConfig | None:
    """The config of a model saved by train.py (a pooled classifier, a token classifier or a multi-task model), when
    ``model_name_or_path`` is one; None for a plain backbone. Refuses code references and pickled weights, as
    ``saved_pooled_config`` says."""
    name = model_args.model_name_or_path
    hub_kwargs = {"revision": model_args.model_revision, "cache_dir": model_args.cache_dir}
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
    found = [key for key in ("custom_pipelines", "trust_remote_code") if config_dict.get(key)]
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


def resolve_pos_weight(model_args, labels: Labels, splits: dict[str, Split]) -> None:
    """Turn ``--pos_weight auto`` into negatives / positives per label, counted on the training split's targets."""
    if model_args.pos_weight is None:
        return
    if labels.problem_type != MULTI_LABEL:
        raise UsageError(
            f"pos_weight weights the positive labels of a multi-label loss; this run's labels are "
            f"{labels.problem_type}. Leave pos_weight out."
        )
    if model_args.pos_weight != FROM_TRAINING_DATA:
        return
    if "train" not in splits:
        raise UsageError(
            f"pos_weight={FROM_TRAINING_DATA} is computed from the training split: it needs --do_train."
        )
    model_args.pos_weight = positive_weights(splits["train"].targets)
    logger.info(
        "pos_weight from the training split (negatives / positives): %s",
        ", ".join(
            f"{name} {weight:.3g}" for name, weight in zip(labels.names, model_args.pos_weight, strict=True)
        ),
    )


# The loss of a multi-label run that asks for none. On the debtags benchmark (bench/multilabel_defaults.py) the
# asymmetric loss beat BCE by 0.03 micro-F1 and 0.10 macro-F1: most (text, label) pairs are easy negatives, which
# it stops counting, so the rare positives are not drowned out.
MULTI_LABEL_DEFAULT_LOSS = "asymmetric"


def resolve_multi_label_loss(model_args, labels: Labels, saved_config: PooledConfig | None) -> None:
    """Fill an unset ``multi_label_loss``: the saved model's, else the multi-label default, else PooledConfig's."""
    if model_args.multi_label_loss is not None:
        return
    if saved_config is not None:
        model_args.multi_label_loss = saved_config.multi_label_loss
    elif labels.problem_type == MULTI_LABEL:
        model_args.multi_label_loss = MULTI_LABEL_DEFAULT_LOSS
        logger.info(
            "Multi-label loss: %s (train.py's default; --multi_label_loss bce for plain BCE).",
            MULTI_LABEL_DEFAULT_LOSS,
        )
    else:
        model_args.multi_label_loss = (
            PooledConfig.multi_label_loss
        )  # the dataclass default: not a setting of the run


# The top layers label tokens join when a run does not say. On the benchmarks (bench/label_token_layers.py, 3 seeds)
# the top 2 layers beat full insertion by 0.074 macro-F1 on fortunes and 0.021 micro-F1 on debtags in 0.65x its
# training time; full insertion stays PooledConfig's default (what checkpoints without the setting were trained with).
LABEL_TOKEN_LAYERS_DEFAULT = 2


# How text and label tokens attend when a run does not say (bench/recipes.py, 3 seeds; README, "Label tokens against
# mean pooling"): one-way, where the backbone runs it; PooledConfig keeps "two_way", what older checkpoints ran.
LABEL_TOKEN_ATTENTION_DEFAULT = ONE_WAY


# The label-token settings train.py fills in when a new label-token model leaves them out, on the backbones that run
# the label tokens' layers one by one.
LABEL_TOKEN_DEFAULTS = ("label_token_layers", "label_token_attention")


def leaves_label_token_defaults_unset(settings: dict) -> bool:
    return settings.get("pooling") == "label_tokens" and any(
        name not in settings for name in LABEL_TOKEN_DEFAULTS
    )


def default_label_token_settings(settings: dict, backbone_config: PreTrainedConfig) -> None:
    """Fill train.py's label-token defaults into a new label-token model's ``settings`` the user left out: the top
    LABEL_TOKEN_LAYERS_DEFAULT layers and LABEL_TOKEN_ATTENTION_DEFAULT attention, where the backbone can run them
    (PooledConfig's full insertion and two-way attention elsewhere)."""
    if not leaves_label_token_defaults_unset(settings):
        return
    if not supports_top_layers(backbone_config):
        logger.info(
            "Label tokens in every layer, with two-way attention: a %s backbone runs them no other way (train.py's "
            "defaults, the top %d layers and %s attention, need one of model type %s).",
            getattr(backbone_config, "model_type", None),
            LABEL_TOKEN_LAYERS_DEFAULT,
            LABEL_TOKEN_ATTENTION_DEFAULT,
            ", ".join(sorted(LAYER_STACKS)),
        )
        return
    if "label_token_layers" not in settings:
        layers = min(LABEL_TOKEN_LAYERS_DEFAULT, backbone_config.num_hidden_layers)
        settings["label_token_layers"] = layers
        logger.info(
            "Label tokens join the backbone's top %d layers (train.py's default; --label_token_layers %s puts them "
            "in every layer).",
            layers,
            ALL_LAYERS,
        )
    if "label_token_attention" not in settings:
        settings["label_token_attention"] = LABEL_TOKEN_ATTENTION_DEFAULT
        logger.info(
            "Label tokens attend to the text, the text not to them (train.py's default; --label_token_attention "
            "%s lets the text attend to them too).",
            TWO_WAY,
        )


def build_model(
    model_args, labels: Labels, saved_config: PooledConfig | None, tokenizer
) -> PooledForSequenceClassification:
    settings = pooled_config_kwargs(model_args)
    if saved_config is not None:
        changed = {name: value for name, value in settings.items() if getattr(saved_config, name) != value}
        if changed:
            raise UsageError(
                f"{model_args.model_name_or_path} is a trained pooled model; its settings cannot change "
                f"({', '.join(f'{name}={value!r}' for name, value in changed.items())}). Start from its backbone instead."
            )
        try:
            model = AutoModelForSequenceClassification.from_pretrained(
                model_args.model_name_or_path,
                revision=model_args.model_revision,
                cache_dir=model_args.cache_dir,
                use_safetensors=True,
                trust_remote_code=False,
            )
        except OSError as error:
            raise UsageError(f"Cannot load the model {model_args.model_name_or_path!r}: {error}") from error
        model.config.pad_token_id = tokenizer.pad_token_id
        return model
    backbone_kwargs = {
        key: value
        for key, value in (("revision", model_args.model_revision), ("cache_dir", model_args.cache_dir))
        if value
    }
    if leaves_label_token_defaults_unset(settings):
        try:
            backbone_config = AutoConfig.from_pretrained(
                model_args.model_name_or_path, trust_remote_code=False, **backbone_kwargs
            )
        except (OSError, ValueError) as error:
            raise UsageError(
                f"Cannot load the backbone {model_args.model_name_or_path!r}: {error}"
            ) from error
        default_label_token_settings(settings, backbone_config)
    try:
        model = PooledForSequenceClassification.from_backbone(
            model_args.model_name_or_path,
            backbone_kwargs=backbone_kwargs,
            tokenizer=tokenizer,  # the label-token pooling starts each label's token from its name's tokens
            num_labels=labels.num_labels,
            id2label=labels.id2label,
            label2id=labels.label2id if labels.names else None,
            problem_type=labels.problem_type,
            **settings,
        )
    except ValueError as error:  # PooledConfig's checks: a setting that does not apply, an unknown pooling...
        raise UsageError(str(error)) from error
    except OSError as error:  # no safetensors weights, a download that failed...
        raise UsageError(f"Cannot load the backbone {model_args.model_name_or_path!r}: {error}") from error
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def load_tokenizer(model_args):
    tokenizer = AutoTokenizer.from_pretrained(
        model_args.tokenizer_name or model_args.model_name_or_path,
        revision=model_args.model_revision,
        cache_dir=model_args.cache_dir,
        trust_remote_code=False,
    )
    if tokenizer.pad_token is None:  # decoders (GPT-2, Llama) have none; the attention mask hides it anyway
        if tokenizer.eos_token is None:
            raise UsageError(
                f"The tokenizer of {model_args.model_name_or_path} has neither a pad nor an eos token."
            )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def backbone_max_length(tokenizer, model) -> int | None:
    """The longest text the model takes: the backbone's position table (less RoBERTa's padding offset) and the
    tokenizer's limit, less the label tokens a label-token pooling inserts into every input."""
    limits = []
    backbone = backbone_of(model)
    positions = getattr(backbone.config, "max_position_embeddings", None)
    uses_position_table = getattr(backbone.config, "position_embedding_type", "absolute") == "absolute"
    if isinstance(positions, int) and uses_position_table:
        limits.append(positions - position_offset(backbone))
    if isinstance(tokenizer.model_max_length, int) and tokenizer.model_max_length < 1_000_000:
        limits.append(tokenizer.model_max_length)  # unset limits are a huge sentinel (VERY_LARGE_INTEGER)
    if not limits:
        return None
    # The label-token pooler puts label tokens into each input; the model itself would cut a longer text.
    return min(limits) - (model.added_tokens if isinstance(model, PooledPreTrainedModel) else 0)


def choose_max_length(requested: int | None, tokenizer, model) -> int:
    """``max_seq_length``: the backbone's limit by default, and never more."""
    limit = backbone_max_length(tokenizer, model)
    if requested is None:
        if limit is None:
            raise UsageError("The backbone states no maximum input length; set --max_seq_length.")
        return limit
    if limit is not None and requested > limit:
        logger.warning(
            "max_seq_length=%d is more than the backbone takes; using its limit, %d.", requested, limit
        )
        return limit
    return requested


def resolve_backbone(name_or_path: str) -> tuple[str, str | None]:
    """``(local folder or Hub id, Hub id of a packaged backbone or None)`` for a ``model_name_or_path``."""
    try:
        return resolve_packaged_backbone(name_or_path)
    except PackagedBackboneError as error:
        raise UsageError(str(error)) from error


def freeze_backbone(model) -> int:
    """Stop the backbone's gradients; returns the number of frozen parameters."""
    frozen = 0
    for parameter in backbone_of(model).parameters():
        parameter.requires_grad_(False)
        frozen += parameter.numel()
    return frozen
