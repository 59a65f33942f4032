"""Serving ``pooling="label_tokens"`` through ``classify``: the label tokens come with each prompt, from a tokenizer
made for serving.

A label-token classifier reads ``[CLS] <label 1> ... <label L> text [SEP]`` in one sequence (full insertion, two-way
attention, every label in one pass), the label slots holding ids past the vocabulary (``vocabulary + label``), and its
head scores each label from its token's final state. vLLM runs each request's prompt as its tokenizer gives it, and a
model's forward cannot add tokens to a request (vLLM schedules each request for its prompt's length), so the label
tokens have to be in the prompt. ``write_serving_tokenizer`` saves the checkpoint's tokenizer with one added special
token per label (ids ``vocabulary ... vocabulary + L - 1``, the ids the model gives its label slots) and a
post-processor that puts them after the first special token; the server takes it with ``--tokenizer``:

    python -m pooled_models.serving.label_tokens FOLDER SERVING_TOKENIZER
    python -m vllm.entrypoints.openai.api_server --model FOLDER --tokenizer SERVING_TOKENIZER --runner pooling

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

from ..modeling.text_config import text_config_of
from .pooler import PooledModelPooler
from .support import ALTERNATIVES

__all__ = ["LabelTokenModelPooler", "write_serving_tokenizer", "tokenizer_refusal", "LABEL_TOKEN"]

LABEL_TOKEN = "[pooled_models_label_{}]"


def write_serving_tokenizer(folder: Path, out: Path) -> Path:
    """Save ``folder``'s tokenizer to ``out`` with the label tokens the model reads after the first special token."""
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    vocabulary, num_labels = int(text_config_of(config).vocab_size), config.num_labels
    if len(tokenizer) != vocabulary:
        raise ValueError(
            f"the tokenizer holds {len(tokenizer)} ids and the backbone's vocabulary {vocabulary}: added label tokens "
            "would not get the ids the model reads (vocabulary + label)."
        )
    names = [LABEL_TOKEN.format(index) for index in range(num_labels)]
    tokenizer.add_special_tokens({"additional_special_tokens": names}, replace_extra_special_tokens=False)
    ids = tokenizer.convert_tokens_to_ids(names)
    if ids != list(range(vocabulary, vocabulary + num_labels)):
        raise ValueError(f"the label tokens got ids {ids}, not {vocabulary}...{vocabulary + num_labels - 1}.")
    first, *rest = tokenizer("")["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens([first, *rest])
    tokenizer.save_pretrained(out)
    _keep_post_processor(Path(out), _label_template(tokens, [first, *rest], names, ids))
    return Path(out)


def _label_template(tokens: list[str], token_ids: list[int], names: list[str], label_ids: list[int]) -> dict:
    """tokenizer.json's post-processor (the tokenizers library's TemplateProcessing, as that library saves it): the
    first special token, the label tokens, the text, the closing special tokens."""

    def special(token: str, type_id: int = 0) -> dict:
        return {"SpecialToken": {"id": token, "type_id": type_id}}

    single = [special(tokens[0]), *map(special, names), {"Sequence": {"id": "A", "type_id": 0}}]
    single += [special(token) for token in tokens[1:]]
    pair = single + [{"Sequence": {"id": "B", "type_id": 1}}, *(special(token, 1) for token in tokens[1:])]
    ids_of = dict(zip([*tokens, *names], [*token_ids, *label_ids], strict=True))
    return {
        "type": "TemplateProcessing",
        "single": single,
        "pair": pair,
        "special_tokens": {
            token: {"id": token, "ids": [i], "tokens": [token]} for token, i in ids_of.items()
        },
    }


def _keep_post_processor(out: Path, template: dict) -> None:
    """Write ``template`` into the saved tokenizer.json, and name the generic tokenizer class: loaded as its own class
    (BertTokenizer...), transformers would build the post-processor again from the special tokens."""
    tokenizer_file = out / "tokenizer.json"
    saved = json.loads(tokenizer_file.read_text())
    saved["post_processor"] = template
    tokenizer_file.write_text(json.dumps(saved, ensure_ascii=False))
    settings_file = out / "tokenizer_config.json"
    settings = json.loads(settings_file.read_text())
    settings["tokenizer_class"] = "PreTrainedTokenizerFast"
    settings_file.write_text(json.dumps(settings, indent=2) + "\n")


def tokenizer_refusal(config, tokenizer_path: str) -> str | None:
    """Why the tokenizer vLLM was given cannot serve this label-token checkpoint, or None when it puts every label
    token in place."""
    from transformers import AutoTokenizer

    vocabulary = int(text_config_of(config).vocab_size)
    expected = list(range(vocabulary, vocabulary + config.num_labels))
    ids = AutoTokenizer.from_pretrained(tokenizer_path)("")["input_ids"]
    if ids[1 : 1 + config.num_labels] == expected:
        return None
    return (
        f"pooled_models' vLLM plugin cannot serve pooling='label_tokens' with the tokenizer {tokenizer_path}: its "
        f"prompts do not carry the {config.num_labels} label tokens after the first token, and vLLM cannot add tokens "
        "to a request. Write the serving tokenizer with `python -m pooled_models.serving.label_tokens FOLDER "
        "SERVING_TOKENIZER` and start vLLM with --tokenizer SERVING_TOKENIZER (LLM(..., tokenizer=...)); or, "
        f"{ALTERNATIVES}."
    )


class LabelTokenModelPooler(PooledModelPooler):
    """The head of a label-token classifier on the label slots' states (positions 1 ... L of each prompt)."""

    def __init__(self, config, pooling, head, tasks, layers, num_hidden_states):
        super().__init__(config, pooling, head, tasks, layers, num_hidden_states)
        self.vocabulary = int(text_config_of(config).vocab_size)
        self.num_labels = config.num_labels

    def get_pooling_updates(self, task) -> PoolingParamsUpdate:
        return PoolingParamsUpdate(requires_token_ids=True)  # to check each prompt's label tokens

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
        outputs = super().forward(hidden_states, pooling_metadata)
        expected = torch.arange(self.vocabulary, self.vocabulary + self.num_labels)
        for index, ids in enumerate(pooling_metadata.get_prompt_token_ids_cpu()):
            if not torch.equal(
                ids[1 : 1 + self.num_labels].cpu(), expected
            ):  # not this model's prompt: no score
                outputs[index] = torch.full_like(outputs[index], float("nan"))
        return outputs

    def pool(self, hidden_states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``[requests, L, H]``: the label slots' states (what the head reads)."""
        rows = torch.split(hidden_states, lengths.tolist())
        width = self.num_labels
        return torch.stack(
            [
                row[1 : 1 + width] if row.shape[0] >= 1 + width else row.new_zeros(width, row.shape[1])
                for row in rows
            ]
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=write_serving_tokenizer.__doc__)
    parser.add_argument("folder", type=Path, help="the label-token checkpoint's folder")
    parser.add_argument("out", type=Path, help="where to save the serving tokenizer")
    args = parser.parse_args(argv)
    print(write_serving_tokenizer(args.folder, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
