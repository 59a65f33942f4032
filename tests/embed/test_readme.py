"""The embeddings page's first example (docs/embeddings.md), run as written on a saved classifier checkpoint."""

import re

import numpy as np
import torch
from helpers import REPO, png_size
from transformers import AutoTokenizer

from pooled_models import PooledForSequenceClassification


def first_python_block(page: str) -> str:
    return re.search(r"```python\n(.*?)```", (REPO / page).read_text(encoding="utf-8"), re.DOTALL).group(1)


def test_the_embeddings_example_runs_on_a_classifier_checkpoint(tiny_backbone_path, tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        tiny_backbone_path, pooling="attention", num_labels=2
    )
    # The page runs where the README quickstart saved "sentiment"; a tiny classifier stands in for it here.
    model.save_pretrained(tmp_path / "sentiment")
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(tmp_path / "sentiment")
    monkeypatch.chdir(tmp_path)  # the example reads "sentiment" and writes sims.png where it runs
    namespace = {}
    exec(first_python_block("docs/embeddings.md"), namespace)
    embeddings = namespace["embeddings"]
    assert embeddings.dtype == np.float32 and embeddings.shape == (3, model.pooler.output_dim)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(
        embeddings, model.eval().encode(namespace["texts"], normalize_embeddings=True), atol=1e-6
    )
    assert png_size(tmp_path / "sims.png")[0] > 300
