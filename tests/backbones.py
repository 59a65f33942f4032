"""Tiny random configurations of the backbone families the tests cover."""

from __future__ import annotations

import transformers

VOCAB_SIZE = 120
PAD_ID = 0

_COMMON = {"vocab_size": VOCAB_SIZE, "pad_token_id": PAD_ID}


def _encoder(config_class, **extra):
    settings = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 37,
        "max_position_embeddings": 64,
        **_COMMON,
        **extra,
    }
    return lambda: config_class(**settings)


# name -> (config factory, the token pooling that reads the whole text for that family)
TINY_BACKBONES = {
    "bert": (_encoder(transformers.BertConfig), "cls"),
    "roberta": (_encoder(transformers.RobertaConfig, max_position_embeddings=66), "cls"),
    "distilbert": (
        lambda: transformers.DistilBertConfig(
            dim=32, n_layers=2, n_heads=4, hidden_dim=37, max_position_embeddings=64, **_COMMON
        ),
        "cls",
    ),
    "esm": (
        _encoder(
            transformers.EsmConfig, mask_token_id=4, position_embedding_type="rotary", token_dropout=False
        ),
        "cls",
    ),
    "esm_absolute": (
        _encoder(transformers.EsmConfig, mask_token_id=4, max_position_embeddings=66, token_dropout=False),
        "cls",
    ),
    "deberta-v2": (
        _encoder(
            transformers.DebertaV2Config,
            relative_attention=True,
            position_biased_input=False,
            pos_att_type=["p2c", "c2p"],
        ),
        "cls",
    ),
    "modernbert": (
        _encoder(
            transformers.ModernBertConfig, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2
        ),
        "cls",
    ),
    "gpt2": (
        lambda: transformers.GPT2Config(
            n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2, **_COMMON
        ),
        "last_token",
    ),
    "llama": (
        lambda: transformers.LlamaConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=37,
            max_position_embeddings=64,
            bos_token_id=1,
            eos_token_id=2,
            **_COMMON,
        ),
        "last_token",
    ),
}


def tiny_backbone_config(name: str = "bert"):
    return TINY_BACKBONES[name][0]()


def tiny_model(pooling: str = "mean", backbone: str = "bert", model_class=None, seed: int = 0, **settings):
    """A PooledForSequenceClassification (or `model_class`) on a tiny random backbone, in eval mode."""
    import torch

    from pooled_models import PooledConfig, PooledForSequenceClassification

    settings.setdefault("num_labels", 3)
    torch.manual_seed(seed)
    config = PooledConfig(backbone_config=tiny_backbone_config(backbone), pooling=pooling, **settings)
    return (model_class or PooledForSequenceClassification)(config).eval()


def random_batch(lengths, side: str = "right", seed: int = 0, vocab_low: int = 5):
    """input_ids/attention_mask for texts of the given lengths, padded (with PAD_ID) on `side`."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD_ID)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        text = torch.randint(vocab_low, VOCAB_SIZE, (length,), generator=generator)
        span = slice(0, length) if side == "right" else slice(width - length, width)
        ids[row, span], mask[row, span] = text, 1
    return {"input_ids": ids, "attention_mask": mask}


def repad(batch, row: int, width: int, side: str):
    """One row of a batch on its own, re-padded to `width` on `side`."""
    import torch

    real = batch["input_ids"][row][batch["attention_mask"][row] == 1]
    ids = torch.full((1, width), PAD_ID)
    mask = torch.zeros(1, width, dtype=torch.long)
    span = slice(0, len(real)) if side == "right" else slice(width - len(real), width)
    ids[0, span], mask[0, span] = real, 1
    return {"input_ids": ids, "attention_mask": mask}
