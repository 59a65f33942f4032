"""The transformers route: the plugin runs the checkpoint's own transformers backbone over each request's tokens.

For the backbones vLLM 0.32 does not implement (DistilBERT, DeBERTa-v2/v3, ELECTRA, MPNet, ALBERT...), and for what its
kernels do not reproduce exactly (``routes.py``). Why not vLLM's Transformers backend
(``vllm/model_executor/models/transformers/``): its registry takes a model only where
``is_backend_compatible()`` (transformers' ``_supports_attention_backend``) holds, which DeBERTa-v2, MPNet, XLNet, T5
and others do not declare (vllm/model_executor/models/registry.py: "The Transformers implementation of ... is not
compatible with vLLM"); where it holds (DistilBERT, ELECTRA, ALBERT), the backend swaps the model's attention, linear
and embedding layers for vLLM's own and builds a whole model around vLLM's poolers, not a backbone under the pooled
model's own pooler and head. One route for every type, the very module transformers runs, is what stays exact: the
backbone here is the checkpoint's own transformers backbone, loaded from its weights, so its states are transformers'.

What vLLM asks of a model without vLLM ``Attention`` layers: nothing more. Its KV-cache spec is empty, so the engine
allocates no cache (``vllm/v1/engine/core.py``: "Attention free models don't need memory for kv cache"), and the
forward reads no attention metadata. The pooled model still declares CLS as its default pooling
(``serving/model.py``), so vLLM's ``ModelConfig.attn_type`` is "encoder_only": no chunked prefill, no prefix caching
(``ModelConfig.is_prefix_caching_supported``), every prompt scheduled whole in one step. So each request's tokens are a run of positions 0, 1, ... n-1 in the flattened batch: the run starts where the
position is 0, which is how this module splits the batch back into requests (and checks that each run counts up).

Cost: the backbone runs padded (the longest request of the step sets the width), with transformers' attention rather
than vLLM's kernels; bench/serving_backbones.py measures it against pipeline(...).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace

import torch
from torch.nn.utils.rnn import pad_sequence

from ..modeling.backbone import input_embeddings_of, pools_the_sequence
from ..modeling.label_token_input import enable_label_token_input
from ..modeling.modeling_pooled import PooledModel
from .backbone_base import Backbone
from .routes import RUN_ALONE

__all__ = ["TransformersBackbone", "length_groups", "request_lengths"]


def request_lengths(positions: torch.Tensor) -> list[int]:
    """The token counts of the requests in a flattened batch of whole prompts (each counts 0, 1, ... from its start)."""
    starts = (positions == 0).nonzero().flatten().tolist()
    if not starts or starts[0] != 0:
        raise RuntimeError(
            "pooled_models' transformers route reads whole prompts; vLLM scheduled part of one"
        )
    lengths = [end - start for start, end in zip(starts, [*starts[1:], len(positions)], strict=True)]
    expected = torch.cat([torch.arange(length, device=positions.device) for length in lengths])
    if not torch.equal(positions, expected):
        raise RuntimeError(
            "pooled_models' transformers route reads whole prompts; vLLM scheduled part of one"
        )
    return lengths


# At most this many positions (rows x the longest row) in one padded batch of the transformers route.
POSITIONS_PER_BATCH = 4096


def length_groups(lengths: list[int], positions_per_batch: int = POSITIONS_PER_BATCH) -> list[list[int]]:
    """The request indices in batches of like lengths: sorted by length, a batch closed when one more request would
    make it hold more than ``positions_per_batch`` positions once padded (a longer request alone makes its own)."""
    groups: list[list[int]] = []
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        if groups and (len(groups[-1]) + 1) * lengths[index] <= positions_per_batch:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


class TransformersBackbone(Backbone):
    """The checkpoint's transformers backbone, run as the pooled model runs it (``PooledModel.run_backbone``: the
    inputs it takes, position ids from the mask, an encoder-decoder's encoder), on vLLM's requests padded into one
    batches of like lengths on the right."""

    def build(self, vllm_config, prefix):
        # A pooled model (pooler included, never run) lends its run_backbone; only its backbone is a submodule of the
        # served model, so vLLM loads and places exactly the backbone's parameters.
        self.pooled = PooledModel(self.pooled_config).eval()
        self.checkpoint, self.dtype = vllm_config.model_config.model, vllm_config.model_config.dtype
        module = self.pooled.backbone
        if pools_the_sequence(module):
            raise ValueError(
                f"pooled_models' vLLM plugin cannot serve a {self.model_type!r} backbone: {type(module).__name__} "
                "gives fewer states than input tokens, and vLLM's pooler receives one state per scheduled token."
            )
        self.run_alone = self.model_type in RUN_ALONE
        return module

    def connect_label_pooling(self, module, pooling):
        # As the transformers model checks it: a factorised embedding (ALBERT, ELECTRA) makes the label vectors as wide
        # as a token embedding, not as the hidden states.
        pooling.check_backbone(module, self.pooled.position_budget)
        # transformers' own LabelTokenInput reads the marker ids inside the backbone's token embedding table, exactly
        # as in the checkpoint's transformers model; its learned vectors are the served pooler's (loaded from the
        # checkpoint), not those of the unloaded pooler of self.pooled.
        enable_label_token_input(input_embeddings_of(module), SimpleNamespace(pooler=pooling))

    def transformers_state(self, module, weights):
        return (
            module.state_dict()
        )  # transformers' module itself, whichever layout the checkpoint was saved in

    def run_marked(self, module, input_ids, positions, markers):
        return self.run(
            module, input_ids, positions
        )  # the ids past the vocabulary go in: see connect_label_pooling

    def run(self, module, input_ids, positions, inputs_embeds=None):
        if inputs_embeds is not None:  # label markers come as ids (run_marked)
            raise ValueError("the plugin's transformers route takes token ids, not input embeddings")
        lengths = request_lengths(positions)
        requests = list(torch.split(input_ids, lengths))
        if (
            self.run_alone
        ):  # states that move with padding: each request unpadded, as pipeline(...) runs one text
            return torch.cat([self._states(request.unsqueeze(0), None) for request in requests])
        # Requests of like lengths padded together, so that a short text is not padded to the step's longest (the
        # states of each request are those it gets alone: the types whose states move with padding run alone above).
        states: list[torch.Tensor | None] = [None] * len(requests)
        for group in length_groups(lengths):
            batch = [requests[index] for index in group]
            flat = self._padded_states(batch, [lengths[index] for index in group])
            for index, request_states in zip(
                group, torch.split(flat, [lengths[i] for i in group]), strict=True
            ):
                states[index] = request_states
        return torch.cat(states)

    def _padded_states(self, requests: list[torch.Tensor], lengths: list[int]) -> torch.Tensor:
        padded = pad_sequence(requests, batch_first=True, padding_value=self.pooled.pad_token_id)
        columns = torch.arange(padded.shape[1], device=padded.device)
        mask = (columns.unsqueeze(0) < torch.tensor(lengths, device=padded.device).unsqueeze(1)).long()
        return self._states(padded, mask)

    def _states(self, input_ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The flattened states of the real tokens of a padded batch (``mask`` None: one unpadded request)."""
        if mask is None:
            mask = torch.ones_like(input_ids)
        outputs = self.pooled.run_backbone(
            input_ids=input_ids, attention_mask=mask, output_hidden_states=self.layers is not None
        )
        if self.layers is None:
            states = outputs.last_hidden_state
        else:
            states = torch.cat([outputs.hidden_states[index] for index in self.layers], dim=-1)
        if states.shape[:2] != input_ids.shape:
            raise RuntimeError(
                f"{type(self.pooled.backbone).__name__} gave states of shape {tuple(states.shape)}"
            )
        return states[mask.bool()]

    def load_weights(self, module, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        state = dict(weights)
        result = module.load_state_dict(state, strict=False)
        missing = set(result.missing_keys) - self._tied(module)
        if result.unexpected_keys or missing:
            # transformers saves some types in an older key layout that its loader converts (Gemma 3's composite
            # model, fused experts): load the backbone as transformers loads it, from the checkpoint itself.
            loaded = PooledModel.from_pretrained(self.checkpoint, config=self.pooled_config, dtype=self.dtype)
            module.load_state_dict(loaded.backbone.state_dict(), strict=True)
        return set(module.state_dict())

    @staticmethod
    def _tied(module) -> set[str]:
        """The names of parameters that share their tensor with another name (saved once, under that name)."""
        names = dict(module.named_parameters(remove_duplicate=False))
        first = {id(parameter): name for name, parameter in reversed(list(names.items()))}
        return {name for name, parameter in names.items() if first[id(parameter)] != name}
