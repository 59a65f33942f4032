"""The model and tokenizer a train.py run starts from: a backbone with a new pooler and head, or a model that
train.py saved before (to evaluate it or train it further). Nothing here runs code from a checkpoint."""

from __future__ import annotations

import logging
from pathlib import Path

from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, PreTrainedConfig
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME

from ..modeling.backbone import position_offset
from ..modeling.configuration_multitask import PooledMultiTaskConfig
from ..modeling.configuration_pooled import PooledConfig
from ..modeling.label_token_layers import ALL_LAYERS, LAYER_STACKS, ONE_WAY, TWO_WAY, supports_top_layers
from ..modeling.modeling_multitask import MULTITASK_AUTO_MAP
from ..modeling.modeling_pooled import AUTO_MAP, PooledForSequenceClassification, PooledPreTrainedModel
from ..modeling.problem_types import MULTI_LABEL
from ..thresholds import positive_weights
from .arguments import FROM_TRAINING_DATA, pooled_config_kwargs
from .data import Split
from .errors import UsageError
from .label_space import Labels

__all__ = [
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
    "backbone_of",
    "backbone_max_length",
    "choose_max_length",
]

logger = logging.getLogger(__name__)


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
        raise UsageError(f"Cannot load the model {name!r}: {' '.join(str(error).split())}") from error
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


def backbone_of(model):
    """The encoder of a pooled model, or of any other Transformers model (the sweep's vanilla baseline)."""
    return model.get_backbone() if isinstance(model, PooledPreTrainedModel) else model.base_model


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
