"""``pipeline("zero-shot-classification", model=folder)`` for models that read their labels as text.

transformers' own zero-shot pipeline poses every (text, label) pair to an NLI model and reads its "entailment" logit:
one forward pass per label and text, with the label inside a hypothesis. A ``pooling="label_text"`` classifier reads
a text and a set of labels in one pass, so the NLI pipeline cannot use it. This module registers, for the task
``"zero-shot-classification"``, a subclass of transformers' pipeline that keeps transformers' behaviour for every other
model and, for a label-text classifier:

* takes transformers' arguments: ``candidate_labels`` (a list, or one comma-separated string), ``multi_label``
  (False: the scores are a softmax over the candidates; True: each label's own sigmoid, of the logit without the
  seen-label margin, ``label_text_margin.py``), ``hypothesis_template``
  (default ``"{}"``: the label text as the model was trained on it; transformers' NLI default would add words the
  model never read);
* tokenises the candidate labels once per call, whatever the number of texts and ``batch_size``;
* scores any labels with ``label_text_scorer="shared"``, and a model's own labels (a subset of ``id2label``) with
  ``"per_label"``; other labels are refused by name;
* returns what transformers' returns: ``{"sequence", "labels", "scores"}``, labels sorted by score.
* reads a document model's text whole (``document_window`` set): its windows' vectors pooled across the document
  are scored against the candidates' text (``documents.py``).

``import pooled_models`` registers it (``register_zero_shot_pipeline``), where the package registers its Auto classes.
A label-text checkpoint loaded with ``trust_remote_code=True`` where the package is absent finds it through its
config.json's ``custom_pipelines`` and this file, saved next to the checkpoint (``pipeline_reference.py``).

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from string import Formatter
from typing import Any

import torch
from transformers.pipelines.zero_shot_classification import ZeroShotClassificationPipeline

from .documents import WindowedText
from .label_text import label_text_token_ids, pad_label_ids, seen_margins_asked
from .label_text_margin import without_margin
from .pipeline_reference import ZERO_SHOT as TASK
from .pipeline_registration import replace_task_class
from .window_pooling import reads_documents

__all__ = [
    "LabelTextZeroShotPipeline",
    "ranked_labels",
    "register_zero_shot_pipeline",
    "reads_label_texts",
    "template_refusal",
]

# The label texts as the model read them in training; transformers' NLI default is "This example is {}."
DEFAULT_TEMPLATE = "{}"


def reads_label_texts(model) -> bool:
    """Whether ``model`` is a sequence classifier that reads its labels as text (``pooling="label_text"``)."""
    config = getattr(model, "config", None)
    return getattr(config, "pooling", None) == "label_text" and hasattr(model, "classifier")


class LabelTextZeroShotPipeline(ZeroShotClassificationPipeline):  # named by pipeline_reference.PIPELINE_CLASS
    """transformers' zero-shot pipeline, and the label-text route described in this module's docstring."""

    @property
    def entailment_id(self):
        if reads_label_texts(self.model):
            return 0  # not read: the model scores the labels themselves (set so that no warning is logged)
        return super().entailment_id

    def _sanitize_parameters(self, **kwargs):
        if not reads_label_texts(self.model):
            return super()._sanitize_parameters(**kwargs)
        labels = self._args_parser._parse_labels(kwargs.get("candidate_labels", []))
        forward = {}
        if "candidate_labels" in kwargs:
            if not labels:
                raise ValueError("You must include at least one label and at least one sequence.")
            forward = self._label_inputs(labels, kwargs.get("hypothesis_template", DEFAULT_TEMPLATE))
        preprocess = {"candidate_labels": labels} if "candidate_labels" in kwargs else {}
        postprocess = {"multi_label": kwargs["multi_label"]} if "multi_label" in kwargs else {}
        return preprocess, forward, postprocess

    def _label_inputs(self, labels: list[str], template: str) -> dict[str, Any]:
        """The candidate labels as the model reads them, tokenised once for the whole call."""
        reason = template_refusal(template)
        if reason is not None:
            raise ValueError(reason)
        texts = [template.format(label) for label in labels]
        config = self.model.config
        own = {str(name): int(index) for index, name in config.id2label.items()}
        if config.label_text_scorer != "shared":
            unknown = [label for label in texts if label not in own]
            if unknown:
                raise ValueError(
                    f"This model scores its own labels only (label_text_scorer={config.label_text_scorer!r}): "
                    f"{', '.join(map(repr, unknown))} is not one of them ({', '.join(own)}). A model trained with "
                    "label_text_scorer='shared' scores any labels."
                )
            return {"columns": [own[label] for label in texts]}
        ids, mask = pad_label_ids(label_text_token_ids(texts, self.tokenizer), device=self.device)
        return {"label_input_ids": ids, "label_attention_mask": mask}

    def preprocess(self, inputs, candidate_labels=None, hypothesis_template=DEFAULT_TEMPLATE):
        if not reads_label_texts(self.model):
            yield from super().preprocess(inputs, candidate_labels, hypothesis_template)
            return
        if not candidate_labels:
            raise ValueError("You must include at least one label and at least one sequence.")
        text = inputs[0] if isinstance(inputs, list) and len(inputs) == 1 else inputs
        if reads_documents(self.model.config):  # document mode: every window read
            encoded = {"document": WindowedText.of(text, self.tokenizer, self.model.config)}
        else:  # cut at the model's length, as every other path (text_length.py)
            length = self.model.max_text_length(self.tokenizer)
            encoded = self.tokenizer(
                text, return_tensors="pt", truncation=length is not None, max_length=length
            )
        yield {"candidate_labels": list(candidate_labels), "sequence": text, "is_last": True, **encoded}

    def _forward(self, inputs, label_input_ids=None, label_attention_mask=None, columns=None):
        if not reads_label_texts(self.model):
            return super()._forward(inputs)
        if "document" in inputs:
            model_inputs = WindowedText.batch(inputs["document"], self.tokenizer.pad_token_id, self.device)
        else:
            model_inputs = {name: inputs[name] for name in self.tokenizer.model_input_names if name in inputs}
        if columns is None:
            model_inputs.update(label_input_ids=label_input_ids, label_attention_mask=label_attention_mask)
        logits = self.model(**model_inputs).logits
        # What the seen-label margin took off each label, one row per text (the pipeline unbatches along the first
        # dimension), for a sigmoid's scores (ranked_labels).
        margins = seen_margins_asked(self.model.config, model_inputs, logits.shape[-1], logits.device)
        margins = torch.zeros_like(logits) if margins is None else margins.to(logits.dtype).expand_as(logits)
        if columns is not None:
            index = torch.tensor(columns, device=logits.device)
            logits, margins = logits[:, index], margins[:, index]
        # The other entries as they came (lists when the pipeline batched several texts), so that it can unbatch them.
        kept = {key: inputs[key] for key in ("candidate_labels", "sequence", "is_last")}
        return {**kept, "logits": logits, "margins": margins}

    def postprocess(self, model_outputs, multi_label=False):
        if not reads_label_texts(self.model):
            return super().postprocess(model_outputs, multi_label)
        (output,) = model_outputs
        return {
            "sequence": output["sequence"],
            **ranked_labels(output["candidate_labels"], output["logits"], multi_label, output["margins"]),
        }


def template_refusal(template: object) -> str | None:
    """Why ``template`` cannot place a label, or None: a template is a string with exactly one bare ``{}`` where the
    label goes (other braces doubled, ``{{`` and ``}}``). Positional or named fields (``{0}``, ``{name}``), format
    specs and conversions (``{:>10}``, ``{!r}``), a second field and unbalanced braces are refused: they would fail,
    or place something else than the label as the model reads it."""
    if not isinstance(template, str):
        return f"hypothesis_template must be a string with {{}} where the label goes, got {type(template).__name__}."
    try:
        fields = [field for _, *field in Formatter().parse(template) if field[0] is not None]
    except ValueError as error:  # "Single '{' encountered in format string"
        return f"hypothesis_template {template!r} is not a format string ({error}); write a literal brace as {{{{ or }}}}."
    if fields != [["", "", None]]:
        return (
            f"hypothesis_template {template!r} must hold exactly one {{}} (no name, index, format spec or conversion) "
            f"where the label goes, and double any other brace ({{{{ and }}}}); it holds "
            f"{len(fields)} replacement field{'s' * (len(fields) != 1)}"
            + (f": {', '.join(_field_text(field) for field in fields)}." if fields else ".")
        )
    return None


def _field_text(field: list) -> str:
    name, spec, conversion = field
    return "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"


def ranked_labels(
    labels: list[str], logits: torch.Tensor, multi_label: bool, margins: torch.Tensor | None = None
) -> dict[str, list]:
    """One text's candidate ``labels`` sorted by score, and the scores: each label's sigmoid with ``multi_label`` (or a
    single label), else the softmax over the candidates. ``logits`` are the model's, the seen-label margin taken off
    (``margins``: how much from each label, or None). The margin makes a new label compete with trained ones in a
    softmax; a sigmoid scores each label on its own, so it reads the logit without the margin: a trained label keeps
    the probability it was trained to give, whatever else is asked."""
    logits = logits.float().reshape(-1)
    if multi_label or len(labels) == 1:
        margins = None if margins is None else margins.float().reshape(-1)
        scores = without_margin(logits, margins).sigmoid()
    else:
        scores = logits.softmax(dim=-1)
    order = scores.argsort(descending=True).tolist()
    return {"labels": [labels[i] for i in order], "scores": scores[order].tolist()}


def register_zero_shot_pipeline() -> None:
    """Make :class:`LabelTextZeroShotPipeline` the class of ``pipeline("zero-shot-classification")`` (transformers'
    behaviour for every model but a label-text classifier)."""
    replace_task_class(TASK, LabelTextZeroShotPipeline)
