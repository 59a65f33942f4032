"""The pip route of the README's CLI quickstart: the wheel installed outside the repository, then
``pooled-train --demo quickstart && pooled-train quickstart/quickstart.yaml`` (a few steps, on the packaged MiniLM),
and the usage the run prints, run as printed. A pip install has no configs/ and no data/: --demo writes them.

Slow (a wheel is built). Cheaper than tests/test_wheel.py, which checks the dependencies a pip install gets: here the
wheel goes into a venv of its own without its dependencies, which come from the running interpreter's environment
(a path entry, so the repository's editable install there is not imported: the wheel's pooled_models is)."""

import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest
from helpers import REPO

pytestmark = pytest.mark.slow

NOISE = ("pin_memory", "INFO", "Generating data split", "Loading weights", "Writing model shards", "*****")


def run(command, cwd, env, timeout=600):
    result = subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``(venv, env)``: the wheel installed in a venv whose other packages are the running environment's."""
    work = tmp_path_factory.mktemp("wheel_quickstart")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HF_HUB_OFFLINE"] = "1"
    run([sys.executable, "-m", "pip", "wheel", REPO, "--no-deps", "--quiet", "-w", work / "dist"], work, env)
    (wheel,) = (work / "dist").glob("pooled_models-*.whl")
    venv = work / "venv"
    run([sys.executable, "-m", "venv", venv], work, env)
    run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-deps", wheel], work, env)
    (site_packages,) = (venv / "lib").glob("python*/site-packages")
    (site_packages / "shared_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv, env


def test_pip_installed_demo_trains_and_its_printed_usage_runs(installed, tmp_path):
    venv, env = installed
    found = run(
        [venv / "bin" / "python", "-c", "import pooled_models; print(pooled_models.__file__)"], tmp_path, env
    )
    assert found.stdout.strip().startswith(str(venv))  # the wheel's package, not the repository's

    demo = run([venv / "bin" / "pooled-train", "--demo", "quickstart"], tmp_path, env).stdout
    assert demo.strip().splitlines()[-1].strip() == "pooled-train quickstart/quickstart.yaml"
    command = demo.strip().splitlines()[-1].split()
    fast = ["--max_steps", "3", "--max_eval_samples", "16", "--max_predict_samples", "16"]
    trained = run([venv / "bin" / command[0], *command[1:], *fast], tmp_path, env)
    output = trained.stdout + trained.stderr
    assert "Model: PooledForSequenceClassification on sentence-transformers/all-MiniLM-L6-v2 (bert)" in output
    assert f"Saved to: {tmp_path / 'quickstart' / 'outputs' / 'quickstart'}" in trained.stdout
    assert not [line for line in output.splitlines() if any(noise in line for noise in NOISE)], output

    usage = trained.stdout.split("Use it:\n", 1)[1]
    snippet = textwrap.dedent(usage)
    assert 'model="quickstart/outputs/quickstart"' in snippet
    answer = run([venv / "bin" / "python", "-c", snippet], tmp_path, env).stdout
    assert "'label': " in answer and "'score': " in answer
