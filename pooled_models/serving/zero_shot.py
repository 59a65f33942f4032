"""The open label set over vLLM: an IO-processor plugin on ``/pooling`` (and ``LLM.encode``) that answers what
``pipeline("zero-shot-classification", model=folder)`` answers for a label-text classifier (``zero_shot_pipeline.py``).

A request's ``data``: ``texts`` (a string or a list), ``candidate_labels`` (a list, or one comma-separated string, as
the pipeline takes them), ``multi_label`` (default False) and ``hypothesis_template`` (default ``"{}"``). Its answer:
one ``{"sequence", "labels", "scores"}`` per text, labels sorted by score.

How a request runs (vLLM 0.32's ``PluginWithIOProcessorPlugins``): ``parse_data`` checks it (a bad request is a
``ValueError`` naming the field, which the server answers with HTTP 400 and goes on serving); ``pre_process`` turns it
into prompts for the engine, each label's text once per request (not once per text) with the label marker in its first
slot, then each text as the pipeline tokenises it; the engine gives one vector per prompt (the ``plugin`` task of
``label_text.LabelTextModelPooler``); ``post_process`` scores every text against every label with the checkpoint's own
head (``heads.LabelTextHead``, its few weights read from the checkpoint here) and ranks them as the pipeline does
(``zero_shot_pipeline.ranked_labels``).

A model with ``label_text_scorer="per_label"`` scores its own labels only (a subset of ``id2label``, as the pipeline);
its prompts are then its own label texts, as it was built with them (descriptions included).

Registered under the ``vllm.io_processor_plugins`` entry point ``pooled_models_zero_shot``; the server takes it with
``--io-processor-plugin pooled_models_zero_shot``, ``LLM`` with ``io_processor_plugin="pooled_models_zero_shot"``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from vllm.config import VllmConfig
from vllm.inputs import TokensPrompt
from vllm.outputs import PoolingRequestOutput
from vllm.plugins.io_processors.interface import IOProcessor
from vllm.pooling_params import PoolingParams

from ..modeling.heads import LabelTextHead
from ..modeling.label_text import label_text_token_ids
from ..modeling.text_length import text_length
from ..modeling.zero_shot_pipeline import DEFAULT_TEMPLATE, ranked_labels
from .checkpoint_keys import renamed_key
from .multitask_support import head_location, served_config
from .vocabulary import marker_id

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
# The most candidate labels and texts one request may carry (every label's prompt and every text's run in the request).
MAX_CANDIDATE_LABELS = 256
MAX_TEXTS = 256
# Requests between pre_process and post_process kept at most (the oldest dropped first).
MAX_PENDING = 4096


def plugin() -> str:
    """The ``vllm.io_processor_plugins`` entry point: the class vLLM builds."""
    return f"{__name__}.ZeroShotIOProcessor"


@dataclass
class ZeroShotRequest:
    texts: list[str]
    labels: list[str]  # as the caller gave them (the answer's names)
    label_texts: list[str]  # as the model reads them (the template filled in)
    multi_label: bool


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
        self.text_length = served_text_length(config, self.tokenizer, vllm_config.model_config.max_model_len)
        self.marker = marker_id(config)
        self.own_labels = {str(name): int(index) for index, name in config.id2label.items()}
        self.head = _load_head(
            config, vllm_config.model_config, *head_location(vllm_config.model_config.hf_config)
        )
        # The request a pre_process call made, by request id, until its post_process (offline: None).
        self._pending: dict[str | None, tuple[ZeroShotRequest, list[int] | None]] = {}
        self._lock = threading.Lock()

    # -- the request -------------------------------------------------------------------------------------------

    def parse_data(self, data: object) -> ZeroShotRequest:
        if not isinstance(data, dict):
            raise ValueError(
                "data must be an object with texts, candidate_labels and optionally multi_label and "
                f"hypothesis_template; got {type(data).__name__}."
            )
        unknown = sorted(set(data) - {"texts", "candidate_labels", "multi_label", "hypothesis_template"})
        if unknown:
            raise ValueError(
                f"data has unknown fields {unknown}; valid: texts, candidate_labels, multi_label, hypothesis_template."
            )
        texts = data.get("texts")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(text, str) for text in texts):
            raise ValueError("texts must be a string or a non-empty list of strings.")
        if len(texts) > MAX_TEXTS:
            raise ValueError(f"texts holds {len(texts)} texts; one request takes at most {MAX_TEXTS}.")
        labels = _candidate_labels(data.get("candidate_labels"))
        multi_label = data.get("multi_label", False)
        if not isinstance(multi_label, bool):
            raise ValueError(f"multi_label must be true or false, got {multi_label!r}.")
        template = data.get("hypothesis_template", DEFAULT_TEMPLATE)
        if not isinstance(template, str) or template.format(labels[0]) == template:
            raise ValueError(
                f"hypothesis_template must be a string with {{}} where the label goes, got {template!r}."
            )
        label_texts = [template.format(label) for label in labels]
        if self.config.label_text_scorer != "shared":
            unknown_labels = [text for text in label_texts if text not in self.own_labels]
            if unknown_labels:
                raise ValueError(
                    f"candidate_labels: this model scores its own labels only (label_text_scorer="
                    f"{self.config.label_text_scorer!r}): {', '.join(map(repr, unknown_labels))} is not one of them "
                    f"({', '.join(self.own_labels)}). A model trained with label_text_scorer='shared' scores any labels."
                )
        return ZeroShotRequest(texts, labels, label_texts, multi_label)

    def merge_pooling_params(self, params: PoolingParams | None = None) -> PoolingParams:
        params = params or PoolingParams()
        params.task = "plugin"
        return params

    def pre_process(
        self, prompt: ZeroShotRequest, request_id: str | None = None, **kwargs
    ) -> list[TokensPrompt]:
        if self.config.label_text_scorer == "shared":
            label_ids, columns = label_text_token_ids(prompt.label_texts, self.tokenizer), None
        else:  # the model's own labels, as it was built with them; the asked ones are picked after scoring
            label_ids = [list(ids) for ids in self.config.label_text_ids]
            columns = [self.own_labels[text] for text in prompt.label_texts]
        with self._lock:
            self._pending[request_id] = (prompt, columns)
            while (
                len(self._pending) > MAX_PENDING
            ):  # requests the engine refused after pre_process never come back
                self._pending.pop(next(iter(self._pending)))
        labels = [TokensPrompt(prompt_token_ids=[self.marker, *ids[1:]]) for ids in label_ids]
        # As the pipeline tokenises a text: the tokenizer's special tokens, cut at the model's length.
        encoded = self.tokenizer(prompt.texts, truncation=True, max_length=self.text_length)["input_ids"]
        return labels + [TokensPrompt(prompt_token_ids=list(ids)) for ids in encoded]

    def post_process(
        self, model_output: Sequence[PoolingRequestOutput], request_id: str | None = None, **kwargs
    ) -> list[dict]:
        with self._lock:
            prompt, columns = self._pending.pop(request_id)
        vectors = torch.stack([output.outputs.data for output in model_output]).float()
        num_labels = len(vectors) - len(prompt.texts)
        texts, labels = vectors[num_labels:], vectors[:num_labels]
        pooled = torch.cat([texts.unsqueeze(1), labels.unsqueeze(0).expand(len(texts), -1, -1)], dim=1)
        with torch.no_grad():
            logits = self.head(pooled)
        if columns is not None:
            logits = logits[:, columns]
        return [
            {"sequence": text, **ranked_labels(prompt.labels, row, prompt.multi_label)}
            for text, row in zip(prompt.texts, logits, strict=True)
        ]


def served_text_length(config, tokenizer, max_model_len: int) -> int:
    """The one place the plugin's text length is decided: the most tokens of a text it sends to the engine.

    The model's length, as the zero-shot pipeline cuts a text (``PooledPreTrainedModel.max_text_length``: the config's
    ``max_seq_length``, else the tokenizer's ``model_max_length``), never more than the engine takes (its
    ``max_model_len``, which vLLM reads from the ``sentence_bert_config.json`` that ``save_pretrained`` writes with
    that same length, else from the backbone's positions and the tokenizer). A longer text is cut there and answered,
    never refused by the engine."""
    return text_length(config.max_seq_length, getattr(tokenizer, "model_max_length", None), max_model_len)


def _candidate_labels(value) -> list[str]:
    """The candidate labels as the pipeline reads them (a list, or one comma-separated string), checked."""
    if isinstance(value, str):
        value = [label.strip() for label in value.split(",") if label.strip()]
    if not isinstance(value, list) or not value:
        raise ValueError(
            "candidate_labels must be a non-empty list of label names (or one comma-separated string)."
        )
    if not all(isinstance(label, str) and label.strip() for label in value):
        raise ValueError("candidate_labels must hold non-empty strings.")
    if len(value) > MAX_CANDIDATE_LABELS:
        raise ValueError(
            f"candidate_labels holds {len(value)} labels; one request takes at most {MAX_CANDIDATE_LABELS}."
        )
    repeated = sorted({label for label in value if value.count(label) > 1})
    if repeated:
        raise ValueError(f"candidate_labels names {', '.join(map(repr, repeated))} more than once.")
    return list(value)


def _load_head(config, model_config, prefix: str, legacy_key_mapping: dict[str, str]) -> LabelTextHead:
    """The checkpoint's head (a few weights, under ``prefix``), read from its safetensors files under the names
    transformers loads."""
    from safetensors import safe_open

    head = LabelTextHead(config, 1)
    folder = Path(model_config.model)
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        folder = Path(
            snapshot_download(
                model_config.model, revision=model_config.revision, allow_patterns="*.safetensors"
            )
        )
    state = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as weights:
            for key in weights.keys():  # noqa: SIM118 (safe_open is not a mapping)
                name = renamed_key(key, legacy_key_mapping)
                if name.startswith(prefix):
                    state[name[len(prefix) :]] = weights.get_tensor(key)
    if "weight" in state:  # per_label: one weight vector per label, as wide as the pooled vectors
        head = LabelTextHead(config, state["weight"].shape[1])
    head.load_state_dict(state, strict=True)
    return head.float().eval()
