"""Without the plugin (VLLM_PLUGINS set empty), vLLM never serves a pooled checkpoint with a pooling of its own: with
trust_remote_code the checkpoint's own code refuses, naming pooled_models[vllm]; without it, transformers refuses to
run the checkpoint's code."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from transformers import AutoTokenizer
from vllm_helpers import ENGINE, save_checkpoint

SCRIPT = """
    import json, sys
    sys.modules["pooled_models"] = None  # a venv without the package: only the checkpoint's own code
    from vllm import LLM
    try:
        llm = LLM(model={folder!r}, trust_remote_code={trust!r}, **{engine!r})
        print(json.dumps({{"served": [o.outputs.probs for o in llm.classify(["I love this."])]}}))
    except Exception as error:
        print(json.dumps({{"refused": str(error)}}))
"""


@pytest.mark.parametrize("trust", [True, False])
def test_vllm_without_the_plugin_refuses_a_pooled_checkpoint(trust, minilm_path, tmp_path):
    folder = save_checkpoint(tmp_path / "model", AutoTokenizer.from_pretrained(minilm_path), "max")
    script = textwrap.dedent(SCRIPT.format(folder=str(folder), trust=trust, engine=ENGINE))
    env = {**os.environ, "VLLM_PLUGINS": "", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert "served" not in report, report
    assert ("pooled_models[vllm]" if trust else "trust_remote_code") in report["refused"]
