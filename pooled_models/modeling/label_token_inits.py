"""Where the label embeddings of ``pooling="label_tokens"`` start (``label_token_init``): the registered ways to
initialise them (``@LABEL_TOKEN_INITS.register(name)``), and the settings only the backbone's tokenizer knows (the
token ids a label starts from, where the label tokens go).

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import PreTrainedConfig
from transformers import initialization as init
from transformers.utils import logging

from .registry import LABEL_TOKEN_INITS, Component
from .text_config import text_config_of

__all__ = [
    "LabelTokenInit",
    "LABEL_TOKEN_INITS",
    "DEFAULT_INIT",
    "label_token_settings_from_tokenizer",
]

logger = logging.get_logger(__name__)


def label_token_settings_from_tokenizer(config_kwargs: dict[str, Any], tokenizer) -> dict[str, Any]:
    """The settings only a tokenizer knows: the token ids labels start from, and the number of leading special
    tokens (where the label tokens go)."""
    settings: dict[str, Any] = {}
    init = LABEL_TOKEN_INITS.lookup(config_kwargs.get("label_token_init") or DEFAULT_INIT)
    if config_kwargs.get("label_token_init_ids") is None:
        ids = init.ids_from_tokenizer(_label_names(config_kwargs), tokenizer)
        if ids is not None:
            settings["label_token_init_ids"] = ids
    if config_kwargs.get("label_token_position") is None:
        probe = tokenizer("x")["input_ids"]
        settings["label_token_position"] = 1 if probe and probe[0] in set(tokenizer.all_special_ids) else 0
    return settings


def _label_names(config_kwargs: dict[str, Any]) -> list[str]:
    id2label = config_kwargs.get("id2label")
    if id2label:
        return [id2label[key] for key in sorted(id2label, key=int)]
    return [f"LABEL_{index}" for index in range(config_kwargs.get("num_labels", 2))]


# ----------------------------------------------------------------------------------------------------
# Where the label embeddings start (label_token_init)
# ----------------------------------------------------------------------------------------------------

DEFAULT_INIT = "label_text"


class LabelTokenInit(Component):
    """A way to initialise the label embeddings, registered with ``@LABEL_TOKEN_INITS.register(name)``."""

    @classmethod
    def ids_from_tokenizer(cls, label_names: list[str], tokenizer) -> list[list[int]] | None:
        """The ``label_token_init_ids`` this initialisation reads, from the backbone's tokenizer (None: none)."""
        return None

    @staticmethod
    def initialise(parameter: nn.Parameter, word_embeddings: torch.Tensor, config: PreTrainedConfig) -> None:
        raise NotImplementedError


def _cls_ids_from_backbone(config: PreTrainedConfig) -> list[list[int]] | None:
    backbone = text_config_of(config)
    cls_id = getattr(backbone, "cls_token_id", None)
    if cls_id is None:
        cls_id = getattr(backbone, "bos_token_id", None)
    return None if cls_id is None else [[int(cls_id)] for _ in range(config.num_labels)]


class _FromTokenIds(LabelTokenInit):
    """Each label starts at the mean input embedding of its own token ids (``label_token_init_ids``)."""

    @classmethod
    def check_config(cls, config):
        ids, num_labels = config.label_token_init_ids, config.num_labels
        if ids is None:
            return  # a model built from its config alone: initialise() falls back to the vocabulary mean
        if not (isinstance(ids, list) and len(ids) == num_labels):
            raise ValueError(
                f"label_token_init_ids must hold one list of token ids per label ({num_labels}), got "
                f"{len(ids) if isinstance(ids, list) else type(ids).__name__}."
            )
        vocab_size = text_config_of(config).vocab_size
        for label, token_ids in enumerate(ids):
            if not (
                isinstance(token_ids, list)
                and len(token_ids) > 0
                and all(
                    isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab_size for i in token_ids
                )
            ):
                raise ValueError(
                    f"label_token_init_ids[{label}] = {token_ids!r} must be a non-empty list of token ids in "
                    f"[0, {vocab_size - 1}]."
                )

    @staticmethod
    def initialise(parameter, word_embeddings, config):
        if config.label_token_init_ids is None:
            # Built from a config alone (PooledForSequenceClassification(config), re-heading to more labels where no
            # tokenizer was saved): no token ids to start from, as every built-in model builds from its config.
            logger.warning_once(
                f"label_token_init={config.label_token_init!r} has no label_token_init_ids (no tokenizer was given to "
                "read them): the label tokens start from the mean input embedding instead "
                "(label_token_init='vocab_mean'). Build the model with from_backbone(), or pass "
                "label_token_init_ids, to start them from the label names."
            )
            FromVocabularyMean.initialise(parameter, word_embeddings, config)
            return
        vectors = [
            word_embeddings[torch.tensor(ids, device=word_embeddings.device)].mean(dim=0)
            for ids in config.label_token_init_ids
        ]
        init.copy_(parameter, torch.stack(vectors))


@LABEL_TOKEN_INITS.register("label_text")
class FromLabelText(_FromTokenIds):
    """Each label starts at the mean embedding of its name's tokens ("billing" at the embedding of "billing")."""

    config_options = {"label_token_init_ids": None}  # read from the tokenizer by from_backbone, or given

    @classmethod
    def ids_from_tokenizer(cls, label_names, tokenizer):
        ids = []
        for name in label_names:
            tokens = tokenizer(str(name), add_special_tokens=False)["input_ids"]
            if not tokens:
                raise ValueError(
                    f"label_token_init='label_text': the label name {name!r} has no tokens to start from."
                )
            ids.append([int(i) for i in tokens])
        return ids


@LABEL_TOKEN_INITS.register("cls")
class FromCLS(_FromTokenIds):
    """Every label starts at the embedding of the CLS (or BOS) token."""

    config_options = {"label_token_init_ids": _cls_ids_from_backbone}

    @classmethod
    def ids_from_tokenizer(cls, label_names, tokenizer):
        cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        if cls_id is None:
            raise ValueError("label_token_init='cls' but the tokenizer has neither a CLS nor a BOS token.")
        return [[int(cls_id)] for _ in label_names]


@LABEL_TOKEN_INITS.register("vocab_mean")
class FromVocabularyMean(LabelTokenInit):
    """Every label starts at the mean of all input embeddings."""

    @staticmethod
    def initialise(parameter, word_embeddings, config):
        init.copy_(parameter, word_embeddings.mean(dim=0).expand_as(parameter))


@LABEL_TOKEN_INITS.register("random")
class FromNoise(LabelTokenInit):
    """Normal noise with the model's ``initializer_range``."""

    @staticmethod
    def initialise(parameter, word_embeddings, config):
        init.normal_(parameter, std=config.initializer_range)
