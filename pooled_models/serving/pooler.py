"""The vLLM ``Pooler`` that runs a pooled model's own pooler and head on vLLM's hidden states.

vLLM hands a pooler the hidden states of every scheduled token of the batch, flattened (``[tokens, width]``), and the
number of tokens of each request. This pooler splits them per request, pads them into the ``[batch, length, width]``
layout and the attention mask that pooled_models' poolers read (the same modules as in transformers, loaded from the
checkpoint), and answers each request for its task:

- ``classify``: the head's logits, through the activation the problem type decides (vLLM's rule, transformers' loss:
  softmax for single-label, sigmoid for multi-label, none for regression); ``use_activation=False`` gives the logits.
- ``embed``: the pooled vector, scaled to length 1 when the config's ``normalize_embeddings`` says so (as the model's
  ``encode`` does); ``use_activation=False`` never normalises.

vLLM's affine score calibration (``--pooler-config '{"logit_mean": m, "logit_sigma": s}'``, ``PoolerConfig``) applies
to ``classify`` (and ``token_classify``, ``token_pooler.py``) as vLLM's own classifier heads apply it
(``ClassifierPoolerHead`` in vllm/model_executor/layers/pooler/seqwise/heads.py, ``TokenClassifierPoolerHead`` in
tokwise/heads.py): ``(logits - m) / s`` before the activation, with ``use_activation=False`` too; never to ``embed``.
"""

from __future__ import annotations

from collections.abc import Set

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from vllm.model_executor.layers.pooler import Pooler
from vllm.model_executor.layers.pooler.activations import get_act_fn
from vllm.v1.pool.metadata import PoolingMetadata

from ..modeling.window_pooling import build_document_pooler, reads_documents

__all__ = ["PooledModelPooler", "padded_states", "LogitCalibration", "PLUGIN_TASK"]

# vLLM's task for requests that a route of the plugin makes and pools after (the zero-shot route's labels and texts, a
# document's windows): one vector per prompt, before any head.
PLUGIN_TASK = "plugin"


class LogitCalibration:
    """vLLM's ``PoolerConfig.logit_mean`` / ``logit_sigma`` (None: not set), read from the engine's config while vLLM
    builds the model, as vLLM's ``pooler_for_classify`` reads them (vllm/model_executor/layers/pooler/seqwise/
    poolers.py), and applied as its classifier heads apply them: the mean subtracted, then divided by sigma."""

    def __init__(self, pooler_config=None):
        if pooler_config is None:  # the engine's, while vLLM builds the model
            from vllm.config import get_current_vllm_config_or_none

            vllm_config = get_current_vllm_config_or_none()
            pooler_config = None if vllm_config is None else vllm_config.model_config.pooler_config
        self.mean = getattr(pooler_config, "logit_mean", None)
        self.sigma = getattr(pooler_config, "logit_sigma", None)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        if self.mean is not None:
            logits = logits - self.mean
        if self.sigma is not None:
            logits = logits / self.sigma
        return logits


class PooledModelPooler(Pooler):
    """``pooling`` (a pooled_models ``Pooler`` module) and ``head`` (its head, or None for an embedder) over the
    states a vLLM backbone gave; ``layers``: the hidden-state indices the backbone returned side by side (a layer
    pooling), or None for the last layer alone."""

    def __init__(
        self,
        config,
        pooling: nn.Module,
        head: nn.Module | None,
        tasks: tuple[str, ...],
        layers: list[int] | None,
        num_hidden_states: int,
    ):
        super().__init__()
        self.pooling = pooling
        self.head = head
        self.tasks = frozenset(tasks)
        self.layers = layers
        self.num_hidden_states = num_hidden_states
        self.normalize = bool(config.normalize_embeddings)
        self.activation = get_act_fn(config)
        self.calibrate = LogitCalibration()
        # Document mode (modeling/window_pooling.py): the cross-window pooler, under the name the checkpoint gives it;
        # None outside document mode (no module, so no name the checkpoint's weights must match). A document's windows are prompts of their own, pooled
        # across by the document route (serving/document_route.py); a prompt the engine answers alone is a one-window
        # document.
        self.document_pooler = None
        if reads_documents(config):
            self.document_pooler = build_document_pooler(config, pooling.output_dim)
            self.tasks |= {PLUGIN_TASK}

    def get_supported_tasks(self) -> Set[str]:
        return self.tasks

    def forward(self, hidden_states: torch.Tensor, pooling_metadata: PoolingMetadata) -> list[torch.Tensor]:
        cursor = pooling_metadata.get_pooling_cursor()
        if cursor.is_partial_prefill():
            # The model declares bidirectional (encoder-only) attention, for which vLLM never splits a prompt.
            raise RuntimeError("pooled_models' pooler reads whole prompts; vLLM scheduled part of one")
        return self.answer(
            self.pool(hidden_states, cursor.num_scheduled_tokens_cpu), pooling_metadata.pooling_params
        )

    def answer(
        self, pooled: torch.Tensor, params, document_windows: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """Each request's answer for its task from the pooled vectors ``[rows, ...]``: one row per request, or, with
        ``document_windows`` (``[documents, max_windows]`` rows, modeling/documents.py), one row per window of the
        documents that ``params`` answer. The ``plugin`` task gets its row as the pooler gave it."""
        if self.document_pooler is not None:
            documents = self.document_pooler(pooled, document_windows)
        else:
            documents = pooled
        logits = self.calibrate(self.head(documents)) if any(p.task == "classify" for p in params) else None
        outputs = []
        for index, param in enumerate(params):
            if param.task == "classify":
                row = logits[index]
                outputs.append(self.activation(row) if param.use_activation else row)
            elif param.task == PLUGIN_TASK:
                outputs.append(pooled[index])
            else:
                row = documents[index]
                outputs.append(
                    F.normalize(row, p=2, dim=-1) if param.use_activation and self.normalize else row
                )
        return outputs

    def pool(self, hidden_states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The pooled vectors ``[requests, D]`` of the flattened states of requests of ``lengths`` tokens."""
        padded, mask = padded_states(hidden_states, lengths)
        if self.layers is None:
            return self.pooling(padded, mask)
        every = [
            None
        ] * self.num_hidden_states  # indexed as transformers' hidden_states: 0 = embedding output
        for index, states in zip(self.layers, padded.chunk(len(self.layers), dim=-1), strict=True):
            every[index] = states
        return self.pooling(every[self.layers[-1]], mask, every)


def padded_states(hidden_states: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's flattened ``[tokens, width]`` states of requests of ``lengths`` tokens as the ``[requests, length,
    width]`` batch and attention mask that pooled_models' poolers read (padded on the right)."""
    padded = pad_sequence(list(torch.split(hidden_states, lengths.tolist())), batch_first=True)
    positions = torch.arange(padded.shape[1], device=padded.device)
    return padded, (positions.unsqueeze(0) < lengths.to(padded.device).unsqueeze(1)).long()
