"""Token-classification data: CoNLL and word/tag columns, the tag set, tags aligned to sub-tokens, and back from
token logits: each word's predicted tag, and the entities a tagged text holds (BIO decoding)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
from datasets import Dataset, Features, Sequence, Value

from ...errors import DataError, UsageError, where
from .batching import tokenized
from .files import Split, limit_rows, load_splits, read_file

__all__ = [
    "CONLL_SUFFIXES",
    "read_conll",
    "load_token_splits",
    "TokenLabels",
    "prepare_token_splits",
    "tokenize_words",
    "OUTSIDE",
    "token_columns",
    "first_subtoken_positions",
    "word_predictions",
    "entity_spans",
    "entities_of",
]

logger = logging.getLogger(__name__)


CONLL_SUFFIXES = (".conll",)


CONLL_COLUMNS = ("words", "tags")  # the columns a CoNLL file is read into


OUTSIDE = "O"  # the tag of words outside every entity, which sorts first


IGNORED = -100


def read_conll(path: Path) -> Dataset:
    """A CoNLL-style file as rows of ``words`` and ``tags``: one word a line (its tag in the last of its
    whitespace-separated columns), a blank line between sentences, ``-DOCSTART-`` lines skipped."""
    if not path.is_file():
        raise DataError(f"Cannot read {path}: no such file.")
    rows: list[dict[str, list[str]]] = []
    words: list[str] = []
    tags: list[str] = []
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as error:
        raise DataError(
            f"Cannot read {path}: it is not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset {error.start})."
        ) from None
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if words:
                rows.append({"words": words, "tags": tags})
                words, tags = [], []
            continue
        if len(fields) < 2:
            raise DataError(
                f"Cannot read {path}: line {number} holds {line.strip()!r}, one column; a CoNLL line holds a word and "
                "its tag (the last column), separated by spaces or tabs."
            )
        words.append(fields[0])
        tags.append(fields[-1])
    if words:
        rows.append({"words": words, "tags": tags})
    if not rows:
        raise DataError(f"{path} holds no rows.")
    return Dataset.from_list(rows, features=_features())


def _features():
    return Features({"words": Sequence(Value("string")), "tags": Sequence(Value("string"))})


def load_token_splits(data_args, wanted: list[str], cache_dir: str | None = None) -> dict[str, Split]:
    """The splits named in ``wanted``: CoNLL files read here, the other formats (and Hub datasets) as train.py reads
    any data."""
    if data_args.dataset_name:
        return load_splits(data_args, wanted, cache_dir)
    files = data_args.files()
    splits = {}
    for name in wanted:
        if not files[name]:
            raise DataError(f"No {name} data: set {name}_file (or dataset_name for a Hub dataset).")
        path = Path(files[name])
        dataset = read_conll(path) if path.suffix.lower() in CONLL_SUFFIXES else read_file(path, cache_dir)
        splits[name] = Split(name, f"{name} file {files[name]}", dataset)
    return splits


def token_columns(data_args) -> tuple[str, str]:
    """The (words, tags) columns: CoNLL files are read into ``words`` and ``tags``; other data names its own."""
    files = [path for path in data_args.files().values() if path] if not data_args.dataset_name else []
    conll = [Path(path).suffix.lower() in CONLL_SUFFIXES for path in files]
    if any(conll) and not all(conll):
        raise DataError(
            f"The data files mix CoNLL ({', '.join(CONLL_SUFFIXES)}) and other formats ({', '.join(files)}); give "
            "every split in one format."
        )
    return CONLL_COLUMNS if any(conll) else (data_args.words_column, data_args.tags_column)


def _check_words(split: Split, column: str) -> None:
    for row, words in enumerate(split.dataset[column]):
        if not isinstance(words, list) or not words:
            shown = (
                "an empty list" if words == [] else f"{words!r}" if words is None else type(words).__name__
            )
            raise DataError(
                f"{where(split.source, column, row)} holds {shown}; a token-classification row holds a non-empty list "
                "of words (pre-split text), one tag per word in the tags column."
            )
        for position, word in enumerate(words):
            if not isinstance(word, str) or not word.strip():
                raise DataError(
                    f"{where(split.source, column, row)}: word {position} is {word!r}; every word must be non-empty text."
                )


def _check_tags(split: Split, words_column: str, tags_column: str) -> None:
    for row, (words, tags) in enumerate(
        zip(split.dataset[words_column], split.dataset[tags_column], strict=True)
    ):
        if not isinstance(tags, list) or not all(isinstance(tag, str) and tag.strip() for tag in tags or []):
            raise DataError(
                f"{where(split.source, tags_column, row)} holds {tags!r}; the tags of a row are a list of tag names "
                "(text), one per word."
            )
        if len(tags) != len(words):
            raise DataError(
                f"{where(split.source, tags_column, row)} holds {len(tags)} tags for the {len(words)} words of "
                f"column {words_column!r}; give one tag per word."
            )


class TokenLabels:
    """The tag names of a token-classification task, in id order (``O`` first), and the tags of a split as ids."""

    problem_type = "single_label_classification"

    def __init__(self, names: list[str]):
        self.names = names

    @classmethod
    def from_training(cls, tags: list[list[str]], source: str, column: str) -> TokenLabels:
        seen = sorted({tag for row in tags for tag in row})
        if len(seen) < 2:
            raise DataError(
                f"{where(source, column)}: the training split has {len(seen)} tag(s) ({', '.join(seen)}); a token "
                "classifier needs at least two."
            )
        names = ([OUTSIDE] if OUTSIDE in seen else []) + [tag for tag in seen if tag != OUTSIDE]
        return cls(names)

    @classmethod
    def from_config(cls, id2label: dict[int, str]) -> TokenLabels:
        return cls([id2label[index] for index in range(len(id2label))])

    @property
    def num_labels(self) -> int:
        return len(self.names)

    @property
    def id2label(self) -> dict[int, str]:
        return dict(enumerate(self.names))

    @property
    def label2id(self) -> dict[str, int]:
        return {name: index for index, name in enumerate(self.names)}

    def continuation(self) -> dict[int, int]:
        """tag id -> the id a word's later sub-tokens get with ``label_all_subtokens``: ``B-X`` -> ``I-X``."""
        label2id = self.label2id
        return {
            index: label2id.get("I-" + name[2:], index) if name.startswith("B-") else index
            for index, name in enumerate(self.names)
        }

    def encode(self, split: Split, column: str, skip_unseen: bool) -> list[list[int]]:
        """The tags of every row as ids; rows with a tag unseen in training are refused, or left out."""
        label2id = self.label2id
        kept, targets = [], []
        for row, tags in enumerate(split.dataset[column]):
            unseen = [tag for tag in tags if tag not in label2id]
            if unseen:
                if skip_unseen:
                    continue
                raise DataError(
                    f"{where(split.source, column, row)}: tag {unseen[0]!r} does not occur in the training data, so the "
                    f"model cannot predict it. Training tags: {', '.join(map(repr, self.names))}. Pass "
                    "--skip_unseen_labels to leave such rows out of evaluation."
                )
            kept.append(row)
            targets.append([label2id[tag] for tag in tags])
        if len(kept) < len(split.dataset):
            logger.warning(
                "%s: left out %d of %d rows with a tag that does not occur in training (--skip_unseen_labels).",
                split.source,
                len(split.dataset) - len(kept),
                len(split.dataset),
            )
            if not kept:
                raise DataError(
                    f"{where(split.source, column)}: no row is left once the unseen tags are skipped."
                )
            split.dataset = split.dataset.select(kept)
        return targets


def prepare_token_splits(
    data_args, roles: list[str], saved_labels: TokenLabels | None = None, cache_dir: str | None = None
) -> tuple[dict[str, Split], TokenLabels, tuple[str, str]]:
    """The ``roles`` splits, checked, with their tag ids as targets; the label space (from training, or the saved
    model's when only evaluating); and the (words, tags) column names."""
    words_column, tags_column = token_columns(data_args)
    splits = load_token_splits(data_args, roles, cache_dir)
    limit_rows(splits, data_args)
    for split in splits.values():
        split.labelled = split.name != "test" or tags_column in split.dataset.column_names
        split.require_columns([words_column] + ([tags_column] if split.labelled else []))
        _check_words(split, words_column)
        if split.labelled:
            _check_tags(split, words_column, tags_column)
    if "train" in splits:
        train = splits["train"]
        labels = TokenLabels.from_training(train.dataset[tags_column], train.source, tags_column)
        if saved_labels is not None and saved_labels.names != labels.names:
            raise DataError(
                f"The model was trained for the tags {saved_labels.names}; {train.source} gives {labels.names}. Start "
                "from the backbone to train on new tags."
            )
    elif saved_labels is not None:
        labels = saved_labels
    else:
        raise DataError(
            "Without do_train, the model must be one trained by train.py (its tags come from its config)."
        )
    for split in splits.values():
        if split.labelled:
            split.targets = labels.encode(split, tags_column, data_args.skip_unseen_labels)
    return splits, labels, (words_column, tags_column)


def tokenize_words(
    split: Split,
    tokenizer,
    words_column: str,
    labels: TokenLabels,
    max_length: int,
    label_all_subtokens: bool = False,
) -> None:
    """Set ``split.encoded``: the words' sub-tokens (truncated to ``max_length``, counted in ``split.truncated``) and,
    for a labelled split, each sub-token's tag id (-100 where it has none)."""
    if not getattr(tokenizer, "is_fast", False):
        raise UsageError(
            f"Token classification aligns tags to sub-words with a fast tokenizer's word_ids(); the tokenizer "
            f"{type(tokenizer).__name__} is not a fast one. Use a backbone with a tokenizer.json."
        )
    continuation = labels.continuation()
    targets = split.targets

    def encode(batch, indices):
        full = tokenizer(batch[words_column], is_split_into_words=True, truncation=False, verbose=False)
        lengths = [len(ids) for ids in full["input_ids"]]
        encoded = tokenizer(
            batch[words_column],
            is_split_into_words=True,
            truncation=True,
            max_length=max_length,
            verbose=False,
        )
        encoded["truncated"] = [length > max_length for length in lengths]
        if targets is not None:
            encoded["labels"] = [
                _aligned(encoded.word_ids(position), targets[index], continuation, label_all_subtokens)
                for position, index in enumerate(indices)
            ]
        return dict(encoded)

    encoded = tokenized(split.dataset, encode, tokenizer, f"Tokenizing {split.name}", with_indices=True)
    split.truncated = sum(encoded["truncated"])
    split.encoded = encoded.remove_columns("truncated")
    if split.truncated:
        logger.warning(
            "%s: %d of %d rows are longer than %d tokens and were truncated (their last words get no prediction).",
            split.source,
            split.truncated,
            len(encoded),
            max_length,
        )


def _aligned(
    word_ids: list[int | None], tags: list[int], continuation: dict[int, int], every: bool
) -> list[int]:
    aligned, previous = [], None
    for word in word_ids:
        if word is None:
            aligned.append(IGNORED)
        elif word != previous:
            aligned.append(tags[word])
        else:
            aligned.append(continuation[tags[word]] if every else IGNORED)
        previous = word
    return aligned


def first_subtoken_positions(word_ids: list[int | None]) -> dict[int, int]:
    """word index -> the position of its first sub-token (words cut off by truncation are absent)."""
    positions: dict[int, int] = {}
    for position, word in enumerate(word_ids):
        if word is not None and word not in positions:
            positions[word] = position
    return positions


def word_predictions(
    tokenizer, words: list[str], predicted: Any, names: list[str], max_length: int
) -> list[str]:
    """The predicted tag of each word (its first sub-token's); words cut off by truncation get ``O``."""
    encoding = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length)
    positions = first_subtoken_positions(encoding.word_ids())
    return [
        names[int(predicted[positions[index]])] if index in positions else OUTSIDE
        for index in range(len(words))
    ]


def entity_spans(tags: list[str]) -> list[tuple[str, int, int]]:
    """``(type, first word, last word)`` of the entities in a row of word tags: ``B-X`` opens an entity, and so does an
    ``I-X`` that follows no open ``X`` entity (IOB1); ``I-X`` continues the open ``X`` entity; ``O`` (or any tag that
    names no entity) closes it, so B-PER, O, I-PER are two entities."""
    spans: list[list[Any]] = []
    open_span: list[Any] | None = None
    for index, tag in enumerate(tags):
        kind = tag[2:] if tag[:2] in ("B-", "I-") else None
        if kind is None:
            open_span = None
            continue
        if tag.startswith("I-") and open_span is not None and open_span[0] == kind:
            open_span[2] = index
            continue
        open_span = [kind, index, index]
        spans.append(open_span)
    return [(kind, first, last) for kind, first, last in spans]


def entities_of(text: str, tokenizer, token_logits, id2label: dict[int, str]) -> list[tuple[str, str, float]]:
    """``(type, text, score)`` of the entities in ``text``: each word tagged by its first sub-token, the entities read
    from the tags as :func:`entity_spans` reads them, the score the mean of the entity's words' probabilities."""
    encoding = tokenizer(text, return_offsets_mapping=True, truncation=True)
    logits = np.asarray(token_logits, dtype=np.float64)
    scores = np.exp(logits - logits.max(axis=-1, keepdims=True))
    scores = scores / scores.sum(axis=-1, keepdims=True)
    words: dict[int, list[int]] = {}
    for position, word in enumerate(encoding.word_ids()):
        if word is not None:
            words.setdefault(word, []).append(position)
    positions = list(words.values())
    tags = [id2label[int(scores[first].argmax())] for first, *_ in positions]
    offsets = encoding["offset_mapping"]
    found = []
    for kind, first, last in entity_spans(tags):
        start, end = offsets[positions[first][0]][0], offsets[positions[last][-1]][1]
        word_scores = [float(scores[positions[word][0]].max()) for word in range(first, last + 1)]
        found.append((kind, text[start:end], float(np.mean(word_scores))))
    return found
