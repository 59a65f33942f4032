"""The open label set over vLLM: an IO-processor plugin on ``/pooling`` (and ``LLM.encode``) that answers what
``pipeline("zero-shot-classification", model=folder)`` answers for a label-text classifier (``zero_shot_pipeline.py``).

A request's ``data``: ``texts`` (a string or a list), ``candidate_labels`` (a list, or one comma-separated string, as
the pipeline takes them), ``multi_label`` (default False) and ``hypothesis_template`` (default ``"{}"``). Its answer:
one ``{"sequence", "labels", "scores"}`` per text, labels sorted by score.

How a request runs (vLLM 0.32's ``PluginWithIOProcessorPlugins``): ``parse_data`` checks it
(``zero_shot_request.py``: a bad request is a ``ValueError`` naming the field, which the server answers with HTTP 400
and goes on serving); ``pre_process`` turns it into prompts for the engine: each label whose vector is not cached
(``label_vector_cache.py``: across requests, per served model, keyed by the label's text) once per request (not once
per text), its text with the label marker in its first slot, then each text as the pipeline tokenises it; the engine
gives one vector per prompt (the ``plugin`` task of ``label_text.LabelTextModelPooler``); ``post_process`` finds the
request again by its id and its prompts (``in_flight.py``: an id alone is the client's to choose), caches the new
label vectors, scores every text against every label with the checkpoint's own head (``heads.LabelTextHead``, its few
weights read from the checkpoint here) and ranks them as the pipeline does (``zero_shot_pipeline.ranked_labels``). A
request whose labels are all cached runs one prompt per text.

A model with ``label_text_scorer="per_label"`` scores its own labels only (a subset of ``id2label``, as the pipeline);
its prompts are then its own label texts, as it was built with them (descriptions included).

Registered under the ``vllm.io_processor_plugins`` entry point ``pooled_models_zero_shot``; the server takes it with
``--io-processor-plugin pooled_models_zero_shot``, ``LLM`` with ``io_processor_plugin="pooled_models_zero_shot"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from vllm.config import VllmConfig
from vllm.inputs import TokensPrompt
from vllm.outputs import PoolingRequestOutput
from vllm.plugins.io_processors.interface import IOProcessor
from vllm.pooling_params import PoolingParams

from ..modeling.heads import LabelTextHead
from ..modeling.label_text import label_text_token_ids
from ..modeling.text_length import text_length
from ..modeling.zero_shot_pipeline import ranked_labels
from .checkpoint_keys import checkpoint_weights, renamed_key
from .in_flight import InFlightRequests, Prompts
from .label_text import PLUGIN_TASK, own_label_prompts, seen_margins
from .label_vector_cache import LabelVectorCache
from .multitask_support import head_location, served_config
from .vocabulary import marker_id
from .zero_shot_request import MAX_CANDIDATE_LABELS, MAX_TEXTS, ZeroShotRequest, parse_request

__all__ = [
    "ZeroShotIOProcessor",
    "ZeroShotRequest",
    "PLUGIN_NAME",
    "MAX_CANDIDATE_LABELS",
    "MAX_TEXTS",
    "plugin",
    "served_text_length",
]

PLUGIN_NAME = "pooled_models_zero_shot"


def plugin() -> str:
    """The ``vllm.io_processor_plugins`` entry point: the class vLLM builds."""
    return f"{__name__}.ZeroShotIOProcessor"


def served_text_length(config, tokenizer, max_model_len: int) -> int:
    """The one place the plugin's text length is decided: the most tokens of a text it sends to the engine.

    The model's length, as the zero-shot pipeline cuts a text (``PooledPreTrainedModel.max_text_length``: the config's
    ``max_seq_length``, else the tokenizer's ``model_max_length``), never more than the engine takes (its
    ``max_model_len``, which vLLM reads from the ``sentence_bert_config.json`` that ``save_pretrained`` writes with
    that same length, else from the backbone's positions and the tokenizer). A longer text is cut there and answered,
    never refused by the engine."""
    return text_length(config.max_seq_length, getattr(tokenizer, "model_max_length", None), max_model_len)


@dataclass
class _Pending:
    """What ``post_process`` needs of a request beyond the engine's outputs."""

    request: ZeroShotRequest
    label_keys: list[str]  # every label the head scores, in order (the cache's keys)
    sent_labels: list[
        str
    ]  # those whose prompts were sent (uncached at pre_process), in order: the first prompts
    cached: dict[str, torch.Tensor]  # the others' vectors, taken at pre_process
    columns: list[int] | None  # per_label: the asked labels among the model's own, in the caller's order


class ZeroShotIOProcessor(IOProcessor[ZeroShotRequest, list[dict]]):
    """Candidate labels and texts in, the zero-shot pipeline's answer out (see the module's doc)."""

    def __init__(self, vllm_config: VllmConfig, renderer):
        super().__init__(vllm_config, renderer)
        config = served_config(
            vllm_config.model_config.hf_config
        )  # a multi-task checkpoint's: its served task's
        if getattr(config, "pooling", None) != "label_text":
            raise ValueError(
                f"the {PLUGIN_NAME} IO processor serves models with pooling='label_text' (they read labels as text); "
                f"this model has pooling={getattr(config, 'pooling', None)!r}."
            )
        self.config = config
        self.tokenizer = renderer.get_tokenizer()
        self.marker = marker_id(config)
        self.max_model_len = vllm_config.model_config.max_model_len
        self.text_length = served_text_length(config, self.tokenizer, self.max_model_len)
        # per_label: the model's own labels, in index order, and the prompts it was built with (descriptions included).
        own = sorted((int(index), str(name)) for index, name in config.id2label.items())
        self.own_labels = {name: index for index, name in own}
        self.own_prompts = (
            None
            if config.label_text_scorer == "shared"
            else {name: tuple(ids) for (_, name), ids in zip(own, own_label_prompts(config), strict=True)}
        )
        self.head = _load_head(
            config, vllm_config.model_config, *head_location(vllm_config.model_config.hf_config)
        )
        self.label_vectors = LabelVectorCache()
        self.in_flight = InFlightRequests()

    # -- the request -------------------------------------------------------------------------------------------

    def parse_data(self, data: object) -> ZeroShotRequest:
        return parse_request(data, None if self.own_prompts is None else self.own_labels)

    def merge_pooling_params(self, params: PoolingParams | None = None) -> PoolingParams:
        params = params or PoolingParams()
        params.task = PLUGIN_TASK
        return params

    def pre_process(
        self, prompt: ZeroShotRequest, request_id: str | None = None, **kwargs
    ) -> list[TokensPrompt]:
        if self.own_prompts is None:
            label_keys, columns = list(prompt.label_texts), None
        else:  # the model's own labels, as it was built with them; the asked ones are picked after scoring
            label_keys, columns = list(self.own_prompts), [self.own_labels[t] for t in prompt.label_texts]
        cached = self.label_vectors.lookup(label_keys)
        sent_labels = [key for key in label_keys if key not in cached]
        if self.own_prompts is not None:
            label_prompts = [self.own_prompts[key] for key in sent_labels]
        elif sent_labels:  # (a tokenizer fails on an empty list)
            label_prompts = [self._label_prompt(ids) for ids in _label_ids(sent_labels, self.tokenizer)]
        else:
            label_prompts = []
        # As the pipeline tokenises a text: the tokenizer's special tokens, truncated.
        encoded = self.tokenizer(list(prompt.texts), truncation=True, max_length=self.text_length)[
            "input_ids"
        ]
        text_prompts = [tuple(ids) for ids in encoded]
        self._check_lengths(sent_labels, label_prompts)
        pending = _Pending(prompt, label_keys, sent_labels, cached, columns)
        prompts = self.in_flight.add(request_id, (*label_prompts, *text_prompts), pending, self._tag)
        return [TokensPrompt(prompt_token_ids=list(ids)) for ids in prompts]

    def post_process(
        self, model_output: Sequence[PoolingRequestOutput], request_id: str | None = None, **kwargs
    ) -> list[dict]:
        prompts: Prompts = tuple(tuple(output.prompt_token_ids) for output in model_output)
        pending: _Pending = self.in_flight.take(request_id, prompts)
        vectors = [output.outputs.data for output in model_output]
        sent = len(pending.sent_labels)
        new = {
            key: vector.detach().clone() for key, vector in zip(pending.sent_labels, vectors, strict=False)
        }
        self.label_vectors.store(new)
        found = {**pending.cached, **new}
        labels = torch.stack([found[key] for key in pending.label_keys]).float()
        texts = torch.stack(vectors[sent : sent + len(pending.request.texts)]).float()
        pooled = torch.cat([texts.unsqueeze(1), labels.unsqueeze(0).expand(len(texts), -1, -1)], dim=1)
        with torch.no_grad():
            logits = self.head(pooled)
        margins = self._seen_margins(pending.label_keys)
        if margins is not None:  # the seen-label margin, as the transformers model's forward takes it off
            margins = margins.to(logits.device, logits.dtype)
            logits = logits - margins
        if pending.columns is not None:
            logits = logits[:, pending.columns]
            margins = None if margins is None else margins[pending.columns]
        request = pending.request
        # A sigmoid's scores read the logits without the margin, as the pipeline's (ranked_labels).
        return [
            {"sequence": text, **ranked_labels(list(request.labels), row, request.multi_label, margins)}
            for text, row in zip(request.texts, logits, strict=True)
        ]

    def _seen_margins(self, label_keys: list) -> torch.Tensor | None:
        """The seen-label margin of each label asked (``label_text_margin.py``), matched by the label's token ids."""
        if not getattr(self.config, "label_text_seen_margin", None):
            return None
        if self.own_prompts is not None:
            rows = [self.own_prompts[key] for key in label_keys]
        else:
            rows = _label_ids(list(label_keys), self.tokenizer)
        return seen_margins(self.config, rows)

    # -- prompts -------------------------------------------------------------------------------------------------

    def _label_prompt(self, ids) -> tuple[int, ...]:
        """A label's prompt: its text's ids with the label marker in the first slot (where the tokenizer put its first
        special token), as transformers' ``LabelTokenInput`` reads it."""
        return (self.marker, *ids[1:])

    def _tag(self, nonce: int) -> tuple[int, ...]:
        """A prompt that tells two requests with the same id and the same prompts apart (``in_flight.py``): the marker,
        then ``nonce`` in base vocabulary size. Its vector is not read."""
        digits = []
        while nonce:
            nonce, digit = divmod(nonce, self.marker)
            digits.append(digit)
        return (self.marker, *digits)

    def _check_lengths(self, sent_labels, label_prompts) -> None:
        """Refuse, naming the field, a label's prompt longer than the engine takes (vLLM would refuse it after
        pre_process). Texts need no check: they are cut at ``served_text_length``, never above ``max_model_len``."""
        for key, ids in zip(sent_labels, label_prompts, strict=True):
            if len(ids) > self.max_model_len:
                raise ValueError(
                    f"candidate_labels: {key!r} (after the hypothesis_template) is {len(ids)} tokens long with the "
                    f"label marker; this engine takes at most {self.max_model_len} tokens (max_model_len)."
                )


def _label_ids(label_texts: list[str], tokenizer) -> list[list[int]]:
    try:
        return label_text_token_ids(label_texts, tokenizer)
    except ValueError as error:  # a label of special tokens only
        raise ValueError(f"candidate_labels: {error}") from None


def _load_head(config, model_config, prefix: str, legacy_key_mapping: dict[str, str]) -> LabelTextHead:
    """The checkpoint's head (a few weights, under ``prefix``), read from its safetensors files under the names
    transformers loads."""

    def name_for(key: str) -> str | None:
        name = renamed_key(key, legacy_key_mapping)
        return name[len(prefix) :] if name.startswith(prefix) else None

    state = checkpoint_weights(model_config, name_for)
    head = LabelTextHead(config, 1)
    if "weight" in state:  # per_label: one weight vector per label, as wide as the pooled vectors
        head = LabelTextHead(config, state["weight"].shape[1])
    head.load_state_dict(state, strict=True)
    return head.float().eval()
