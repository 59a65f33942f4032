"""With pooled_models installed, vLLM 0.31 (outside the plugin's range) still starts and serves its own models: the
plugin's register() patches nothing and says so in one warning, and a pooled checkpoint is refused naming both
versions (pooled_models/serving/compatibility.py). Each engine starts in a fresh process, as vLLM loads its plugins."""

import importlib.metadata
import json
import subprocess
import sys
import textwrap

from transformers import AutoTokenizer, BertConfig

from pooled_models import PooledConfig, PooledForSequenceClassification

ENGINE = {"runner": "pooling", "enforce_eager": True, "dtype": "float32"}
WARNING = "pooled_models' vLLM plugin supports vLLM >=0.32,<0.33 and patched nothing on vLLM 0.31"

SCRIPT = """
    import json
    from vllm import LLM
    try:
        llm = LLM(model={folder!r}, **{engine!r})
        print(json.dumps({{"sizes": [len(o.outputs.embedding) for o in llm.embed(["I love this.", "ok"])]}}))
    except Exception as error:
        print(json.dumps({{"refused": str(error)}}))
"""


def serve(folder, tmp_path) -> tuple[dict, str]:
    script = textwrap.dedent(SCRIPT.format(folder=str(folder), engine=ENGINE))
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_the_plugin_is_installed_where_vllm_loads_it():
    plugins = importlib.metadata.entry_points(group="vllm.general_plugins")
    assert "pooled_models.serving:register" in [plugin.value for plugin in plugins]


def test_vllm_0_31_serves_its_own_model_with_one_warning(minilm_path, tmp_path):
    report, log = serve(minilm_path, tmp_path)
    assert report == {"sizes": [384, 384]}, report
    assert len([line for line in log.splitlines() if WARNING in line]) == 1, log[-3000:]


def test_a_pooled_checkpoint_is_refused_naming_both_versions(minilm_path, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    backbone = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
    )
    folder = tmp_path / "model"
    config = PooledConfig(backbone_config=backbone, pooling="mean", id2label={0: "no", 1: "yes"})
    PooledForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    report, _ = serve(folder, tmp_path)
    assert "on vLLM >=0.32,<0.33 only, and this is vLLM 0.31" in report.get("refused", ""), report
