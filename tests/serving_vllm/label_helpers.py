"""Label-text checkpoints to serve, the zero-shot IO-processor plugin's entry point, and the pipelines' answers."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import sys
from pathlib import Path

import torch
from transformers import pipeline

from pooled_models.modeling.label_text_inputs import label_text_token_ids, label_texts
from pooled_models.serving.zero_shot import PLUGIN_NAME

# Labels none of the test checkpoints was built with (the open label set).
UNSEEN = ["sports", "travel", "cooking", "politics", "weather"]
ZERO_SHOT_TEXTS = [
    "I love this.",
    "The train was late again and I missed the connection to the airport.",
    "Fine.",
    "Add the onions to the pan and stir until golden.",
]
ENTRY_POINT = f"{PLUGIN_NAME} = pooled_models.serving.zero_shot:plugin"
# Where this process made the throwaway distribution, once it has.
_made_in: Path | None = None


def ensure_zero_shot_entry_point(folder: Path) -> dict[str, str]:
    """Make vLLM find the zero-shot plugin: the installed package's entry point (setup.cfg) where its metadata has it,
    else a throwaway distribution under ``folder`` that declares only that entry point (an editable install made before
    setup.cfg named it). Returns the environment a server subprocess needs for the same."""
    global _made_in
    if _made_in is not None:
        folder = _made_in
    elif PLUGIN_NAME in importlib.metadata.entry_points(group="vllm.io_processor_plugins").names:
        return {}
    info = folder / "pooled_models_zero_shot_tests-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pooled-models-zero-shot-tests\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[vllm.io_processor_plugins]\n{ENTRY_POINT}\n")
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    importlib.invalidate_caches()
    _made_in = folder
    return {"PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(folder)]))}


def own_label_text_ids(
    tokenizer, labels: dict[int, str], descriptions: dict[str, str] | None
) -> list[list[int]]:
    """A label-text model's own labels as their words (its label_text_ids, as from_backbone and train.py read them
    with the tokenizer): a model saved without them reads every label as its bare marker, all alike."""
    return label_text_token_ids(
        label_texts([labels[index] for index in sorted(labels)], descriptions), tokenizer
    )


@functools.cache
def zero_shot_pipeline_for(folder: str):
    """pipeline("zero-shot-classification") on the checkpoint, built once per folder."""
    return pipeline("zero-shot-classification", model=folder)


def zero_shot_pipeline_answer(folder: Path, texts, labels, multi_label: bool) -> list[dict]:
    pipe = zero_shot_pipeline_for(str(folder))
    return pipe(list(texts), candidate_labels=list(labels), multi_label=multi_label)


def assert_same_answer(served: list[dict], expected: list[dict], tolerance: float) -> None:
    """Each text's labels in the same order, with the same scores."""
    assert len(served) == len(expected)
    for got, want in zip(served, expected, strict=True):
        assert got["sequence"] == want["sequence"]
        assert got["labels"] == want["labels"], (got, want)
        torch.testing.assert_close(
            torch.tensor(got["scores"]), torch.tensor(want["scores"]), atol=tolerance, rtol=0
        )
