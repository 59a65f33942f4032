"""Serving ``pooling="label_tokens"`` through ``classify``: the label tokens come with each prompt, from a tokenizer
made for serving.

A label-token classifier reads ``[CLS] <label 1> ... <label L> text [SEP]`` in one sequence (full insertion, two-way
attention, every label in one pass), the label slots holding ids past the vocabulary (``vocabulary + label``), and its
head scores each label from its token's final state. The label tokens go after ``label_token_position`` tokens
(by default the tokenizer's leading special tokens: 1 after BERT's ``[CLS]`` or Llama's ``<s>``, 0 for Qwen's
tokenizer, which puts none), or after the text (-1). vLLM runs each request's prompt as its tokenizer gives it, and a
model's forward cannot add tokens to a request (vLLM schedules each request for its prompt's length), so the label
tokens have to be in the prompt. ``write_serving_tokenizer`` saves the checkpoint's tokenizer with one added special
token per label (ids ``vocabulary ... vocabulary + L - 1``, the ids the model gives its label slots; a vocabulary
padded past the tokenizer gets placeholder tokens first) and a post-processor that puts them there; the server takes
it with ``--tokenizer``:

    python -m pooled_models.serving.label_tokens FOLDER SERVING_TOKENIZER
    python -m vllm.entrypoints.launchers.api_server.entry --model FOLDER --tokenizer SERVING_TOKENIZER --runner pooling

The checkpoint's folder is left as it is (``pipeline("text-classification", model=FOLDER)`` reads its own tokenizer).
The model refuses to load with any other tokenizer (``tokenizer_refusal``). In the forward, ids at or past the
vocabulary get the checkpoint's label vectors (``LabelEmbeddings``, as transformers' ``LabelTokenInput`` gives them),
and the pooler reads the label slots' states; a prompt sent as token ids without the label tokens in place gets NaN
scores, never another model's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from vllm.model_executor.layers.pooler.common import PoolingParamsUpdate
from vllm.v1.pool.metadata import PoolingMetadata

from ..modeling.label_token_layout import AFTER_THE_TEXT
from ..modeling.text_config import text_config_of
from .pooler import PooledModelPooler
from .support import ALTERNATIVES

__all__ = [
    "LabelTokenModelPooler",
    "write_serving_tokenizer",
    "tokenizer_refusal",
    "with_label_tokens",
    "LABEL_TOKEN",
]

LABEL_TOKEN = "[pooled_models_label_{}]"
UNUSED_TOKEN = "[pooled_models_unused_{}]"


def write_serving_tokenizer(folder: Path, out: Path, task: str | None = None) -> Path:
    """Save ``folder``'s tokenizer to ``out`` with the label tokens where the model reads them (``task``: the
    label-token task of a multi-task checkpoint, which may be left out when it has one task)."""
    from transformers import AutoConfig, AutoTokenizer

    checkpoint_config = AutoConfig.from_pretrained(folder)
    config = _label_token_config(checkpoint_config, task, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    vocabulary, num_labels = int(text_config_of(config).vocab_size), config.num_labels
    if len(tokenizer) > vocabulary:
        raise ValueError(
            f"the tokenizer holds {len(tokenizer)} ids and the backbone's vocabulary {vocabulary}: added label tokens "
            "would not get the ids the model reads (vocabulary + label)."
        )
    leading, trailing = _special_tokens_around_text(tokenizer)
    position = config.label_token_position
    if position != AFTER_THE_TEXT and position > len(leading):
        raise ValueError(
            f"label_token_position={position} puts the label tokens after {position} tokens, inside the text: the "
            f"tokenizer puts {len(leading)} special token(s) before a text, and a tokenizer's post-processor (the "
            "tokenizers library's TemplateProcessing) adds special tokens around a text, never inside it, while vLLM "
            "runs each prompt as its tokenizer gives it. Train with the default label_token_position (the tokenizer's "
            f"leading special tokens), or -1 (after the text); or, {ALTERNATIVES}."
        )
    # A vocabulary padded past the tokenizer (Qwen's, Gemma's): embedding rows no token has, given placeholder
    # tokens, so that the label tokens get the ids vocabulary + label.
    unused = [UNUSED_TOKEN.format(index) for index in range(len(tokenizer), vocabulary)]
    names = [LABEL_TOKEN.format(index) for index in range(num_labels)]
    tokenizer.add_special_tokens(
        {"additional_special_tokens": unused + names}, replace_extra_special_tokens=False
    )
    ids = tokenizer.convert_tokens_to_ids(names)
    if ids != list(range(vocabulary, vocabulary + num_labels)):
        raise ValueError(f"the label tokens got ids {ids}, not {vocabulary}...{vocabulary + num_labels - 1}.")
    tokenizer.save_pretrained(out)
    # vLLM reads a config from the tokenizer's folder too (vllm/tokenizers/registry.py: get_config(tokenizer_name)),
    # logging an error and retrying after a pause where there is none: the checkpoint's own config.
    checkpoint_config.save_pretrained(out)
    template = _label_template(leading, trailing, names, position, tokenizer.convert_tokens_to_ids)
    _keep_post_processor(Path(out), template)
    return Path(out)


def _label_token_config(config, task: str | None, folder: Path):
    """The config of the label-token classifier to serve: the checkpoint's, or its task's (a multi-task checkpoint)."""
    tasks = getattr(config, "tasks", None)
    if tasks is None:
        if task is not None:
            raise ValueError(f"--task {task!r}: {folder} is not a multi-task checkpoint (it has no tasks).")
        return config
    if task is None and len(tasks) != 1:
        raise ValueError(
            f"{folder} is a multi-task checkpoint: name the label-token task with --task ({', '.join(tasks)})."
        )
    config = config.task_config(task or next(iter(tasks)))
    if config.pooling != "label_tokens":
        raise ValueError(f"--task {task!r} pools with {config.pooling!r}, not with label tokens.")
    return config


def label_start(text_length: int, position: int) -> int:
    """Where the label tokens start in a prompt of a text of ``text_length`` tokens, as transformers' layout puts them
    (``label_token_layout._Layout``: after ``position`` tokens, or after the text for -1)."""
    return text_length if position == AFTER_THE_TEXT else min(position, text_length)


def with_label_tokens(text_ids: list[int], label_ids: list[int], position: int) -> list[int]:
    """A text's ids with the label tokens where transformers' layout puts them (``label_start``)."""
    at = label_start(len(text_ids), position)
    return [*text_ids[:at], *label_ids, *text_ids[at:]]


def _special_tokens_around_text(tokenizer) -> tuple[list[str], list[str]]:
    """The special tokens the tokenizer puts before and after a text (as label_token_settings_from_tokenizer probes
    it: "x")."""
    ids = tokenizer("x")["input_ids"]
    special = set(tokenizer.all_special_ids)
    text = [index for index, token_id in enumerate(ids) if token_id not in special]
    if not text:
        raise ValueError(f"the tokenizer gives only special tokens for the text 'x': {ids}")
    tokens = tokenizer.convert_ids_to_tokens(ids)
    return tokens[: text[0]], tokens[text[-1] + 1 :]


def _label_template(leading: list[str], trailing: list[str], names: list[str], position: int, ids_of) -> dict:
    """tokenizer.json's post-processor (the tokenizers library's TemplateProcessing, as that library saves it): the
    tokenizer's own special tokens around the text, the label tokens where ``position`` puts them."""

    def special(token: str, type_id: int = 0) -> dict:
        return {"SpecialToken": {"id": token, "type_id": type_id}}

    def sequence(name: str, type_id: int) -> dict:
        return {"Sequence": {"id": name, "type_id": type_id}}

    labels = list(map(special, names))
    before, closing = list(map(special, leading)), list(map(special, trailing))
    if position == AFTER_THE_TEXT:
        single = [*before, sequence("A", 0), *closing, *labels]
        pair = [
            *before,
            sequence("A", 0),
            *closing,
            sequence("B", 1),
            *(special(t, 1) for t in trailing),
            *labels,
        ]
    else:
        start = [*before[:position], *labels, *before[position:]]
        single = [*start, sequence("A", 0), *closing]
        pair = [*single, sequence("B", 1), *(special(t, 1) for t in trailing)]
    tokens = dict.fromkeys([*leading, *trailing, *names])
    return {
        "type": "TemplateProcessing",
        "single": single,
        "pair": pair,
        "special_tokens": {
            token: {"id": token, "ids": [ids_of(token)], "tokens": [token]} for token in tokens
        },
    }


def _keep_post_processor(out: Path, template: dict) -> None:
    """Write ``template`` into the saved tokenizer.json, and name the generic tokenizer class: loaded as its own class
    (BertTokenizer...), transformers would build the post-processor again from the special tokens. A byte-level
    post-processor (GPT-2's, Llama 3's, Qwen's: it only trims offsets) is kept before the template."""
    tokenizer_file = out / "tokenizer.json"
    saved = json.loads(tokenizer_file.read_text())
    before = saved.get("post_processor") or {}
    kept = before.get("processors", [before]) if before.get("type") == "Sequence" else [before]
    kept = [processor for processor in kept if processor.get("type") == "ByteLevel"]
    saved["post_processor"] = {"type": "Sequence", "processors": [*kept, template]} if kept else template
    tokenizer_file.write_text(json.dumps(saved, ensure_ascii=False))
    settings_file = out / "tokenizer_config.json"
    settings = json.loads(settings_file.read_text())
    settings["tokenizer_class"] = "PreTrainedTokenizerFast"
    settings_file.write_text(json.dumps(settings, indent=2) + "\n")


def tokenizer_refusal(config, tokenizer_path: str) -> str | None:
    """Why the tokenizer vLLM was given cannot serve this label-token checkpoint, or None when it puts every label
    token where the model reads it (checked on an empty text and on a word)."""
    from transformers import AutoTokenizer

    vocabulary = int(text_config_of(config).vocab_size)
    labels = list(range(vocabulary, vocabulary + config.num_labels))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    for text in ("", "x"):
        ids = tokenizer(text)["input_ids"]
        if ids != with_label_tokens([i for i in ids if i < vocabulary], labels, config.label_token_position):
            return (
                f"pooled_models' vLLM plugin cannot serve pooling='label_tokens' with the tokenizer {tokenizer_path}: "
                f"its prompts do not carry the {config.num_labels} label tokens where the model reads them "
                f"(label_token_position={config.label_token_position}), and vLLM cannot add tokens to a request. "
                "Write the serving tokenizer with `python -m pooled_models.serving.label_tokens FOLDER "
                "SERVING_TOKENIZER` (and --task TASK for a task of a multi-task checkpoint) and start vLLM with "
                "--tokenizer SERVING_TOKENIZER (LLM(..., tokenizer=...)); or, "
                f"{ALTERNATIVES}."
            )
    return None


class LabelTokenModelPooler(PooledModelPooler):
    """The head of a label-token classifier on the label slots' states (where each prompt carries the label ids)."""

    def __init__(self, config, pooling, head, tasks, layers, num_hidden_states):
        super().__init__(config, pooling, head, tasks, layers, num_hidden_states)
        self.vocabulary = int(text_config_of(config).vocab_size)
        self.num_labels = config.num_labels
        self.position = config.label_token_position
        self.label_ids = list(range(self.vocabulary, self.vocabulary + self.num_labels))

    def get_pooling_updates(self, task) -> PoolingParamsUpdate:
        return PoolingParamsUpdate(requires_token_ids=True)  # to find and check each prompt's label tokens

    def marked_embeddings(self, embed_input_ids, input_ids: torch.Tensor) -> torch.Tensor:
        """The backbone's input embeddings, each label's learned vector at its label token (transformers'
        ``LabelTokenInput``)."""
        is_label = input_ids >= self.vocabulary
        looked_up = embed_input_ids(input_ids.masked_fill(is_label, 0))
        label = (input_ids - self.vocabulary).clamp(min=0, max=self.num_labels - 1)
        return torch.where(
            is_label.unsqueeze(-1), self.pooling.label_embeddings(label).to(looked_up.dtype), looked_up
        )

    def forward(self, hidden_states: torch.Tensor, pooling_metadata: PoolingMetadata) -> list[torch.Tensor]:
        cursor = pooling_metadata.get_pooling_cursor()
        if cursor.is_partial_prefill():
            raise RuntimeError("pooled_models' pooler reads whole prompts; vLLM scheduled part of one")
        rows = torch.split(hidden_states, cursor.num_scheduled_tokens_cpu.tolist())
        slots = [self._label_slots(ids.tolist()) for ids in pooling_metadata.get_prompt_token_ids_cpu()]
        pooled = torch.stack(
            [
                row.new_zeros(self.num_labels, row.shape[1]) if at is None else row[at : at + self.num_labels]
                for row, at in zip(rows, slots, strict=True)
            ]
        )
        outputs = self.answer(pooled, pooling_metadata.pooling_params)
        # Not this model's prompt (label tokens missing or elsewhere): no score, never another model's.
        return [
            torch.full_like(output, float("nan")) if at is None else output
            for output, at in zip(outputs, slots, strict=True)
        ]

    def _label_slots(self, ids: list[int]) -> int | None:
        """Where the label tokens start in a prompt laid out as transformers lays it out, else None."""
        text = [token for token in ids if token < self.vocabulary]
        if ids != with_label_tokens(text, self.label_ids, self.position):
            return None
        return label_start(len(text), self.position)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=write_serving_tokenizer.__doc__)
    parser.add_argument("folder", type=Path, help="the label-token checkpoint's folder")
    parser.add_argument("out", type=Path, help="where to save the serving tokenizer")
    parser.add_argument(
        "--task", help="a multi-task checkpoint's label-token task (the one the engine serves)"
    )
    args = parser.parse_args(argv)
    print(write_serving_tokenizer(args.folder, args.out, args.task))
    return 0


if __name__ == "__main__":
    sys.exit(main())
