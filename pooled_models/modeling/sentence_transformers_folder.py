"""What a sentence-transformers folder given as a backbone brings: its pooling, its ``max_seq_length`` and its
normalisation, read from ``modules.json``, ``sentence_bert_config.json`` and the Pooling module's ``config.json``, so
that ``PooledModel.from_backbone(folder).encode(texts)`` gives what ``SentenceTransformer(folder).encode(texts)``
gives. Also the files a saved pooled checkpoint carries so that sentence-transformers reads it back the same way.

Only the pipelines ``encode`` reproduces are read as defaults: a Transformer module, then optionally a Pooling module
(one of the modes below) and a Normalize module. Anything else (a Dense projection, a LayerNorm, prompts added by
default, lower-casing the tokenizer does not do) is named in ``SentenceTransformersSettings.not_reproduced``, and
``from_backbone`` refuses the folder unless the pooling is given by hand.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only the standard
library and transformers.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from transformers.utils import cached_file, logging

__all__ = [
    "SENTENCE_TRANSFORMERS_POOLING_MODES",
    "SentenceTransformersSettings",
    "read_sentence_transformers_folder",
    "sentence_transformers_files",
    "apply_folder_defaults",
]

logger = logging.get_logger(__name__)

# Our token pooling -> sentence-transformers' Pooling modes, in the order each concatenates them. The legacy boolean
# keys of a Pooling config (pooling_mode_cls_token...) concatenate in sentence-transformers' fixed order cls, max,
# mean, mean_sqrt_len_tokens, weightedmean, lasttoken: {mean, max} is then (max, mean), which no pooling of ours
# computes, while (mean, max) written as a pooling_mode list is our mean_max.
SENTENCE_TRANSFORMERS_POOLING_MODES: dict[str, tuple[str, ...]] = {
    "cls": ("cls",),
    "mean": ("mean",),
    "max": ("max",),
    "mean_sqrt_len": ("mean_sqrt_len_tokens",),
    "weighted_mean": ("weightedmean",),
    "last_token": ("lasttoken",),
    "mean_max": ("mean", "max"),
    "cls_mean_max": ("cls", "max", "mean"),
}
_POOLING_OF_MODES = {modes: pooling for pooling, modes in SENTENCE_TRANSFORMERS_POOLING_MODES.items()}
_LEGACY_MODE_KEYS = {  # in sentence-transformers' concatenation order
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
REPRODUCED_MODULES = ("Transformer", "Pooling", "Normalize")
# What sentence-transformers' Transformer module reads of the backbone by default: its token states.
TOKEN_STATES = ("last_hidden_state", "token_embeddings")


@dataclasses.dataclass
class SentenceTransformersSettings:
    """What a sentence-transformers folder says about its embeddings.

    Attributes:
        pooling: our pooling that computes its Pooling module (None: the folder has no Pooling module, or one whose
            modes none of ours computes, which ``not_reproduced`` then names).
        max_seq_length: the Transformer module's token limit (None: the tokenizer's).
        normalize: whether a Normalize module ends the pipeline.
        transformer_path: the Transformer module's folder inside this one ("" for the folder itself).
        not_reproduced: each part of the pipeline ``encode`` does not reproduce, in words.
    """

    pooling: str | None = None
    max_seq_length: int | None = None
    normalize: bool = False
    transformer_path: str = ""
    lower_case: bool = False
    not_reproduced: list[str] = dataclasses.field(default_factory=list)


def read_sentence_transformers_folder(
    name_or_path: str | os.PathLike, **hub_kwargs: Any
) -> SentenceTransformersSettings | None:
    """The settings of the sentence-transformers folder (or Hub repository) ``name_or_path``, or None when it is not
    one (no ``modules.json``). ``hub_kwargs``: ``revision``, ``cache_dir``, ``token``, ``local_files_only``."""
    modules = _read_json(name_or_path, "modules.json", hub_kwargs)
    if modules is None:
        return None
    if not isinstance(modules, list) or not all(isinstance(module, dict) for module in modules):
        raise ValueError(f"{name_or_path}/modules.json is not a list of modules; it cannot be read.")
    settings = SentenceTransformersSettings()
    modules = sorted(modules, key=lambda module: module.get("idx", 0))
    kinds = [str(module.get("type", "")).rsplit(".", 1)[-1] for module in modules]
    for position, (module, kind) in enumerate(zip(modules, kinds, strict=True)):
        path = str(module.get("path", ""))
        where = f"module {module.get('idx', position)} ({path or 'the folder itself'})"
        if kind not in REPRODUCED_MODULES:
            settings.not_reproduced.append(
                f"{where} is a {kind or 'module of no type'}; encode reproduces only "
                f"{', '.join(REPRODUCED_MODULES)}"
            )
        elif kind == "Transformer":
            if position != 0:
                settings.not_reproduced.append(f"{where} is a Transformer that does not come first")
                continue
            settings.transformer_path = path
            _read_transformer(name_or_path, path, hub_kwargs, settings)
        elif kind == "Pooling":
            settings.pooling = _read_pooling(name_or_path, path, hub_kwargs, settings, where)
        else:  # Normalize
            if position != len(modules) - 1:
                settings.not_reproduced.append(f"{where} is a Normalize module followed by other modules")
            config = _read_json(name_or_path, _join(path, "config.json"), hub_kwargs) or {}
            normalized = config.get("module_input_name", "sentence_embedding")
            if normalized != "sentence_embedding":
                settings.not_reproduced.append(
                    f"{where} normalises {normalized!r}, not the sentence embedding"
                )
            settings.normalize = True
    if not kinds or kinds[0] != "Transformer":
        settings.not_reproduced.append("its first module is not a Transformer")
    elif "Pooling" not in kinds:
        settings.not_reproduced.append("it has no Pooling module")
    prompts = _read_json(name_or_path, "config_sentence_transformers.json", hub_kwargs) or {}
    if prompts.get("default_prompt_name"):
        settings.not_reproduced.append(
            f"config_sentence_transformers.json puts the prompt {prompts['default_prompt_name']!r} before every "
            "text by default; encode adds no prompt"
        )
    return settings


def apply_folder_defaults(
    name_or_path: str | os.PathLike,
    pooling: str | None,
    config_kwargs: dict[str, Any],
    hub_kwargs: dict[str, Any],
    load_tokenizer,
    refuse: bool = True,
) -> tuple[str | os.PathLike, str]:
    """``from_backbone``'s reading of a sentence-transformers folder: returns ``(where the backbone is, pooling)`` and
    puts the folder's ``normalize_embeddings`` and ``max_seq_length`` into ``config_kwargs`` unless they are
    there already. An explicit ``pooling`` (and each explicit setting) wins over the folder's; without one, a
    pipeline that ``encode`` would not reproduce is refused, by name (only warned about when not ``refuse``). Not a
    sentence-transformers folder: the path as given and ``pooling`` (mean when None)."""
    settings = read_sentence_transformers_folder(name_or_path, **hub_kwargs)
    if settings is None:
        return name_or_path, pooling or "mean"
    if settings.transformer_path:
        if not os.path.isdir(os.fspath(name_or_path)):
            raise ValueError(
                f"{name_or_path}: its Transformer module lives in the subfolder {settings.transformer_path!r}; "
                "download the repository and give its local folder, or give the subfolder itself."
            )
        name_or_path = os.path.join(os.fspath(name_or_path), settings.transformer_path)
    if settings.lower_case and not _lower_cases(load_tokenizer(name_or_path)):
        settings.not_reproduced.append(
            "sentence_bert_config.json lower-cases the texts (do_lower_case), which its tokenizer does not do"
        )
    if settings.not_reproduced:
        reasons = "; ".join(settings.not_reproduced)
        if pooling is None and refuse:
            raise ValueError(
                f"{name_or_path} is a sentence-transformers folder whose embeddings encode cannot reproduce: {reasons}. "
                "Give the pooling by hand (from_backbone(folder, pooling='mean'), say) to build a pooled model on "
                "its transformer alone, without the parts named."
            )
        logger.warning(
            "%s is a sentence-transformers folder; with pooling=%r, encode does not reproduce its embeddings: %s.",
            name_or_path,
            pooling or settings.pooling or "mean",
            reasons,
        )
    config_kwargs.setdefault("normalize_embeddings", settings.normalize)
    if "embedding_max_length" not in config_kwargs:  # its name in 0.3, given by the caller
        config_kwargs.setdefault("max_seq_length", settings.max_seq_length)
    return name_or_path, pooling or settings.pooling or "mean"


def _lower_cases(tokenizer) -> bool:
    """Whether the tokenizer gives upper- and lower-case text the same tokens."""

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    return ids("Hello World ABC") == ids("hello world abc")


def _read_transformer(name_or_path, path: str, hub_kwargs, settings: SentenceTransformersSettings) -> None:
    config = _read_json(name_or_path, _join(path, "sentence_bert_config.json"), hub_kwargs) or {}
    max_seq_length = config.get("max_seq_length")
    if max_seq_length is not None:
        if isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int) or max_seq_length < 1:
            raise ValueError(
                f"{name_or_path}: sentence_bert_config.json has max_seq_length={max_seq_length!r}; expected an "
                "integer >= 1 or null."
            )
        settings.max_seq_length = max_seq_length
    settings.lower_case = bool(config.get("do_lower_case", False))
    text = (config.get("modality_config") or {}).get("text") or {}
    output = text.get("method_output_name", "last_hidden_state")
    if text.get("method", "forward") != "forward" or output not in TOKEN_STATES:
        settings.not_reproduced.append(
            f"its Transformer module reads the model's {output!r} (from {text.get('method', 'forward')!r}), not "
            "its token states"
        )


def _read_pooling(name_or_path, path: str, hub_kwargs, settings, where: str) -> str | None:
    config = _read_json(name_or_path, _join(path, "config.json"), hub_kwargs)
    if config is None:
        settings.not_reproduced.append(f"{where} is a Pooling module without a config.json")
        return None
    modes = config.get("pooling_mode")
    if modes is None:
        modes = [mode for key, mode in _LEGACY_MODE_KEYS.items() if config.get(key)] or ["mean"]
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    pooling = _POOLING_OF_MODES.get(modes)
    if pooling is None:
        choices = "; ".join(f"{list(modes)} -> {name}" for modes, name in _POOLING_OF_MODES.items())
        settings.not_reproduced.append(
            f"{where} pools with the modes {list(modes)}, which no pooling of pooled_models computes in that order "
            f"(it reproduces: {choices})"
        )
    return pooling


def _join(folder: str, name: str) -> str:
    return f"{folder.strip('/')}/{name}" if folder else name


def _read_json(name_or_path, name: str, hub_kwargs: dict[str, Any]):
    """The JSON file ``name`` of a local folder or a Hub repository, or None when it has none."""
    local = os.path.join(os.fspath(name_or_path), *name.split("/"))
    if os.path.isdir(os.fspath(name_or_path)):
        path = local if os.path.isfile(local) else None
    else:
        path = cached_file(
            name_or_path,
            name,
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
            **{key: value for key, value in hub_kwargs.items() if key != "subfolder"},
        )
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        try:
            return json.load(handle)
        except json.JSONDecodeError as error:
            raise ValueError(f"{name_or_path}: {name} is not valid JSON ({error}).") from error


# ----------------------------------------------------------------------------------------------------
# The sentence-transformers description of a saved pooled checkpoint
# ----------------------------------------------------------------------------------------------------

# sentence-transformers (>= 6) runs the checkpoint as its Transformer module and takes the model's pooler_output as
# the sentence embedding: exactly encode's vectors (before normalisation) for every pooling. Without these files it
# would mean-pool last_hidden_state, silently another embedding.
TRANSFORMER_MODULE = {
    "idx": 0,
    "name": "0",
    "path": "",
    "type": "sentence_transformers.base.modules.transformer.Transformer",
}
NORMALIZE_MODULE = {
    "idx": 1,
    "name": "1",
    "path": "1_Normalize",
    "type": "sentence_transformers.base.modules.normalize.Normalize",
}
SENTENCE_BERT_CONFIG = {
    "transformer_task": "feature-extraction",
    "modality_config": {"text": {"method": "forward", "method_output_name": "pooler_output"}},
    "module_output_name": "sentence_embedding",
}
MODEL_DESCRIPTION = {
    "model_type": "SentenceTransformer",
    "prompts": {},
    "default_prompt_name": None,
    "similarity_fn_name": "cosine",
}


def sentence_transformers_files(normalize: bool = False, max_seq_length: int | None = None) -> dict[str, Any]:
    """``file name -> JSON content`` of the files by which ``SentenceTransformer(folder)`` reads a pooled checkpoint
    as ``encode`` does with its defaults: the model's own pooling, then ``Normalize`` when ``normalize``, texts cut
    at ``max_seq_length`` tokens when given."""
    modules = [TRANSFORMER_MODULE, NORMALIZE_MODULE] if normalize else [TRANSFORMER_MODULE]
    transformer = dict(SENTENCE_BERT_CONFIG)
    if max_seq_length is not None:
        transformer["max_seq_length"] = max_seq_length
    files = {
        "modules.json": modules,
        "sentence_bert_config.json": transformer,
        "config_sentence_transformers.json": MODEL_DESCRIPTION,
    }
    if normalize:
        files[f"{NORMALIZE_MODULE['path']}/config.json"] = {
            "module_input_name": "sentence_embedding",
            "module_output_name": "sentence_embedding",
        }
    return files
