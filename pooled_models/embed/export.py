"""Folders that ``SentenceTransformer(folder)`` loads with the same pooling as the pooled model they come from.

Two ways to write one (``export_sentence_transformers(..., modules=...)``):

* ``native``: the backbone alone, followed by sentence-transformers' own modules (``Pooling``, for a layer mix
  ``WeightedLayerPooling``, then ``Normalize`` if asked). Such a folder loads with nothing but sentence-transformers
  installed, and runs anywhere sentence-transformers does (ONNX and OpenVINO backends included). Possible for the
  poolings sentence-transformers has: cls, mean, max, mean_sqrt_len, weighted_mean, last_token, their
  concatenations mean_max and cls_mean_max, and weighted_layer over one of those.
* ``pooled``: the pooled checkpoint itself, run by sentence-transformers' Transformer module, which takes the
  model's ``pooler_output`` as the sentence embedding: every pooling (attention, GeM, min, concat_layers, lstm...).
  Loading it needs ``import pooled_models`` first, or ``trust_remote_code=True`` where the package is not installed.

``auto`` (the default) writes ``native`` where it can and ``pooled`` otherwise. ``label_tokens`` is refused: it gives
one vector per label, where sentence-transformers expects one per text. Every folder is loaded back with
sentence-transformers and checked against ``model.encode`` before the function returns, so a folder that would give
other embeddings is never left behind silently.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path

import torch
from transformers.utils import logging

from ..modeling.layer_pooling import WeightedLayerPooler
from ..modeling.pooling import TokenPooler
from ..modeling.sentence_transformers_folder import SENTENCE_TRANSFORMERS_POOLING_MODES

__all__ = [
    "NATIVE_POOLING_MODES",
    "MODULE_CHOICES",
    "ExportError",
    "sentence_transformers_route",
    "export_sentence_transformers",
]

# Our token pooling -> sentence-transformers' Pooling modes, in the order our pooler concatenates them (the table
# from_backbone also reads sentence-transformers folders with).
NATIVE_POOLING_MODES: dict[str, tuple[str, ...]] = SENTENCE_TRANSFORMERS_POOLING_MODES
MODULE_CHOICES = ("auto", "native", "pooled")
# sentence-transformers' Transformer module reads this output of the pooled model as the sentence embedding.
POOLER_OUTPUT = {"text": {"method": "forward", "method_output_name": "pooler_output"}}
# Texts the exported folder is checked on: short, long, a pair of near-duplicates, nothing but special tokens.
PROBE_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "A quick brown fox jumped over a lazy dog.",
    "Sentence embeddings map texts of any length to vectors of one size, so that similar texts lie close together "
    "and a cosine similarity says how close.",
    "",
]


class ExportError(ValueError):
    """The model cannot be written as a sentence-transformers folder the way it was asked for."""


def native_modes(model) -> tuple[str, ...] | None:
    """The sentence-transformers Pooling modes that compute this model's pooling, or None when there are none."""
    pooler = model.pooler
    if isinstance(pooler, WeightedLayerPooler):
        pooler = pooler.token_pooler
    elif not isinstance(pooler, TokenPooler):
        return None
    return NATIVE_POOLING_MODES.get(pooler.name)


def sentence_transformers_route(model, modules: str = "auto") -> str:
    """``"native"`` or ``"pooled"``: how ``export_sentence_transformers`` writes this model; raises ``ExportError``
    for a pooling that cannot be written the way ``modules`` asks."""
    if modules not in MODULE_CHOICES:
        raise ExportError(f"modules must be one of {', '.join(MODULE_CHOICES)}, got {modules!r}.")
    pooling = model.config.pooling
    if pooling == "label_tokens":
        raise ExportError(
            "pooling='label_tokens' gives one vector per label ([texts, labels, hidden]); sentence-transformers "
            "expects one vector per text. Use model.encode(texts) (every label) or model.encode(texts, label=...) "
            "(one label's vector) instead."
        )
    if modules == "pooled":
        return "pooled"
    if native_modes(model) is not None:
        return "native"
    if modules == "native":
        native = ", ".join(NATIVE_POOLING_MODES)
        raise ExportError(
            f"sentence-transformers has no module for pooling={pooling!r}"
            + (
                f" with layer_token_pooling={model.config.layer_token_pooling!r}"
                if pooling == "weighted_layer"
                else ""
            )
            + f". It has: {native}, and weighted_layer over one of those. modules='pooled' writes a folder that runs "
            "this model's own pooling (loading it needs pooled_models, or trust_remote_code=True)."
        )
    return "pooled"


def export_sentence_transformers(
    model,
    folder: str | os.PathLike,
    tokenizer=None,
    *,
    normalize: bool | None = None,
    modules: str = "auto",
) -> Path:
    """Write ``model`` (a ``PooledModel`` or ``PooledForSequenceClassification``) as a sentence-transformers folder
    whose ``SentenceTransformer(folder).encode(texts)`` equals ``model.encode(texts, normalize_embeddings=normalize)``.

    Args:
        model: the pooled model; a classifier is written as its encoder (backbone and pooler, no head).
        folder: where to write; must not exist yet, or be empty.
        tokenizer: the model's tokenizer; default: the one ``encode`` uses.
        normalize: end with sentence-transformers' ``Normalize`` module (unit-length embeddings); default: the
            model's ``config.normalize_embeddings`` (what ``encode`` does by default). The folder's
            ``max_seq_length`` is always the one ``encode`` uses by default.
        modules: ``auto``, ``native`` or ``pooled`` (see the module's docstring).

    Returns the folder. Raises ``ExportError`` for a pooling that cannot be written as asked, and when the folder,
    loaded back with sentence-transformers, gives other embeddings than ``encode`` (the folder is then removed).
    """
    route = sentence_transformers_route(model, modules)
    if normalize is None:
        normalize = bool(getattr(model.config, "normalize_embeddings", False))
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ExportError(f"{folder} already exists and is not an empty folder; choose a new one.")
    tokenizer = model._encoding_tokenizer(tokenizer)
    created = not folder.exists()
    with tempfile.TemporaryDirectory(prefix="pooled_export_") as staging:
        build = _native_modules if route == "native" else _pooled_modules
        sentence_model = _sentence_transformer(
            build(model, tokenizer, Path(staging)), normalize, model.device
        )
        sentence_model.save(str(folder))
    try:
        _check_same_embeddings(model, tokenizer, folder, normalize)
    except BaseException:
        if created:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            for path in folder.iterdir():
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        raise
    return folder


def _transformer_settings(model, tokenizer) -> dict:
    """The Transformer module truncates where encode does, and pads on the right (a backbone run without our
    positions from the mask numbers a left-padded text's positions from the padding), with a padding token."""
    processor_kwargs = {"padding_side": "right"}
    if tokenizer.pad_token is None:  # decoders' tokenizers (GPT-2, Llama): any token will do, it is masked
        fallback = tokenizer.eos_token or tokenizer.unk_token
        if fallback is None:
            raise ExportError("The tokenizer has no padding, end-of-sequence or unknown token to pad with.")
        processor_kwargs["pad_token"] = fallback
    settings = {"processor_kwargs": processor_kwargs}
    max_length = model.max_text_length(tokenizer)
    if max_length is not None:
        settings["max_seq_length"] = max_length
    return settings


def _native_modules(model, tokenizer, staging: Path) -> list:
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer, WeightedLayerPooling

    pooler = model.pooler
    layer_mix = isinstance(pooler, WeightedLayerPooler)
    model.get_backbone().save_pretrained(staging)  # safetensors
    tokenizer.save_pretrained(staging)
    config_kwargs = {"output_hidden_states": True} if layer_mix else {}
    # BERT-style backbones are built without their pooler layer (nothing reads it); loaded as a plain backbone they
    # get a fresh one, which sentence-transformers' Pooling does not read either: transformers' report of it as
    # "missing" would only mislead here.
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        transformer = Transformer(
            str(staging), config_kwargs=config_kwargs, **_transformer_settings(model, tokenizer)
        )
    finally:
        logging.set_verbosity(verbosity)
    hidden_size = model.config.backbone_config.hidden_size
    modules = [transformer]
    if layer_mix:
        # Ours mixes the layers with softmax(layer_logits); sentence-transformers divides its weights by their sum,
        # so the softmax itself (which sums to 1) gives the same mix.
        weights = pooler.layer_logits.detach().float().softmax(dim=0).cpu()
        modules.append(
            WeightedLayerPooling(
                hidden_size,
                num_hidden_layers=model.config.backbone_config.num_hidden_layers,
                layer_start=pooler.layer_indices[0],
                layer_weights=torch.nn.Parameter(weights),
            )
        )
    modes = native_modes(model)
    modules.append(Pooling(hidden_size, pooling_mode=modes[0] if len(modes) == 1 else modes))
    return modules


def _pooled_modules(model, tokenizer, staging: Path) -> list:
    from sentence_transformers.sentence_transformer.modules import Transformer

    model.save_pretrained(staging)  # safetensors, with the model room's code for trust_remote_code
    tokenizer.save_pretrained(staging)
    # AutoModel gives the PooledModel (pooled_models is imported: it registered the model type) also for a
    # classifier's checkpoint, and the Transformer module reads its pooler_output.
    transformer = Transformer(
        str(staging),
        modality_config=POOLER_OUTPUT,
        module_output_name="sentence_embedding",
        **_transformer_settings(model, tokenizer),
    )
    return [transformer]


def _sentence_transformer(modules: list, normalize: bool, device):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize

    if normalize:
        modules = [*modules, Normalize()]
    return SentenceTransformer(modules=modules, similarity_fn_name="cosine", device=str(device))


def _check_same_embeddings(model, tokenizer, folder: Path, normalize: bool) -> None:
    """Load the folder as a user would and compare with encode: never a folder with silently other embeddings."""
    from sentence_transformers import SentenceTransformer

    loaded = SentenceTransformer(str(folder), device=str(model.device))
    theirs = torch.as_tensor(loaded.encode(PROBE_TEXTS, convert_to_numpy=True, show_progress_bar=False))
    ours = torch.as_tensor(model.encode(PROBE_TEXTS, tokenizer=tokenizer, normalize_embeddings=normalize))
    tolerance = 1e-4 if model.dtype == torch.float32 else 2e-2
    if theirs.shape != ours.shape or not torch.allclose(theirs, ours, atol=tolerance, rtol=tolerance):
        difference = (theirs - ours).abs().max().item() if theirs.shape == ours.shape else math.inf
        raise ExportError(
            f"The folder written to {folder}, loaded with sentence-transformers, gives other embeddings than "
            f"model.encode (shapes {tuple(theirs.shape)} and {tuple(ours.shape)}, largest difference "
            f"{difference:.3g}); it has been removed. Please report this with the model's config."
        )
