"""The models vLLM builds for pooled checkpoints: vLLM's own backbone, the checkpoint's pooler and head on top.

``PooledForSequenceClassification`` checkpoints serve ``classify``, ``PooledModel``
checkpoints serve ``embed``. What cannot be served exactly is refused when vLLM builds the model, with the reason and
what to do instead (``support.refusal``). Weights load strictly: every checkpoint key goes to one parameter (through the
package's own renaming of earlier layouts), and every parameter comes from the checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.models.interfaces_base import default_pooling_type
from vllm.model_executor.models.utils import maybe_prefix

from ..modeling.layer_pooling import _num_hidden_states
from ..modeling.modeling_pooled import PooledClassifier, PooledForSequenceClassification, PooledModel
from ..modeling.pooling import build_pooler
from .backbones import backbone_for
from .checkpoint_keys import renamed_key
from .document_support import document_refusal
from .label_text import LabelTextModelPooler
from .label_tokens import LabelTokenModelPooler, tokenizer_refusal
from .pooler import PooledModelPooler
from .support import refusal, served_tasks

__all__ = ["ServedPooledClassifier", "ServedPooledModel"]

BACKBONE = "backbone."
# The poolers of the label poolings: their prompts carry ids past the vocabulary (label markers, label tokens).
LABEL_POOLERS = {"label_text": LabelTextModelPooler, "label_tokens": LabelTokenModelPooler}


# CLS as the default pooling type is what makes vLLM treat the model as bidirectional ("encoder_only",
# ModelConfig.attn_type): it then never splits a prompt over several steps (chunked prefill) nor serves part of it from
# the prefix cache, so the pooler always sees every token of every prompt. The pooling itself is the checkpoint's; vLLM's
# CLS pooler is never built.
@default_pooling_type(seq_pooling_type="CLS")
class _ServedPooled(nn.Module):
    is_pooling_model = True
    architecture: ClassVar[str] = ""
    # The package's renaming of checkpoint keys of earlier layouts (regex -> replacement, in order).
    legacy_key_mapping: ClassVar[dict[str, str]] = {}
    # Checkpoint prefix -> the attribute of PooledModelPooler that holds those weights.
    own_prefixes: ClassVar[dict[str, str]] = {}
    # Checkpoint prefixes of weights the model does not use (a tuple for str.startswith; never a real prefix).
    ignored_prefixes: ClassVar[tuple[str, ...]] = ("\0",)

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = self.served_config(vllm_config.model_config.hf_config)
        reason = refusal(config, self.architecture) or document_refusal(
            config, self.architecture, vllm_config.model_config
        )
        if reason is not None:
            raise ValueError(reason)
        self.config = config
        pooling, head = self.pooled_parts(config)
        self.layers = None if pooling is None else pooling.hidden_states_read
        # vLLM's own implementation of the backbone where it is exact, else the transformers module (routes.py).
        self.family = backbone_for(config, self.layers)
        self.backbone = self.family.build(vllm_config, maybe_prefix(prefix, "backbone"))
        if config.pooling == "label_tokens" and pooling is not None:
            reason = tokenizer_refusal(config, vllm_config.model_config.tokenizer)
            if reason is not None:
                raise ValueError(reason)
        self.pooler = self.make_pooler(config, pooling, head)
        # A label pooling's prompts carry ids past the vocabulary (label markers, label tokens): decided once here.
        self.marks_inputs = isinstance(self.pooler, tuple(LABEL_POOLERS.values()))
        if self.marks_inputs:
            self.family.connect_label_pooling(self.backbone, self.pooler.pooling)

    def make_pooler(self, config, pooling: nn.Module | None, head: nn.Module | None) -> nn.Module:
        """The vLLM pooler that answers the architecture's tasks (a token classifier's answers per token; a label
        pooling's, whose prompts carry ids past the vocabulary)."""
        pooler_class = LABEL_POOLERS.get(config.pooling, PooledModelPooler)
        return pooler_class(
            config,
            pooling,
            head,
            served_tasks(self.architecture),
            self.layers,
            _num_hidden_states(config) if self.layers is not None else 0,
        )

    def served_config(self, config):
        """The PooledConfig this model serves (a multi-task checkpoint's: that of the task it serves)."""
        return config

    @staticmethod
    def pooled_parts(config) -> tuple[nn.Module | None, nn.Module | None]:
        raise NotImplementedError

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        if hasattr(self.backbone, "embed_input_ids"):
            return self.backbone.embed_input_ids(input_ids)
        return self.backbone.get_input_embeddings()(input_ids)  # a transformers backbone (transformers route)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        intermediate_tensors=None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if inputs_embeds is not None:
            raise ValueError("pooled_models' vLLM models take token ids, not prompt embeddings")
        if self.marks_inputs:  # ids past the vocabulary: the label vectors
            return self.family.run_marked(self.backbone, input_ids, positions, self.pooler)
        return self.family.run(self.backbone, input_ids, positions)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        backbone, own, unexpected = [], {}, []
        for name, tensor in weights:
            name = self._renamed(name)
            own_name = self._own_name(name)
            if name.startswith(BACKBONE):
                backbone.append((name[len(BACKBONE) :], tensor))
            elif own_name is not None:
                own[own_name] = tensor
            elif not name.startswith(self.ignored_prefixes):
                unexpected.append(name)
        if unexpected:
            raise ValueError(
                f"the checkpoint holds weights {self.architecture} has no place for: {sorted(unexpected)}"
            )
        loaded = {BACKBONE + name for name in self.family.load_weights(self.backbone, backbone)}
        missing = {BACKBONE + name for name, _ in self.backbone.named_parameters()} - loaded
        if missing:
            raise ValueError(f"the checkpoint has no weights for the backbone's {sorted(missing)}")
        self.pooler.load_state_dict(own, strict=True)  # raises naming missing and unexpected keys
        if isinstance(self.pooler, LabelTextModelPooler):
            self.pooler.weights_loaded(
                self, self.config, self.family.transformers_state(self.backbone, dict(backbone))
            )
        return loaded | {f"pooler.{name}" for name in own}

    def process_weights_after_loading(self) -> None:
        """vLLM's model-level hook, once every layer is in its runtime form: a label-text model's own labels' vectors
        (``label_text.py``)."""
        if isinstance(self.pooler, LabelTextModelPooler):
            self.pooler.after_loading(self)

    def _own_name(self, name: str) -> str | None:
        """The name in PooledModelPooler of a checkpoint weight of the pooler, the cross-window pooler or the head,
        or None. Read from the instance: a multi-task task's model sets its own prefixes (multitask_model.py)."""
        return _name_under(self.own_prefixes, name)

    def _renamed(self, name: str) -> str:
        return renamed_key(name, self.legacy_key_mapping)

    @classmethod
    def pooler_name(cls, checkpoint_name: str) -> str | None:
        """The name in PooledModelPooler of a checkpoint key (earlier layouts renamed), or None for the backbone's
        and ignored weights: how the document route (document_route.py) loads the pooler outside the engine."""
        return _name_under(cls.own_prefixes, renamed_key(checkpoint_name, cls.legacy_key_mapping))


class ServedPooledClassifier(_ServedPooled):
    """A ``PooledForSequenceClassification`` checkpoint: ``classify``, through its pooler and head."""

    architecture = "PooledForSequenceClassification"
    legacy_key_mapping = PooledForSequenceClassification._legacy_key_mapping
    own_prefixes = {
        "classifier.pooler.": "pooling.",
        "classifier.document_pooler.": "document_pooler.",
        "classifier.head.": "head.",
    }

    @staticmethod
    def pooled_parts(config):
        classifier = PooledClassifier(config)  # the pooler and the head, built as transformers builds them
        return classifier.pooler, classifier.head


class ServedPooledModel(_ServedPooled):
    """A ``PooledModel`` checkpoint: ``embed``, normalised as its config's ``normalize_embeddings`` says."""

    architecture = "PooledModel"
    legacy_key_mapping = PooledModel._legacy_key_mapping
    own_prefixes = {"pooler.": "pooling.", "document_pooler.": "document_pooler."}
    ignored_prefixes = ("classifier.",)  # as PooledModel.from_pretrained ignores a classifier's head

    @staticmethod
    def pooled_parts(config):
        return build_pooler(config), None


def _name_under(prefixes: dict[str, str], name: str) -> str | None:
    """``name`` with the first of ``prefixes`` it starts with replaced by its target, or None."""
    for prefix, target in prefixes.items():
        if name.startswith(prefix):
            return target + name[len(prefix) :]
    return None
