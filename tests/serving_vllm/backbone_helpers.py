"""Tiny random backbones of every family the plugin serves (attention head size 32, what vLLM's CPU attention
takes), built with the MiniLM tokenizer's vocabulary, and pooled checkpoints on them saved as train.py saves one."""

from __future__ import annotations

import torch
from transformers import (
    AlbertConfig,
    BertConfig,
    CamembertConfig,
    CanineConfig,
    DebertaV2Config,
    DistilBertConfig,
    ElectraConfig,
    FunnelConfig,
    Gemma3Config,
    Gemma3TextConfig,
    LlamaConfig,
    ModernBertConfig,
    MPNetConfig,
    Qwen2Config,
    Qwen3Config,
    XLMRobertaConfig,
)
from vllm_helpers import LABELS, move_parameters

from pooled_models import PooledConfig, PooledForSequenceClassification

LAYERS = {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2, "intermediate_size": 96}
DECODER = {**LAYERS, "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 128}


def gemma3_composite(ids):
    """Gemma 3's composite config (text and a tiny vision tower), as a Gemma 3 checkpoint's own config.json."""
    vision = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 37}
    return Gemma3Config(
        text_config=Gemma3TextConfig(**DECODER, **ids),
        vision_config={**vision, "image_size": 16, "patch_size": 8},
        mm_tokens_per_image=4,
    )


# How each backbone is built, given the tokenizer's vocabulary size and pad id.
BACKBONES = {
    "modernbert": lambda ids: ModernBertConfig(**LAYERS, **ids, max_position_embeddings=128),
    "qwen3": lambda ids: Qwen3Config(**DECODER, **ids),
    "qwen2": lambda ids: Qwen2Config(**DECODER, **ids),
    "llama": lambda ids: LlamaConfig(**DECODER, **ids),
    "gemma3_text": lambda ids: Gemma3TextConfig(**DECODER, **ids),
    "gemma3": gemma3_composite,
    "xlm-roberta": lambda ids: XLMRobertaConfig(**LAYERS, **ids, max_position_embeddings=130),
    "camembert": lambda ids: CamembertConfig(**LAYERS, **ids, max_position_embeddings=130),
    "bert-relative_key": lambda ids: BertConfig(
        **LAYERS, **ids, max_position_embeddings=128, position_embedding_type="relative_key"
    ),
    "distilbert": lambda ids: DistilBertConfig(
        dim=64, n_layers=3, n_heads=2, hidden_dim=96, max_position_embeddings=128, **ids
    ),
    # DeBERTa-v3's disentangled attention (relative positions, content-to-position and back).
    "deberta-v2": lambda ids: DebertaV2Config(
        **LAYERS,
        **ids,
        max_position_embeddings=128,
        relative_attention=True,
        position_biased_input=False,
        pos_att_type=["p2c", "c2p"],
        position_buckets=32,
        norm_rel_ebd="layer_norm",
        share_att_key=True,
    ),
    "electra": lambda ids: ElectraConfig(**LAYERS, **ids, embedding_size=32, max_position_embeddings=128),
    "mpnet": lambda ids: MPNetConfig(**LAYERS, **ids, max_position_embeddings=130),
    "albert": lambda ids: AlbertConfig(**LAYERS, **ids, embedding_size=32, max_position_embeddings=128),
    "canine": lambda ids: CanineConfig(**LAYERS, num_hash_buckets=64, max_position_embeddings=256),
    "funnel": lambda ids: FunnelConfig(
        d_model=64, n_head=2, d_head=32, d_inner=96, block_sizes=[1, 1], **ids
    ),
}


def save(folder, tokenizer, backbone: str, pooling: str, padded_vocabulary: int = 0, **settings):
    """A pooled classifier on a tiny random ``backbone`` with random pooler and head weights, saved with the tokenizer;
    ``padded_vocabulary``: embedding rows past the tokenizer's ids (Qwen's and Gemma's vocabularies have some)."""
    ids = {"vocab_size": len(tokenizer) + padded_vocabulary, "pad_token_id": tokenizer.pad_token_id}
    config = PooledConfig(
        backbone_config=BACKBONES[backbone](ids), pooling=pooling, id2label=LABELS, **settings
    )
    torch.manual_seed(0)
    model = PooledForSequenceClassification(config).eval()
    move_parameters(model)  # random, not initial, pooler and head weights
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def served_route(llm) -> str:
    """The implementation that ran the backbone: vLLM's class name, or "transformers"."""
    (family,) = llm.apply_model(lambda model: model.family.architecture)
    return family
