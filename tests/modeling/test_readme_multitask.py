"""The README's token classification and multi-task example runs as written, on a tiny backbone."""

import re

from helpers import REPO
from transformers import pipeline

from pooled_models import MultiTaskOutput, PooledForMultiTask, PooledForTokenClassification

MARKER = "<!-- tests/modeling/test_readme_multitask.py runs this block"


def readme_block() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    after = readme[readme.index(MARKER) :]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


def test_the_readme_multitask_example_runs(tiny_backbone_path, tmp_path, monkeypatch):
    code = readme_block()
    assert code.count('"bert-base-cased"') == 3  # the names and call shapes, with one backbone
    monkeypatch.chdir(tmp_path)  # the example saves "mt" and "ner_only" in the working directory
    namespace: dict = {}
    exec(compile(code.replace('"bert-base-cased"', repr(tiny_backbone_path)), "README.md", "exec"), namespace)
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
