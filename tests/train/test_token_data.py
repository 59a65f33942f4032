"""Token-classification data: CoNLL files, the checks of words and tags (file, column, row), the label space and the
alignment of tags to sub-words; the entity-level metrics; and the entities read back from a tagged text (BIO
decoding), where an O tag ends an entity."""

import numpy as np
import pytest
from helpers import entity_rows, write_rows
from transformers import AutoTokenizer

from pooled_models.errors import DataError
from pooled_models.train.arguments import DataArguments
from pooled_models.train.data.token import (
    TokenLabels,
    entities_of,
    entity_spans,
    prepare_token_splits,
    read_conll,
    tokenize_words,
)
from pooled_models.train.evaluation import token_metrics, uses_entity_tags

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
"""


def data_args(tmp_path, rows_by_split, **settings):
    files = {split: write_rows(tmp_path / f"{split}.jsonl", rows) for split, rows in rows_by_split.items()}
    return DataArguments(
        **{f"{split}_file": str(path) for split, path in files.items()}, tags_column="tags", **settings
    )


def test_conll_files_are_read_into_words_and_tags(tmp_path):
    path = tmp_path / "train.conll"
    path.write_text(CONLL)
    dataset = read_conll(path)
    assert dataset["words"] == [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]]
    assert dataset["tags"] == [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"]]


def test_a_conll_line_without_a_tag_names_its_line(tmp_path):
    path = tmp_path / "train.conll"
    path.write_text("EU B-ORG\nrejects\n")
    with pytest.raises(DataError, match=r"train.conll: line 2 holds 'rejects', one column"):
        read_conll(path)


def test_the_label_space_puts_o_first_and_sorts_the_rest(tmp_path):
    args = data_args(tmp_path, {"train": entity_rows(12)})
    splits, labels, columns = prepare_token_splits(args, ["train"])
    assert labels.names == ["O", "B-LOC", "I-LOC"] and columns == ("words", "tags")
    assert splits["train"].targets[0] == [labels.label2id[tag] for tag in entity_rows(1)[0]["tags"]]


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda row: row.update(tags=row["tags"][:-1]),
            r"column 'tags', row 3 holds \d+ tags for the \d+ words",
        ),
        (lambda row: row.update(words=[]), r"column 'words', row 3 holds an empty list"),
        (lambda row: row.update(words=["a", " ", "b"], tags=["O"] * 3), r"row 3: word 1 is ' '"),
        (lambda row: row.update(tags=[1] * len(row["words"])), r"column 'tags', row 3 holds \[1, "),
    ],
)
def test_bad_rows_are_named_by_file_column_and_row(tmp_path, change, message):
    rows = entity_rows(8)
    change(rows[3])
    with pytest.raises(DataError, match=message):
        prepare_token_splits(data_args(tmp_path, {"train": rows}), ["train"])


def test_a_tag_unseen_in_training_is_refused_or_skipped(tmp_path):
    validation = entity_rows(6, seed=1)
    validation[2]["tags"][0] = "B-ORG"
    args = data_args(tmp_path, {"train": entity_rows(12), "validation": validation})
    with pytest.raises(
        DataError, match=r"validation.jsonl, column 'tags', row 2: tag 'B-ORG' does not occur"
    ):
        prepare_token_splits(args, ["train", "validation"])
    args = data_args(tmp_path, {"train": entity_rows(12), "validation": validation}, skip_unseen_labels=True)
    splits, _, _ = prepare_token_splits(args, ["train", "validation"])
    assert len(splits["validation"].dataset) == 5


def test_conll_and_jsonl_files_cannot_be_mixed(tmp_path):
    (tmp_path / "train.conll").write_text(CONLL)
    validation = write_rows(tmp_path / "validation.jsonl", entity_rows(4))
    args = DataArguments(
        train_file=str(tmp_path / "train.conll"), validation_file=str(validation), tags_column="tags"
    )
    with pytest.raises(DataError, match="mix CoNLL"):
        prepare_token_splits(args, ["train", "validation"])


@pytest.mark.parametrize("every", [False, True])
def test_tags_go_to_the_first_sub_token_or_to_every_one(tmp_path, minilm_path, every):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    rows = [{"words": ["Visit", "Ouagadougou", "today"], "tags": ["O", "B-LOC", "O"]}, *entity_rows(4)]
    args = data_args(tmp_path, {"train": rows})
    splits, labels, _ = prepare_token_splits(args, ["train"])
    tokenize_words(splits["train"], tokenizer, "words", labels, max_length=32, label_all_subtokens=every)
    encoded = splits["train"].encoded[0]
    pieces = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    assert len([piece for piece in pieces if piece.startswith("##")]) >= 2  # the city splits into sub-tokens
    city = [index for index, piece in enumerate(pieces) if piece.startswith("##") or piece == pieces[2]]
    b_loc, i_loc = labels.label2id["B-LOC"], labels.label2id["I-LOC"]
    assert encoded["labels"][0] == -100 and encoded["labels"][-1] == -100  # [CLS], [SEP]
    assert encoded["labels"][city[0]] == b_loc
    assert all(encoded["labels"][index] == (i_loc if every else -100) for index in city[1:])


def test_long_rows_are_truncated_and_counted(tmp_path, minilm_path):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    args = data_args(tmp_path, {"train": entity_rows(6)})
    splits, labels, _ = prepare_token_splits(args, ["train"])
    tokenize_words(splits["train"], tokenizer, "words", labels, max_length=6)
    assert splits["train"].truncated == 6
    assert all(len(ids) == 6 for ids in splits["train"].encoded["input_ids"])


def test_entity_metrics_count_whole_entities():
    names = ["O", "B-LOC", "I-LOC"]
    labels = np.array([[-100, 1, 2, 0, -100], [-100, 0, 1, -100, -100]])
    predicted = np.array([[0, 1, 0, 0, 0], [0, 0, 1, 0, 0]])  # the first entity is cut short
    logits = np.eye(3)[predicted]
    metrics = token_metrics(logits, labels, names)
    assert metrics["precision"] == pytest.approx(0.5) and metrics["recall"] == pytest.approx(0.5)
    assert metrics["accuracy"] == pytest.approx(4 / 5)


def test_word_class_tags_get_token_accuracy_only():
    assert not uses_entity_tags(["NOUN", "VERB", "ADJ"]) and uses_entity_tags(["O", "B-X", "I-X"])
    metrics = token_metrics(np.eye(2)[np.array([[0, 1]])], np.array([[0, 0]]), ["NOUN", "VERB"])
    assert metrics == {"accuracy": 0.5}


def test_continuation_turns_b_into_i_where_the_label_space_has_it():
    labels = TokenLabels(["O", "B-LOC", "I-LOC", "B-X"])
    assert labels.continuation() == {0: 0, 1: 2, 2: 2, 3: 3}


@pytest.mark.parametrize(
    "tags, spans",
    [
        (
            ["B-PER", "O", "I-PER"],
            [("PER", 0, 0), ("PER", 2, 2)],
        ),  # an O ends the entity: two people, not one
        (["B-PER", "I-PER", "O"], [("PER", 0, 1)]),
        (["B-PER", "B-PER"], [("PER", 0, 0), ("PER", 1, 1)]),  # B- always opens a new one
        (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 0), ("LOC", 1, 2)]),  # I- of another type opens one (IOB1)
        (["I-ORG", "I-ORG", "O", "O"], [("ORG", 0, 1)]),
        (["O", "O"], []),
    ],
)
def test_entity_spans_follow_the_bio_tags(tags, spans):
    assert entity_spans(tags) == spans


def test_entities_of_a_text_end_at_an_o_tag(minilm_tokenizer):
    # "John met Smith", tagged B-PER, O, I-PER: two entities, "John" and "Smith", never "John met Smith".
    id2label = {0: "O", 1: "B-PER", 2: "I-PER"}
    text = "John met Smith"
    word_tags = [1, 0, 2]
    encoding = minilm_tokenizer(text)
    logits = np.zeros((len(encoding["input_ids"]), 3))
    for position, word in enumerate(encoding.word_ids()):
        logits[position, 0 if word is None else word_tags[word]] = 5.0
    found = entities_of(text, minilm_tokenizer, logits, id2label)
    assert [(kind, span) for kind, span, _ in found] == [("PER", "John"), ("PER", "Smith")]
    probability = np.exp(5.0) / (np.exp(5.0) + 2)
    assert [score for _, _, score in found] == pytest.approx([probability, probability])
