"""The vLLM ``Pooler`` that answers ``token_classify``: a token classifier's head over every token of each prompt.

vLLM hands a pooler the hidden states of every scheduled token of the batch, flattened (``[tokens, width]``). A token
head (``linear``, ``dense``: the heads a token classifier takes) works on the last dimension alone, so it runs once
over the flattened states, as transformers runs it over ``[batch, length, width]``; the logits are then split into
one ``[prompt tokens, num_labels]`` tensor per request. Every prompt token is answered, the tokenizer's special tokens
included (as ``model(**tokenizer(text)).logits`` gives them); ``pipeline('token-classification')`` drops those itself.

The activation is the pipeline's: softmax over each token's labels (a token classifier is single-label per token);
``use_activation=False`` gives the logits. vLLM's ``logit_mean`` / ``logit_sigma`` calibrate the logits first, as its
own ``TokenClassifierPoolerHead`` does (``pooler.LogitCalibration``).
"""

from __future__ import annotations

from collections.abc import Set

import torch
from torch import nn
from vllm.model_executor.layers.pooler import Pooler
from vllm.v1.pool.metadata import PoolingMetadata

from .pooler import LogitCalibration

__all__ = ["TokenClassifierPooler", "TOKEN_CLASSIFY"]

TOKEN_CLASSIFY = "token_classify"  # vLLM's task name (vllm/tasks.py), answered at /pooling and by LLM.encode


class TokenClassifierPooler(Pooler):
    """``head``: the checkpoint's ``TokenClassifier`` (its ``token_head``), run on every token's state."""

    def __init__(self, head: nn.Module):
        super().__init__()
        self.head = head
        self.calibrate = LogitCalibration()

    def get_supported_tasks(self) -> Set[str]:
        return {TOKEN_CLASSIFY}

    def forward(self, hidden_states: torch.Tensor, pooling_metadata: PoolingMetadata) -> list[torch.Tensor]:
        cursor = pooling_metadata.get_pooling_cursor()
        if cursor.is_partial_prefill():
            # The model declares bidirectional (encoder-only) attention, for which vLLM never splits a prompt.
            raise RuntimeError("pooled_models' token pooler reads whole prompts; vLLM scheduled part of one")
        logits = self.calibrate(self.head(hidden_states))
        rows = torch.split(logits, cursor.num_scheduled_tokens_cpu.tolist())
        return [
            row.softmax(dim=-1) if param.use_activation else row
            for row, param in zip(rows, pooling_metadata.pooling_params, strict=True)
        ]
