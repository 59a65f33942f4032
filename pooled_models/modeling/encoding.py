"""Sentence embeddings from a loaded pooled model: ``encode`` (texts -> pooled vectors, in input order),
``similarity``, and the sentence-transformers description written next to every saved checkpoint, so that
``SentenceTransformer(folder)`` reads the model's own pooled vectors instead of mean-pooling its token states.

``PooledModel`` and ``PooledForSequenceClassification`` (which encodes with its pooler, before its head) inherit
:class:`SentenceEncoderMixin`; the token and multi-task models do not (they have no one pooled vector per text, and
sentence-transformers would have nothing to read: their folders get no sentence-transformers files).

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files (no numpy: ``tensor.numpy()`` makes the arrays).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator

import torch
from torch import nn
from torch.nn import functional as F
from transformers import AutoTokenizer
from transformers.utils import logging

from .document_encoding import embedded, encode_documents, refuse_text_length
from .sentence_transformers_folder import sentence_transformers_files
from .text_length import text_length

__all__ = ["SentenceEncoderMixin", "SIMILARITY_FUNCTIONS", "similarity", "write_sentence_transformers_files"]


# Texts tokenized, sorted and encoded together: sorting a bounded block keeps memory flat for any input size,
# and a block this large already gives batches of near-equal length.
BLOCK_SIZE = 16384
# Without show_progress_bar, a bar is shown from this many texts on (about 16 batches of 32).
PROGRESS_BAR_FROM = 512

SIMILARITY_FUNCTIONS = ("cosine", "dot", "euclidean", "manhattan")
# Poolings that give one vector per label (each label's state after reading the text), not one per text.
PER_LABEL_POOLINGS = ("label_tokens", "label_text")


class SentenceEncoderMixin:
    """``encode`` and ``similarity`` for a pooled model (anything with ``embed(**batch)``)."""

    def encode(
        self,
        sentences: str | tuple[str, str] | Iterable[str | tuple[str, str]],
        batch_size: int = 32,
        normalize_embeddings: bool | None = None,
        max_length: int | None = None,
        show_progress_bar: bool | None = None,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: str | torch.device | None = None,
        tokenizer=None,
        label: str | int | None = None,
    ):
        """Pooled sentence embeddings of ``sentences``, in their order: one row per text (or sentence pair).

        Texts are tokenized once, sorted by token length and batched, so a batch holds texts of nearly the same
        length (little padding), then put back in input order. Runs in ``torch.inference_mode`` (no gradients), in
        eval mode (the mode the model was in is restored), in the model's dtype; the result is float32 (an ordinary
        tensor, not an inference tensor).

        Args:
            sentences: a text, a pair ``(text, text_pair)``, or a list of either (pairs are encoded together, as
                a sentence-pair classifier reads them).
            batch_size: texts per forward pass; texts shorter than the input's average share larger batches, up to
                the tokens of ``batch_size`` average texts, so no batch holds more tokens than ``batch_size`` of the
                longest texts.
            normalize_embeddings: scale every vector to length 1 (then a dot product is the cosine similarity).
                Default: ``config.normalize_embeddings`` (a sentence-transformers folder's ``Normalize`` module sets
                it in ``from_backbone``), else False.
            max_length: truncate longer inputs to this many tokens. Default: the model's length, where every path
                cuts a text (``max_text_length``: ``config.max_seq_length``, else the tokenizer's limit); always
                capped at what the model's position table holds (less the label tokens of ``pooling="label_tokens"``).
            show_progress_bar: default: shown from 512 texts on (and when transformers' bars are enabled).
            convert_to_numpy: a numpy array (the default); otherwise a torch tensor.
            convert_to_tensor: a torch tensor, on the model's device (as sentence-transformers' flag).
            device: encode on this device; the model is moved there, as sentence-transformers does.
            tokenizer: the tokenizer to use; default: loaded once from the checkpoint's folder (or, for a model
                built with ``from_backbone``, the backbone's) and kept for later calls.
            label: ``pooling="label_tokens"`` or ``"label_text"`` only: a label name (or id) whose vector to return.

        Returns:
            ``[len(sentences), pooler.output_dim]``, or ``[pooler.output_dim]`` for a single text. With
            ``pooling="label_tokens"`` (or ``"label_text"``): one vector per label, ``[len(sentences), num_labels, hidden_size]``
            (each label's final hidden state, what its head scores), or ``[len(sentences), hidden_size]`` for one
            ``label``; ``similarity`` compares such embeddings label by label.
        """
        single = _is_single_input(sentences)
        inputs = [sentences] if single else list(sentences)
        _check_batch_size(batch_size)
        label_index = self._label_index(label)
        # Document mode (document_encoding.py): every window of a text read, batch_size counting windows.
        encode_batches = self._encode_in_sorted_batches
        if self.config.reads_documents:
            refuse_text_length(self.config, max_length)
            encode_batches = self._encode_documents
        tokenizer = self._encoding_tokenizer(tokenizer)
        default_normalize = bool(getattr(self.config, "normalize_embeddings", False))
        normalize_embeddings = default_normalize if normalize_embeddings is None else normalize_embeddings
        if device is not None and torch.device(device) != self.device:
            self.to(device)
        keep_on_device = convert_to_tensor or not convert_to_numpy
        output_device = self.device if keep_on_device else torch.device("cpu")
        show_progress_bar = (
            len(inputs) >= PROGRESS_BAR_FROM if show_progress_bar is None else show_progress_bar
        )
        # As sentence-transformers: no autograd bookkeeping at all; the mode the model was in is restored after.
        with _in_eval_mode(self), torch.inference_mode():
            result = encode_batches(
                inputs,
                tokenizer,
                max_length=self._encoding_max_length(tokenizer, max_length),
                batch_size=batch_size,
                label_index=label_index,
                normalize=normalize_embeddings,
                output_device=output_device,
                show_progress_bar=show_progress_bar,
            )
        if result is None:  # no sentences
            result = torch.empty((0, *self._embedding_shape(label_index)), device=output_device)
        return _as_returned(result, single=single, keep_on_device=keep_on_device)

    def _encode_in_sorted_batches(
        self,
        inputs,
        tokenizer,
        *,
        max_length,
        batch_size,
        label_index,
        normalize,
        output_device,
        show_progress_bar,
    ) -> torch.Tensor | None:
        """The float32 embeddings of ``inputs`` in their order (None for no input), computed block by block in
        length-sorted batches."""
        pairs = _pair_form(inputs)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.pad_token_id
        result = None
        progress = logging.tqdm(
            total=len(inputs), disable=not show_progress_bar, desc="Encoding", unit="text"
        )
        try:
            for start in range(0, len(inputs), BLOCK_SIZE):
                block = _tokenize(tokenizer, inputs[start : start + BLOCK_SIZE], pairs, max_length)
                for rows, batch in _sorted_batches(block, batch_size, pad_id):
                    vectors = embedded(self, batch, label_index, normalize)
                    if result is None:
                        result = torch.empty(
                            (len(inputs), *vectors.shape[1:]), dtype=torch.float32, device=output_device
                        )
                    result[torch.as_tensor(rows) + start] = vectors.to(output_device)
                    progress.update(len(rows))
        finally:
            progress.close()
        return result

    def _encode_documents(self, inputs, tokenizer, **settings) -> torch.Tensor | None:
        """Document mode: one vector per text, every window read (``document_encoding.py``); ``batch_size`` counts
        windows."""
        settings.pop("max_length")  # the window is the model's (refused when given, in encode)
        return encode_documents(self, inputs, tokenizer, **settings)

    def similarity(self, embeddings, other_embeddings, similarity_fn: str = "cosine") -> torch.Tensor:
        """``[N, M]`` similarities of every row of ``embeddings`` with every row of ``other_embeddings`` (numpy
        arrays or tensors, as ``encode`` returns them), like sentence-transformers' ``model.similarity``.
        ``similarity_fn``: ``cosine`` (default), ``dot``, ``euclidean`` or ``manhattan`` (distances negated, so
        larger is more similar). Label-token embeddings ``[N, labels, H]`` are compared label by label and the
        scores averaged over the labels."""
        return similarity(embeddings, other_embeddings, similarity_fn)

    # -- what encode needs of the model ----------------------------------------------------------------

    def _label_index(self, label: str | int | None) -> int | None:
        if label is None:
            return None
        if self.config.pooling not in PER_LABEL_POOLINGS:
            raise ValueError(
                f"label={label!r} picks one label's vector of pooling='label_tokens' or 'label_text'; this model's "
                "pooling is "
                f"{self.config.pooling!r}, which gives one vector per text."
            )
        label2id = {str(name): int(index) for name, index in (self.config.label2id or {}).items()}
        if isinstance(label, int) and not isinstance(label, bool) and 0 <= label < self.config.num_labels:
            return label
        if str(label) in label2id:
            return label2id[str(label)]
        raise ValueError(f"label={label!r} is not a label of this model. Its labels: {', '.join(label2id)}.")

    def _embedding_shape(self, label_index: int | None) -> tuple[int, ...]:
        if self.config.pooling in PER_LABEL_POOLINGS and label_index is None:
            return (self.config.num_labels, self.pooler.output_dim)
        return (self.pooler.output_dim,)

    def _encoding_tokenizer(self, tokenizer=None):
        """The tokenizer passed, else the one found in the checkpoint's folder (or the backbone's), loaded once."""
        if tokenizer is not None:
            return tokenizer
        found = getattr(self, "_sentence_tokenizer", None)
        if found is not None:
            return found
        sources = [self.name_or_path, getattr(self.config.backbone_config, "_name_or_path", "")]
        sources = [source for source in dict.fromkeys(sources) if source]
        for source in sources:
            try:
                found = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
            except (OSError, ValueError):
                continue
            self._sentence_tokenizer = found
            return found
        raise ValueError(
            "encode needs the model's tokenizer, and none was found "
            + (
                f"in {', '.join(map(repr, sources))}"
                if sources
                else "(the model was not loaded from a folder)"
            )
            + ": save it next to the model (tokenizer.save_pretrained(folder)) or pass encode(..., tokenizer=...)."
        )

    def _encoding_max_length(self, tokenizer, max_length: int | None) -> int | None:
        """The token limit of one input: ``max_length``, capped at the positions the model has for a text; else the
        model's own length (``max_text_length``), the one every other path cuts at too."""
        if max_length is None:
            return self.max_text_length(tokenizer)
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
            raise ValueError(f"max_length must be an integer >= 1, got {max_length!r}.")
        return text_length(max_length, None, self._encoding_position_limit(), setting="max_length")

    def _encoding_position_limit(self) -> int | None:
        """The tokens of one text the model has positions for (less the label tokens it inserts), or None."""
        if self.position_budget is None:
            return None
        return self.position_budget - self.added_tokens

    # -- saving ------------------------------------------------------------------------------------------

    def save_pretrained(self, save_directory, *args, push_to_hub: bool = False, **kwargs):
        """Also writes the sentence-transformers description (see ``write_sentence_transformers_files``).

        With ``push_to_hub=True`` the folder is uploaded by ``push_to_hub`` once it is complete: transformers
        uploads from inside its own ``save_pretrained``, before these files exist."""
        hub_kwargs = {}
        if push_to_hub:
            for key in ("repo_id", "commit_message", "create_pr", "private", "token", "revision"):
                if key in kwargs:
                    hub_kwargs[key] = kwargs[key] if key == "token" else kwargs.pop(key)
        saved = super().save_pretrained(save_directory, *args, **kwargs)
        is_main_process = args[0] if args else kwargs.get("is_main_process", True)
        if is_main_process:
            # The config's length, as the model reads it (capped at its positions); unset, none: sentence-transformers
            # and vLLM then take the tokenizer's limit, as every other path does.
            stated = getattr(self.config, "max_seq_length", None)
            max_seq_length = None if stated is None else self.max_text_length()
            # Document mode: sentence-transformers reads one row a text, so at most one window (the model warns that
            # the rest goes unread), never a row longer than the windows the model was trained on.
            max_seq_length = getattr(self.config, "document_window", None) or max_seq_length
            write_sentence_transformers_files(
                save_directory,
                normalize=bool(getattr(self.config, "normalize_embeddings", False)),
                max_seq_length=max_seq_length,
            )
            if push_to_hub:
                repo_id = hub_kwargs.pop("repo_id", os.path.basename(os.path.normpath(save_directory)))
                self.push_to_hub(repo_id, **hub_kwargs)
        return saved


def _as_returned(result: torch.Tensor, *, single: bool, keep_on_device: bool):
    """encode's result as returned: a tensor or a numpy array, one row for a single text."""
    if keep_on_device:
        result = result.clone()  # an inference tensor would refuse later autograd use; a copy is ordinary
    if single:
        result = result[0]
    return result if keep_on_device else result.numpy()


@contextlib.contextmanager
def _in_eval_mode(module: nn.Module) -> Iterator[None]:
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def _check_batch_size(batch_size) -> None:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}.")


def _is_single_input(sentences) -> bool:
    return isinstance(sentences, str) or (
        isinstance(sentences, tuple) and len(sentences) == 2 and all(isinstance(s, str) for s in sentences)
    )


def _pair_form(inputs: list) -> bool:
    """True for a list of (text, text_pair), False for a list of texts; anything else is refused."""

    def is_pair(item) -> bool:
        return isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(s, str) for s in item)

    kinds = {"pair" if is_pair(item) else "text" if isinstance(item, str) else "other" for item in inputs}
    if "other" in kinds or len(kinds) > 1:
        bad = next(
            (index, item)
            for index, item in enumerate(inputs)
            if not isinstance(item, str) and (not is_pair(item) or "text" in kinds)
        )
        raise ValueError(
            "encode takes texts or (text, text_pair) pairs, not a mix of both nor anything else; "
            f"sentences[{bad[0]}] is {bad[1]!r}."
        )
    return kinds == {"pair"}


def _tokenize(tokenizer, texts: list, pairs: bool, max_length: int | None) -> dict[str, list[list[int]]]:
    """Token ids (and token type ids, where the tokenizer makes them) of each text, unpadded."""
    first, second = ([text for text, _ in texts], [pair for _, pair in texts]) if pairs else (texts, None)
    encoded = tokenizer(
        first,
        second,
        truncation=max_length is not None,
        max_length=max_length,
        padding=False,
        return_attention_mask=False,
    )
    return {name: encoded[name] for name in ("input_ids", "token_type_ids") if name in encoded}


def _sorted_batches(
    block: dict[str, list[list[int]]], batch_size: int, pad_id: int
) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
    """``(row indices, padded batch)``: texts sorted by token length, so a batch pads little, longest first, so a
    batch too large for the memory fails at once rather than at the end.

    A batch holds ``batch_size`` texts, or more when they are shorter than the block's average: up to a token budget
    of ``batch_size`` average texts, padding included. Short texts then share larger batches (fewer passes, each
    with more work); long ones keep ``batch_size`` (smaller batches of long texts would only add passes on a CPU,
    where a matrix product's cost per token hardly depends on the batch). No batch holds more tokens than
    ``batch_size`` texts of the longest length would (the worst case of batches by count)."""
    lengths = [len(ids) for ids in block["input_ids"]]
    order = sorted(range(len(lengths)), key=lambda row: -lengths[row])
    budget = batch_size * max(sum(lengths) / len(lengths), 1.0)
    start = 0
    while start < len(order):
        width = max(lengths[order[start]], 1)  # the longest text of the batch sets its padded width
        stop = start + max(batch_size, int(budget // width))
        rows = order[start:stop]
        yield (
            rows,
            _pad_right({name: [values[row] for row in rows] for name, values in block.items()}, pad_id),
        )
        start = stop


def _pad_right(sequences: dict[str, list[list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """One tensor per input, padded on the right; the pooled vector does not depend on the padding side (the
    model derives positions from the mask), so no tokenizer setting is needed."""
    lengths = torch.tensor([len(ids) for ids in sequences["input_ids"]])
    width = max(int(lengths.max()), 1)  # a text with no token at all still gets a (masked) column
    mask = torch.arange(width) < lengths.unsqueeze(1)
    batch = {"attention_mask": mask.long()}
    for name, values in sequences.items():
        padded = torch.full(mask.shape, pad_id if name == "input_ids" else 0, dtype=torch.long)
        padded[mask] = torch.tensor([token for row in values for token in row], dtype=torch.long)
        batch[name] = padded
    return batch


def similarity(embeddings, other_embeddings, similarity_fn: str = "cosine") -> torch.Tensor:
    """See :meth:`SentenceEncoderMixin.similarity`."""
    if similarity_fn not in SIMILARITY_FUNCTIONS:
        raise ValueError(
            f"Unknown similarity_fn {similarity_fn!r}. Valid choices: {', '.join(SIMILARITY_FUNCTIONS)}."
        )
    first, second = (_as_matrix_batch(values) for values in (embeddings, other_embeddings))
    if first.shape[0] != second.shape[0] or first.shape[2] != second.shape[2]:
        raise ValueError(
            "Cannot compare embeddings of shape "
            f"{tuple(torch.as_tensor(embeddings).shape)} with {tuple(torch.as_tensor(other_embeddings).shape)}."
        )
    second = second.to(first.device)
    if similarity_fn == "cosine":
        scores = F.normalize(first, dim=-1) @ F.normalize(second, dim=-1).transpose(1, 2)
    elif similarity_fn == "dot":
        scores = first @ second.transpose(1, 2)
    else:
        scores = -torch.cdist(first, second, p=2.0 if similarity_fn == "euclidean" else 1.0)
    return scores.mean(dim=0)  # over the labels of label-token embeddings; a no-op otherwise


def _as_matrix_batch(values) -> torch.Tensor:
    """``[G, rows, width]`` in float32: G = 1 for ordinary embeddings, one matrix per label for label tokens."""
    tensor = torch.as_tensor(values).float()
    if tensor.ndim == 1:
        tensor = tensor.unsqueeze(0)
    if tensor.ndim == 2:
        return tensor.unsqueeze(0)
    if tensor.ndim == 3:
        return tensor.transpose(0, 1)
    raise ValueError(
        f"Embeddings must be [width], [rows, width] or [rows, labels, width]; got {tuple(tensor.shape)}."
    )


# ----------------------------------------------------------------------------------------------------
# The sentence-transformers description of a saved checkpoint
# ----------------------------------------------------------------------------------------------------

# The files with encode's default settings (no normalisation, the tokenizer's limit): see sentence_transformers_folder.
SENTENCE_TRANSFORMERS_FILES = sentence_transformers_files()


def write_sentence_transformers_files(
    folder: str | os.PathLike, normalize: bool = False, max_seq_length: int | None = None
) -> None:
    """Write the files by which ``SentenceTransformer(folder)`` loads this checkpoint with its own pooling, its
    normalisation and its token limit, as ``encode`` runs with its defaults (the folder also needs the tokenizer, as
    for ``encode``). Loading it needs ``import pooled_models`` first, or ``SentenceTransformer(folder,
    trust_remote_code=True)`` where the package is not installed."""
    for name, content in sentence_transformers_files(normalize, max_seq_length).items():
        path = os.path.join(folder, *name.split("/"))
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(content, handle, indent=2)
            handle.write("\n")
