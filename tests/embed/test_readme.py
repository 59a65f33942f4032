"""The README's embeddings quickstart, run as written on a saved checkpoint."""

import re

import numpy as np
import torch
from helpers import REPO, png_size
from transformers import AutoTokenizer

from pooled_models import PooledForSequenceClassification


def readme_block(heading: str) -> str:
    section = (REPO / "README.md").read_text().split(f"\n{heading}\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_the_embeddings_quickstart_runs_on_a_classifier_checkpoint(tiny_backbone_path, tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        tiny_backbone_path, pooling="attention", num_labels=2
    )
    model.save_pretrained(tmp_path / "out")
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(tmp_path / "out")
    monkeypatch.chdir(tmp_path)  # the snippet reads "out" and writes sims.png where it runs
    namespace = {}
    exec(readme_block("## Embeddings"), namespace)
    embeddings = namespace["embeddings"]
    assert embeddings.dtype == np.float32 and embeddings.shape == (3, model.pooler.output_dim)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(
        embeddings, model.eval().encode(namespace["texts"], normalize_embeddings=True), atol=1e-6
    )
    assert png_size(tmp_path / "sims.png")[0] > 300
