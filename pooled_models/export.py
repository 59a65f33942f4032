"""ONNX export of a pooled model: ``export_onnx(model, "model.onnx")``.

torch's dynamo exporter (``torch.onnx.export(..., dynamo=True)``) with dynamic batch and sequence axes; inputs
``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the backbone takes them); outputs ``logits`` for a
sequence or token classifier, ``<task>_logits`` for every task of a multi-task model (in task order), ``embeddings``
(the pooled vectors) for a ``PooledModel``. Every pooling exports, label tokens
included: nothing in a pooled model's forward depends on data in a way an exported graph cannot hold. The file is
checked with onnxruntime against PyTorch, on the sample and on batches of other shapes, before it is returned.

A model in document mode (``document_window`` set) exports whole: the windows' encoder and the cross-window pooling
in one graph, with one more input, ``document_windows`` ``[documents, max_windows]`` (both dynamic), the layout
``DocumentCollator`` builds: the rows of ``input_ids`` are the batch's windows, the outputs are one per document.

Needs the ``[onnx]`` extra (onnx, onnxscript, onnxruntime).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from .modeling.documents import document_windows_from
from .modeling.modeling_multitask import PooledForMultiTask
from .modeling.modeling_pooled import PooledForSequenceClassification, PooledPreTrainedModel
from .modeling.modeling_token import PooledForTokenClassification

__all__ = ["export_onnx"]


class _Exported(nn.Module):
    """The model with plain tensor inputs and a tuple of tensor outputs, as an ONNX graph takes and gives them."""

    def __init__(self, model: PooledPreTrainedModel, with_token_types: bool):
        super().__init__()
        self.model = model
        self.input_names = ["input_ids", "attention_mask"] + (["token_type_ids"] if with_token_types else [])
        if model.config.reads_documents:
            self.input_names.append("document_windows")
        if isinstance(model, PooledForMultiTask):
            self.output_names = [f"{task}_logits" for task in model.config.tasks]
        elif isinstance(model, (PooledForSequenceClassification, PooledForTokenClassification)):
            self.output_names = ["logits"]
        else:
            self.output_names = ["embeddings"]

    def forward(self, *tensors):
        inputs = dict(zip(self.input_names, tensors, strict=True))
        if isinstance(self.model, PooledForMultiTask):
            outputs = self.model(**inputs)  # every head from one call, as inference wants them
            return tuple(outputs[task].logits for task in self.model.config.tasks)
        if self.output_names == ["logits"]:
            return (self.model(**inputs).logits,)
        return (self.model.embed(**inputs),)


# What torch's exporter says on every export that the user can do nothing about, each matched by its category and
# message (torch 2.13): our batch and sequence axes are shared by every input (the exporter notes that it keeps one
# name for them), torch's own pytree deprecation, and the torchvision operators it skips registering (a pooled model
# uses none). Anything else, the user's warnings included, still shows.
EXPORTER_NOTES = (
    (
        UserWarning,
        r"# The axis name: (batch|sequence) will not be used, since it shares the same shape constraints",
    ),
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
)
EXPORTER_LOG_NOTES = {
    "torch.onnx._internal.exporter._registration": "torchvision is not installed. Skipping "
}


class _DropMessages(logging.Filter):
    def __init__(self, start: str):
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.start)


@contextlib.contextmanager
def _exporter_notes_silenced() -> Iterator[None]:
    """Inside one export only: the exporter's notes above left out, every other warning and log line kept."""
    filters = {name: _DropMessages(start) for name, start in EXPORTER_LOG_NOTES.items()}
    with warnings.catch_warnings():
        for category, message in EXPORTER_NOTES:
            warnings.filterwarnings("ignore", message=message, category=category)
        for name, log_filter in filters.items():
            logging.getLogger(name).addFilter(log_filter)
        try:
            yield
        finally:
            for name, log_filter in filters.items():
                logging.getLogger(name).removeFilter(log_filter)


def _sample_batch(
    model: PooledPreTrainedModel, batch: int, length: int, seed: int
) -> dict[str, torch.Tensor]:
    """Random token ids of real vocabulary, the second row padded: a batch of the shape the export generalises."""
    generator = torch.Generator().manual_seed(seed)
    vocabulary = model.get_input_embeddings().num_embeddings
    ids = torch.randint(5, vocabulary, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    if batch > 1:
        mask[1, length // 2 :] = 0
        ids[1, length // 2 :] = model.pad_token_id
    sample = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    if model.config.reads_documents:
        # The windows as documents of 2, 1, 2... windows (the last one cut to fit): a padded layout from 2 documents on.
        owners = [document for document in range(batch) for _ in range(2 - document % 2)][:batch]
        sample["document_windows"] = document_windows_from(owners)
    return sample


def export_onnx(
    model: PooledPreTrainedModel,
    path: str | Path,
    *,
    sample: dict[str, torch.Tensor] | None = None,
    verify: bool = True,
    atol: float = 1e-4,
    opset_version: int | None = None,
) -> Path:
    """Export ``model`` (in eval mode) to ``path`` and return the path.

    Args:
        sample: a tokenized batch to trace with (``input_ids``, ``attention_mask``...); random ids by default.
            The export is not tied to its shape: batch and sequence length are dynamic.
        verify: run the file with onnxruntime on the sample and on two batches of other shapes, and raise
            ``ValueError`` if any output differs from PyTorch's by more than ``atol``.
        opset_version: the ONNX opset (default: the exporter's).
    """
    path = Path(path)
    model = model.eval()
    with_token_types = "token_type_ids" in model._backbone_takes
    sample = sample or _sample_batch(model, batch=2, length=16, seed=0)
    # The wrapper in eval mode too: torch warns about exporting a module in training mode.
    exported = _Exported(model, with_token_types).eval()
    names = exported.input_names
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    layout = {0: torch.export.Dim("documents"), 1: torch.export.Dim("windows")}
    dynamic_shapes = tuple(
        layout if name == "document_windows" else {0: batch, 1: sequence} for name in names
    )
    arguments = tuple(sample.get(name, torch.zeros_like(sample["input_ids"])) for name in names)
    with torch.no_grad(), _exporter_notes_silenced():
        torch.onnx.export(
            exported,
            arguments,
            str(path),
            input_names=names,
            output_names=exported.output_names,
            dynamic_shapes=(dynamic_shapes,),  # forward(*tensors): one argument, a tuple
            opset_version=opset_version,
            dynamo=True,
            verbose=False,
        )
    if verify:
        _verify(
            exported,
            path,
            names,
            [sample, _sample_batch(model, 4, 23, 1), _sample_batch(model, 1, 7, 2)],
            atol,
        )
    return path


def _verify(exported: _Exported, path: Path, names: list[str], batches, atol: float) -> None:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in batches:
        inputs = [batch.get(name, torch.zeros_like(batch["input_ids"])) for name in names]
        got = session.run(None, {name: tensor.numpy() for name, tensor in zip(names, inputs, strict=True)})
        with torch.no_grad():
            expected = exported(*inputs)
        for output_name, value, reference in zip(exported.output_names, got, expected, strict=True):
            difference = float(abs(value - reference.float().numpy()).max())
            if difference > atol:
                raise ValueError(
                    f"The exported {path.name} differs from the PyTorch model by {difference:.2e} (more than {atol}) "
                    f"in {output_name} on a batch of shape {tuple(inputs[0].shape)}."
                )
