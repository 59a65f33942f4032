"""Checkpoints saved by pooled_models 0.1.0 keep loading, with the package and without it (trust_remote_code)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification

import pooled_models  # noqa: F401  (registers the Auto classes)
from pooled_models.modeling.compat import SubConfigSpec

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "v0_1_0"
RECORDED = json.loads((FIXTURES / "expected.json").read_text())
INPUTS = {key: torch.tensor(value) for key, value in RECORDED["inputs"].items()}


@pytest.mark.parametrize("name", sorted(RECORDED["logits"]))
def test_a_0_1_0_checkpoint_loads_with_the_package_and_gives_its_logits(name):
    model = AutoModelForSequenceClassification.from_pretrained(FIXTURES / name).eval()
    assert type(model).__module__.startswith("pooled_models.")
    with torch.no_grad():
        logits = model(**INPUTS).logits
    torch.testing.assert_close(logits, torch.tensor(RECORDED["logits"][name]), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.skipif(
    SubConfigSpec is None,
    reason="the code files 0.1.0 saved import transformers' SubConfigSpec, added in transformers 5.20: on older "
    "versions they load with the package installed (the test above), and a checkpoint saved again carries code that "
    "imports on every version of the declared range",
)
def test_0_1_0_checkpoints_load_without_the_package(tmp_path):
    script = f"""
        import json, sys, torch
        sys.modules["pooled_models"] = None  # any import of pooled_models now raises
        from transformers import AutoModelForSequenceClassification
        recorded = json.loads(open({str(FIXTURES / "expected.json")!r}).read())
        inputs = {{key: torch.tensor(value) for key, value in recorded["inputs"].items()}}
        out = {{}}
        for name in recorded["logits"]:
            model = AutoModelForSequenceClassification.from_pretrained({str(FIXTURES)!r} + "/" + name,
                                                                       trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
            with torch.no_grad():
                out[name] = model(**inputs).logits.tolist()
        print(json.dumps(out))
    """
    env = {"HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    logits = json.loads(result.stdout.strip().splitlines()[-1])
    for name, expected in RECORDED["logits"].items():
        torch.testing.assert_close(torch.tensor(logits[name]), torch.tensor(expected), atol=1e-5, rtol=1e-5)
