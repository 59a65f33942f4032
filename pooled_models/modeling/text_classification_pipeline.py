"""``pipeline("text-classification", model=folder)`` for pooled classifiers: texts cut at the model's length.

transformers' text-classification pipeline tokenises a text with the keywords the caller gives it and none of its own
(``TextClassificationPipeline.preprocess`` passes ``**tokenizer_kwargs`` through), so a text longer than the backbone's
positions reaches the model whole and fails inside it (``IndexError: index out of range in self`` in BERT's position
embeddings), unless the caller knows to pass ``truncation=True``; and with it, the text is cut at the tokenizer's
``model_max_length``, not necessarily the length the model was trained with. A fast tokenizer's own truncation setting
cannot change that: transformers turns it off for every call that does not ask for truncation
(``TokenizersBackend.set_truncation_and_padding``).

This module registers, for the task ``"text-classification"`` (and its alias ``"sentiment-analysis"``), a subclass of
transformers' pipeline that keeps transformers' behaviour for every other model and, for a pooled model, tokenises with
``truncation=True, max_length=model.max_text_length(tokenizer)`` unless the caller gives ``truncation`` or
``max_length`` (at ``pipeline(...)`` or at the call): the length every other path cuts at (``text_length.py``).

A model in document mode (``document_window`` set, ``documents.py``) reads the whole text instead: the text is cut
into the model's windows, and the pipeline's batches (``batch_size``) hold whole documents, their windows in one flat
batch with the layout the model pools them by.

``import pooled_models`` registers it (``register_text_classification_pipeline``), where the package registers its
Auto classes; a checkpoint loaded with ``trust_remote_code=True`` where the package is absent names it in config.json's
``custom_pipelines`` and saves this file next to it (``pipeline_reference.py``).

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only transformers and
its sibling model files.
"""

from __future__ import annotations

from transformers.pipelines.text_classification import TextClassificationPipeline

from .documents import WindowedText
from .pipeline_reference import TEXT_CLASSIFICATION as TASK
from .pipeline_registration import replace_task_class
from .window_pooling import reads_documents

__all__ = ["PooledTextClassificationPipeline", "register_text_classification_pipeline"]


class PooledTextClassificationPipeline(TextClassificationPipeline):
    """transformers' text-classification pipeline; for a pooled model, texts cut at the model's length by default."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        length_of = getattr(self.model, "max_text_length", None)  # a pooled model's (modeling_pooled.py)
        length = length_of(self.tokenizer) if callable(length_of) else None
        self.reads_documents = reads_documents(self.model.config)  # any model's config
        if length is not None and not self.reads_documents:
            # Defaults under the caller's keywords (given here or at a call, which the pipeline merges over these).
            self._preprocess_params = {"truncation": True, "max_length": length, **self._preprocess_params}

    def preprocess(self, inputs, **tokenizer_kwargs):
        if not self.reads_documents:
            return super().preprocess(inputs, **tokenizer_kwargs)
        cutting = sorted(set(tokenizer_kwargs) & {"truncation", "max_length", "stride", "padding"})
        if cutting:
            raise ValueError(
                f"{', '.join(cutting)}: a model in document mode (document_window={self.model.config.document_window}"
                ") reads the whole text in its windows, so the text is not cut; leave them out, or load the model with "
                "document_window=None to cut texts at its length."
            )
        if not isinstance(inputs, str):
            raise ValueError(
                f"A model in document mode (document_window={self.model.config.document_window}) classifies single "
                f"texts, not {type(inputs).__name__}s (text pairs are not read in windows)."
            )
        return {"document": WindowedText.of(inputs, self.tokenizer, self.model.config)}

    def _forward(self, model_inputs):
        if not self.reads_documents:
            return super()._forward(model_inputs)
        batch = WindowedText.batch(model_inputs["document"], self.tokenizer.pad_token_id, self.device)
        return self.model(**batch)


def register_text_classification_pipeline() -> None:
    """Make :class:`PooledTextClassificationPipeline` the class of ``pipeline("text-classification")``."""
    replace_task_class(TASK, PooledTextClassificationPipeline)
