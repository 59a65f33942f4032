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
