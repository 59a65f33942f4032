"""The tokenizing fingerprint: it names a map's result by what decides it (data, tokenizer, settings, code), so a
cached result is reused only when nothing that shapes it changed."""

import copy

from datasets import Dataset

from pooled_models.train.data.batching import tokenizing_fingerprint


def encoder(tokenizer, max_length):
    def encode(batch):
        return tokenizer(batch["text"], truncation=True, max_length=max_length)

    return encode


def test_the_same_data_tokenizer_and_settings_give_the_same_fingerprint(minilm_tokenizer):
    data = Dataset.from_dict({"text": ["a short text", "another one"]})
    first = tokenizing_fingerprint(data, encoder(minilm_tokenizer, 8), minilm_tokenizer)
    same = copy.deepcopy(minilm_tokenizer)  # another object, as a second run loads it
    again = tokenizing_fingerprint(data, encoder(same, 8), same)
    assert first is not None and first == again


def test_anything_that_shapes_the_result_changes_the_fingerprint(minilm_tokenizer):
    data = Dataset.from_dict({"text": ["a short text", "another one"]})
    reference = tokenizing_fingerprint(data, encoder(minilm_tokenizer, 8), minilm_tokenizer)
    other_data = Dataset.from_dict({"text": ["a short text", "another two"]})
    added = copy.deepcopy(minilm_tokenizer)
    added.add_tokens(["shorttext"])
    left = copy.deepcopy(minilm_tokenizer)
    left.truncation_side = "left"
    variants = {
        "data": tokenizing_fingerprint(other_data, encoder(minilm_tokenizer, 8), minilm_tokenizer),
        "max_length": tokenizing_fingerprint(data, encoder(minilm_tokenizer, 9), minilm_tokenizer),
        "added token": tokenizing_fingerprint(data, encoder(added, 8), added),
        "truncation side": tokenizing_fingerprint(data, encoder(left, 8), left),
    }
    assert all(value != reference for value in variants.values()), variants
    assert len(set(variants.values())) == len(variants)


def test_a_map_with_it_gives_what_datasets_own_fingerprint_gives(minilm_tokenizer):
    data = Dataset.from_dict({"text": ["a short text", "another, longer text than that"]})
    encode = encoder(minilm_tokenizer, 5)
    ours = data.map(
        encode, batched=True, new_fingerprint=tokenizing_fingerprint(data, encode, minilm_tokenizer)
    )
    theirs = data.map(encode, batched=True)
    assert ours["input_ids"] == theirs["input_ids"] and max(len(ids) for ids in ours["input_ids"]) == 5
