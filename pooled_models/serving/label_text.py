"""Serving ``pooling="label_text"`` with ``label_text_layers=0``: the labels' vectors, worked out once per loaded model.

With ``label_text_layers=0`` a label's vector does not depend on the text (text and label are two embeddings compared by
the head), so the plugin works the model's own labels out once, when vLLM has loaded the weights, and every request runs
its text alone through vLLM's backbone: the text's vector is the mean of its final states (as ``LabelTextPooler`` takes
it), and the checkpoint's own head (``heads.LabelTextHead``) scores it against the stored label vectors.

Where the label vectors come from: the labels' prompts (each label's text with the marker in its first slot, as the
open label set sends them) run through the served model's own forward in ``process_weights_after_loading``, once
vLLM has put every layer in its runtime form. vLLM's attention layers read their metadata from the forward context,
which exists only around a scheduled batch; there, ``plain_attention.py`` has each attention layer compute its prompts'
attention with PyTorch's ``scaled_dot_product_attention``: vLLM's weights, device and dtype, and no second copy of the
model. Where a model's attention is not plain (``plain_attention_refusal``: ALiBi, soft-capping, a sliding window
shorter than twice the longest label...), the vectors come from the checkpoint's own transformers model instead
(``PooledForSequenceClassification``, built on the CPU in float32 from the weights vLLM hands ``load_weights``, then
dropped), as before.

Labels given per request (the open label set, ``serving/zero_shot.py``) run through vLLM's backbone as prompts of
their own: the first slot of a label's prompt holds the marker id (one past the vocabulary, ``vocabulary.py`` makes
vLLM accept it), which ``marked_embeddings`` maps to the checkpoint's learned marker vector, as transformers'
``LabelTokenInput`` does. Those prompts use the ``plugin`` task, for which this pooler returns one vector per prompt:
a label's (``label_text_pooling``) or a text's (the mean of its states).
"""

from __future__ import annotations

import torch
from torch import nn
from vllm.logger import init_logger
from vllm.model_executor.layers.pooler.common import PoolingParamsUpdate
from vllm.v1.pool.metadata import PoolingMetadata

from ..modeling.checkpoint_loading import read_tokenizer_settings
from ..modeling.label_text_layout import masked_mean, segment_vectors
from ..modeling.label_text_margin import seen_label_texts, seen_margin, seen_mask_of_rows
from ..modeling.text_config import text_config_of
from .plain_attention import plain_attention, plain_attention_refusal
from .pooler import PLUGIN_TASK, PooledModelPooler, padded_states

__all__ = ["LabelTextModelPooler", "PLUGIN_TASK", "own_label_prompts", "seen_margins"]

logger = init_logger(__name__)


def own_label_prompts(config) -> list[list[int]]:
    """The model's own labels' prompts: each label's text (description included, ``label_text_ids``) with the marker
    (one past the vocabulary) in its first slot. As transformers builds the model: a config without the label texts'
    ids gets them from the tokenizer saved with the checkpoint (``read_tokenizer_settings``, which sets them on
    ``config``), else each label is its marker alone (``LabelTextPooler``)."""
    if config.label_text_ids is None:
        read_tokenizer_settings(config)
    marker = int(text_config_of(config).vocab_size)
    return [[marker, *ids[1:]] for ids in config.label_text_ids or [[0]] * config.num_labels]


def seen_margins(config, rows) -> torch.Tensor | None:
    """What ``label_text_seen_margin`` takes off each label's logit (labels as token id lists, marker slot first), or
    None where the model takes none (0, or a multi-label model), as the transformers model's forward applies it
    (``LabelTextPooler.calibrate``)."""
    margin = seen_margin(config)
    if margin == 0.0:
        return None
    rows = rows or [[0]] * config.num_labels
    return margin * torch.tensor(seen_mask_of_rows(rows, seen_label_texts(config)), dtype=torch.float32)


class SeenMarginThenCalibration:
    """The seen-label margins (``[L]``, or None) taken off the logits, then vLLM's own logit calibration."""

    def __init__(self, margins: torch.Tensor | None, calibration):
        self.margins = margins
        self.calibration = calibration

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        if self.margins is not None:
            logits = logits - self.margins.to(logits.device, logits.dtype)
        return self.calibration(logits)


class LabelTextModelPooler(PooledModelPooler):
    """The pooler and head of a label-text classifier over vLLM's states: ``classify`` scores each text against the
    model's own label vectors (worked out at load); ``plugin`` gives each prompt's vector (zero-shot route)."""

    def __init__(self, config, pooling, head, tasks, layers, num_hidden_states):
        super().__init__(config, pooling, head, (*tasks, PLUGIN_TASK), layers, num_hidden_states)
        self.label_pooling = config.label_text_pooling
        self.vocabulary = int(text_config_of(config).vocab_size)
        self.label_prompts = own_label_prompts(config)
        self.register_buffer(
            "label_vectors", torch.zeros(config.num_labels, pooling.output_dim), persistent=False
        )
        self.label_vectors_ready = False
        # The seen-label margin (label_text_margin.py), taken off the own labels' logits before vLLM's calibration.
        self.calibrate = SeenMarginThenCalibration(
            seen_margins(config, config.label_text_ids), self.calibrate
        )

    def get_pooling_updates(self, task) -> PoolingParamsUpdate:
        # The plugin task tells a label's prompt from a text's by its first id (the marker, past the vocabulary).
        return PoolingParamsUpdate(requires_token_ids=task == PLUGIN_TASK)

    # -- load time: the model's own labels' vectors ----------------------------------------------------------------

    def weights_loaded(self, model: nn.Module, config, backbone_weights: dict[str, torch.Tensor]) -> None:
        """Called by ``load_weights``: the vectors wait for ``after_loading`` where the served model can run the
        labels' prompts itself; otherwise they are worked out here with the checkpoint's transformers model."""
        reason = plain_attention_refusal(model, max(map(len, self.label_prompts)))
        if reason is not None:
            logger.warning(
                "pooling='label_text': the labels' vectors come from the checkpoint's transformers model (a float32 "
                "copy on the CPU while loading): %s.",
                reason,
            )
            self._vectors_from_transformers(config, backbone_weights)

    def after_loading(self, model: nn.Module) -> None:
        """Called by the model's ``process_weights_after_loading``: the labels' prompts through ``model``'s forward."""
        if self.label_vectors_ready:
            return
        device = self.label_vectors.device
        lengths = [len(prompt) for prompt in self.label_prompts]
        input_ids = torch.tensor([i for prompt in self.label_prompts for i in prompt], device=device)
        positions = torch.cat([torch.arange(length, device=device) for length in lengths])
        with torch.no_grad(), plain_attention(model, lengths):
            states = model(input_ids, positions)
        vectors = torch.stack([self._label_vector(part) for part in torch.split(states, lengths)])
        self._keep(vectors)

    def _vectors_from_transformers(self, config, backbone_weights: dict[str, torch.Tensor]) -> None:
        """The label vectors from the checkpoint's own transformers model, built on the CPU in float32, then dropped."""
        from ..modeling.modeling_pooled import PooledForSequenceClassification

        with torch.device("cpu"):
            model = PooledForSequenceClassification(config).float().eval()
        state = {f"backbone.{name}": tensor for name, tensor in backbone_weights.items()}
        state.update({f"classifier.pooler.{name}": t for name, t in self.pooling.state_dict().items()})
        state.update({f"classifier.head.{name}": t for name, t in self.head.state_dict().items()})
        missing, unexpected = model.load_state_dict(
            {name: tensor.detach().to("cpu", torch.float32) for name, tensor in state.items()}, strict=False
        )
        if unexpected or [name for name in missing if not name.endswith("position_ids")]:
            raise ValueError(
                f"pooling='label_text': the checkpoint's transformers model did not take its weights (missing "
                f"{sorted(missing)}, unexpected {sorted(unexpected)})"
            )
        # Any one-token text: with label_text_layers=0 the labels' vectors do not read it.
        text = torch.zeros(1, 1, dtype=torch.long)
        with torch.no_grad():
            vectors = model.classifier.pooler.encode(
                model._backbone_call(), {"input_ids": text, "attention_mask": torch.ones_like(text)}, False
            )[1][0, 1:]
        del model
        self._keep(vectors)

    def _keep(self, vectors: torch.Tensor) -> None:
        self.label_vectors.copy_(vectors.to(self.label_vectors.device, self.label_vectors.dtype))
        self.label_vectors_ready = True

    def _label_vector(self, states: torch.Tensor) -> torch.Tensor:
        """One label's vector from its prompt's final states ``[tokens, H]`` (``label_text_pooling``)."""
        mask = torch.ones(1, states.shape[0], dtype=torch.long, device=states.device)
        return segment_vectors(states.unsqueeze(0), mask, self.label_pooling)[0]

    # -- forward -------------------------------------------------------------------------------------------------

    def marked_embeddings(self, embed_input_ids, input_ids: torch.Tensor) -> torch.Tensor:
        """The backbone's input embeddings of ``input_ids``, the marker's learned vector where an id is the marker
        (at or past the vocabulary), as transformers' ``LabelTokenInput`` gives them."""
        is_marker = input_ids >= self.vocabulary
        looked_up = embed_input_ids(input_ids.masked_fill(is_marker, 0))
        marker = self.pooling.label_embeddings.weight[0].to(looked_up.dtype)
        return torch.where(is_marker.unsqueeze(-1), marker, looked_up)

    def pool(self, hidden_states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``[requests, 1 + L, H]``: each text's vector, then the model's own labels' (what the head reads)."""
        if not self.label_vectors_ready:
            raise RuntimeError(
                "pooling='label_text': the labels' vectors were never worked out (vLLM did not call the model's "
                "process_weights_after_loading)"
            )
        padded, mask = padded_states(hidden_states, lengths)
        text = masked_mean(padded, mask, dim=1)
        labels = self.label_vectors.to(text.dtype).unsqueeze(0).expand(text.shape[0], -1, -1)
        return torch.cat([text.unsqueeze(1), labels], dim=1)

    def forward(self, hidden_states: torch.Tensor, pooling_metadata: PoolingMetadata) -> list[torch.Tensor]:
        params = pooling_metadata.pooling_params
        if all(param.task != PLUGIN_TASK for param in params):
            return super().forward(hidden_states, pooling_metadata)
        cursor = pooling_metadata.get_pooling_cursor()
        if cursor.is_partial_prefill():
            raise RuntimeError("pooled_models' pooler reads whole prompts; vLLM scheduled part of one")
        lengths = cursor.num_scheduled_tokens_cpu
        token_ids = pooling_metadata.get_prompt_token_ids_cpu()
        outputs = []
        for index, states in enumerate(torch.split(hidden_states, lengths.tolist())):
            if params[index].task != PLUGIN_TASK:
                # A classify request batched with plugin ones: the same answer as in a batch of its own.
                outputs.extend(super().forward(states, pooling_metadata[index : index + 1]))
                continue
            if int(token_ids[index][0]) >= self.vocabulary:  # a label's prompt: its marker comes first
                outputs.append(self._label_vector(states))
            else:
                mask = torch.ones(1, states.shape[0], dtype=torch.long, device=states.device)
                outputs.append(masked_mean(states.unsqueeze(0), mask, dim=1)[0])
        return outputs
