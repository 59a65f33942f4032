"""The model vLLM builds for a ``PooledForTokenClassification`` checkpoint: vLLM's own backbone and the checkpoint's
token head, answering vLLM's ``token_classify`` task (``LLM.encode(texts, pooling_task="token_classify")``, or
``/pooling`` over HTTP) with one row of label scores per prompt token.

The backbone is built, run and loaded as for the other pooled architectures (``serving/model.py``); the head is the
model room's ``TokenClassifier``, built from the config as transformers builds it, and loaded strictly from the
checkpoint's ``classifier.*`` weights. The config's ``pooling`` is not read (it only gives ``AutoModel``'s sentence
embeddings of the checkpoint), so no pooling is refused for a token classifier.
"""

from __future__ import annotations

from torch import nn

from ..modeling.modeling_token import PooledForTokenClassification, TokenClassifier
from .model import _ServedPooled
from .token_pooler import TokenClassifierPooler

__all__ = ["ServedPooledTokenClassifier"]


class ServedPooledTokenClassifier(_ServedPooled):
    """A ``PooledForTokenClassification`` checkpoint: ``token_classify``, through its token head."""

    architecture = "PooledForTokenClassification"
    legacy_key_mapping = PooledForTokenClassification._legacy_key_mapping
    own_prefixes = {"classifier.": "head."}

    @staticmethod
    def pooled_parts(config):
        return None, TokenClassifier(config)  # no pooling: the head reads every token's last hidden state

    def make_pooler(self, config, pooling: nn.Module | None, head: nn.Module | None) -> nn.Module:
        return TokenClassifierPooler(head)
