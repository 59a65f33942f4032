"""Pooled checkpoints to serve, transformers' answers for them, and vLLM run as a user runs it: the offline LLM API
in this process, and the OpenAI-compatible HTTP server (bench/vllm_server.py) in a subprocess on 127.0.0.1."""

from __future__ import annotations

import contextlib
import gc
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertConfig, LlamaConfig, RobertaConfig

# The HTTP server as the docs start it (bench/vllm_server.py; tests/conftest.py puts bench/ on the path).
from vllm_server import Server, section_commands  # noqa: E402,F401

from pooled_models import PooledConfig, PooledForSequenceClassification, PooledModel

# Texts of different lengths in one batch (padding in transformers, none in vLLM). An empty text is refused by the
# plugin (serving/empty_texts.py; test_http.py): a row with no real token is the model tests' (tests/modeling).
TEXTS = [
    "I love this.",
    "This is the worst thing I have ever read, honestly, and I have read the manual of my washing machine.",
    "ok",
    "Fine.",
    "Meetings that could have been an email, again and again.",
]
LABELS = {0: "joy", 1: "anger", 2: "fear"}
TOLERANCE = 1e-4
# The engine as the docs start it on a CPU: float32 (the scores are compared to transformers'), no compilation.
ENGINE = {"runner": "pooling", "enforce_eager": True, "dtype": "float32"}


def tiny_backbone(kind: str, vocab_size: int, pad_token_id: int):
    """A tiny random backbone config whose attention head size (32) vLLM's CPU attention supports."""
    sizes = {
        "hidden_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 2,
        "intermediate_size": 96,
        "vocab_size": vocab_size,
        "pad_token_id": pad_token_id,
    }
    if kind == "bert":
        return BertConfig(max_position_embeddings=128, **sizes)
    if kind == "roberta":
        return RobertaConfig(max_position_embeddings=130, **sizes)
    if kind == "llama":
        return LlamaConfig(max_position_embeddings=128, num_key_value_heads=2, **sizes)
    raise ValueError(kind)


def save_checkpoint(
    folder: Path,
    tokenizer,
    pooling: str,
    backbone: str = "bert",
    model_class=PooledForSequenceClassification,
    **settings,
) -> Path:
    """A randomly initialised pooled model, saved with the tokenizer as train.py saves one."""
    config = PooledConfig(
        backbone_config=tiny_backbone(backbone, len(tokenizer), tokenizer.pad_token_id),
        pooling=pooling,
        **({"id2label": LABELS} if model_class is PooledForSequenceClassification else {}),
        **settings,
    )
    torch.manual_seed(0)
    model = model_class(config).eval()
    move_parameters(model)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def move_parameters(model) -> None:
    """Random, not initial, values for the parameters that start at a constant (layer weights at zero, GeM's p, the
    biases): a pooler that ignored them would then give other scores."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if not name.startswith("backbone."):
                parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))


def transformers_logits(folder: Path, texts=TEXTS) -> torch.Tensor:
    """The checkpoint's logits (or pooled vectors, for a PooledModel), from transformers on one padded batch."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = PooledConfig.from_pretrained(folder)
    model_class = PooledModel if config.architectures == ["PooledModel"] else PooledForSequenceClassification
    model = model_class.from_pretrained(folder).eval()
    with torch.no_grad():
        outputs = model(**tokenizer(list(texts), padding=True, return_tensors="pt"))
    return outputs.pooler_output if model_class is PooledModel else outputs.logits


@contextlib.contextmanager
def offline_engine(folder: Path, **engine):
    """vLLM's offline LLM on the checkpoint, torn down afterwards so that the next test can build another."""
    from vllm import LLM
    from vllm.distributed import cleanup_dist_env_and_memory

    llm = LLM(model=str(folder), **{**ENGINE, **engine})
    try:
        yield llm
    finally:
        del llm
        gc.collect()
        cleanup_dist_env_and_memory()


def classify(llm, texts=TEXTS, use_activation: bool | None = None) -> torch.Tensor:
    from vllm import PoolingParams

    params = PoolingParams(use_activation=use_activation) if use_activation is not None else None
    return torch.tensor(
        [output.outputs.probs for output in llm.classify(list(texts), pooling_params=params, use_tqdm=False)]
    )


def embed(llm, texts=TEXTS) -> torch.Tensor:
    return torch.tensor([output.outputs.embedding for output in llm.embed(list(texts), use_tqdm=False)])
