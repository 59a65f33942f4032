"""Document mode's batches in train.py, on plain data (no model): training batches bounded by a window budget
(documents of similar window counts together under group_by_length), evaluation batches of consecutive sorted
documents up to a number of windows, and the windows a capped training document keeps."""

import random

from datasets import Dataset

from pooled_models.modeling.documents import select_windows, tokenize_documents
from pooled_models.train.data.batching import token_lengths
from pooled_models.train.data.documents import tokenize_windows
from pooled_models.train.data.files import Split
from pooled_models.train.data.token_budget import (
    TokenBudgetBatches,
    consecutive_budget_batches,
    token_budget_batches,
)


def test_training_batches_hold_every_document_once_within_the_window_budget():
    rng = random.Random(0)
    counts = [rng.choice([1, 1, 1, 2, 3, 8, 20]) for _ in range(300)]
    budget = 16
    batches = TokenBudgetBatches(counts, budget, padded=False, seed=3, grouped=False).batches
    assert sorted(row for batch in batches for row in batch) == list(range(len(counts)))
    for batch in batches:
        windows = sum(counts[row] for row in batch)
        assert windows <= budget or len(batch) == 1  # a document past the budget goes alone
    # The budget binds: a batch never holds budget + 1 windows, while batches of documents would (16 rows of 20).
    assert max(sum(counts[row] for row in batch) for batch in batches if len(batch) > 1) <= budget
    assert any(counts[batch[0]] == 20 and len(batch) == 1 for batch in batches)


def test_grouped_batches_put_documents_of_similar_window_counts_together():
    rng = random.Random(1)
    counts = [rng.randint(1, 8) for _ in range(400)]

    def spread(grouped: bool) -> float:
        batches = token_budget_batches(counts, 24, padded=False, rng=random.Random(0), grouped=grouped)
        return sum(max(counts[r] for r in b) - min(counts[r] for r in b) for b in batches) / len(batches)

    assert spread(True) < 1.0 < spread(False)  # control: shuffled batches mix 1-window and 8-window documents


def test_evaluation_batches_are_consecutive_and_bounded_by_windows():
    counts = [30, 1, 5, 5, 2, 9, 1, 1]
    order = sorted(range(len(counts)), key=lambda row: -counts[row])
    batches = consecutive_budget_batches(order, counts, budget=10)
    assert [row for batch in batches for row in batch] == order  # read in turn: the sorted order
    assert batches[0] == [0]  # 30 windows: alone
    assert all(sum(counts[row] for row in batch) <= 10 for batch in batches[1:])
    assert [sum(counts[row] for row in batch) for batch in batches[1:]] == [9, 10, 5]


def test_a_capped_training_document_keeps_the_chosen_windows(minilm_tokenizer):
    words = [f"word{index}" for index in range(60)]
    texts = [" ".join(words), "a short one"]
    split = Split("train", "train file t.csv", Dataset.from_dict({"text": texts, "label": [0, 1]}))
    every = tokenize_documents(minilm_tokenizer, texts, 16, 4)["input_ids"]
    assert len(every[0]) > 4 and len(every[1]) == 1
    for keep in ("start", "start_end", "spread"):
        tokenize_windows(split, minilm_tokenizer, "text", 16, 4, max_windows=4, keep=keep)
        kept = split.encoded["input_ids"]
        chosen = select_windows(len(every[0]), 4, keep)
        assert kept[0] == [every[0][index] for index in chosen]
        assert kept[1] == every[1]  # one window: nothing to choose
    assert select_windows(len(every[0]), 4, "start_end") != select_windows(len(every[0]), 4, "start")
    tokenize_windows(split, minilm_tokenizer, "text", 16, 4, max_windows=None, keep="start")
    assert token_lengths(split.encoded) == [len(every[0]), 1]


def test_one_reading_writes_document_modes_log_line_and_card_rows():
    """The log's line and the card's rows of document mode come from one DocumentReading (issue 54, item 1): the
    window budget, the cap and what evaluation reads are worked out once, and both say them."""
    from types import SimpleNamespace

    from pooled_models.train.data.documents import DocumentMode, read_documents

    # training documents of 1, 2 and 6 windows (mean 3): about 4 documents a step by default, so 12 windows
    rows = Dataset.from_dict({"input_ids": [[[5]], [[5], [6]], [[5]] * 6]})
    tasks = {"": SimpleNamespace(encoded={"train": rows})}
    args = SimpleNamespace(
        document_mode="true",
        do_train=True,
        per_device_train_batch_size=4,
        max_windows_per_batch=None,
        max_windows_per_document=8,
        window_keeping="start_end",
        eval_max_windows=3,
    )
    reading = read_documents(tasks, DocumentMode(True, "on (--document_mode true)", 16, 2), args)
    assert reading.window_budget == 12
    assert reading.lines("Text length: 16 tokens") == [
        "Document mode on (--document_mode true): windows of 16 tokens, 2 shared by consecutive windows; training "
        "documents of 1 to 6 windows (mean 3.0, at most 8, keeping start_end), batches of at most 12 windows; "
        "evaluation and prediction read at most 3 windows of a document"
    ]
    assert reading.card_rows() == {
        "document mode": "on (--document_mode true)",
        "windows per training document": "at most 8 (start_end)",
        "windows per training batch": "at most 12",
        "windows read in evaluation and prediction": "the first 3",
    }
    args.max_windows_per_batch = 5  # given: both say it
    given = read_documents(tasks, DocumentMode(True, "on (--document_mode true)", 16, 2), args)
    assert "batches of at most 5 windows" in given.lines("")[0]
    assert given.card_rows()["windows per training batch"] == "at most 5"
    # Off: the run's text length, and the decision only where --document_mode was given.
    off = read_documents(tasks, DocumentMode(False, "off (--document_mode false)"), args)
    assert off.window_budget is None
    assert off.lines("Text length: 64 tokens") == [
        "Text length: 64 tokens",
        "Document mode off (--document_mode false)",
    ]
    assert off.card_rows() == {"document mode": "off (--document_mode false)"}
    args.document_mode = None
    silent = read_documents(tasks, DocumentMode(False, "off (train.py's default)"), args)
    assert (silent.lines("Text length: 64 tokens"), silent.card_rows()) == (["Text length: 64 tokens"], {})
