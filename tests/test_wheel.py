"""The package as a user gets it: the wheel (built once, for both tests) installed outside the repository.

In a fresh venv, the base install loads and runs a model; with [train], pooled-train trains one to completion (model
card included) and pipeline() serves it. Slow: a venv and the dependencies are installed (from the machine's pip cache
when warm). torch alone is shared with the running interpreter's (the same pinned CPU build, linked rather than
copied: its 45 s unpack bought no check), so every other dependency the package declares, or forgets to, is installed
or missing as for a user.

The pip route of the README's CLI quickstart: ``pooled-train --demo quickstart && pooled-train
quickstart/quickstart.yaml`` (a few steps, on the packaged MiniLM), and the usage the run prints, run as printed. A
pip install has no configs/ and no data/: --demo writes them. Cheaper than the first test: the wheel goes into a venv
of its own without its dependencies, which come from the running interpreter's environment (a path entry, so the
repository's editable install there is not imported: the wheel's pooled_models is)."""

import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest
from helpers import REPO, topic_rows, write_rows

pytestmark = pytest.mark.slow


def run(command, cwd, timeout=900, env=None):
    result = subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )
    assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


def share_torch(venv, destination):
    """Make the running interpreter's torch importable in ``venv`` (and known to its pip), with torch's own
    requirements left for pip to install there."""
    distribution = importlib.metadata.distribution("torch")
    site_packages = distribution.locate_file("")
    destination.mkdir()
    for name in ("torch", "torchgen", distribution._path.name):
        if (site_packages / name).exists():
            (destination / name).symlink_to(site_packages / name)
    (venv_site_packages(venv) / "shared_torch.pth").write_text(f"{destination}\n")
    return [
        requirement.split(";")[0]
        for requirement in distribution.requires or []
        if "extra ==" not in requirement
    ]


def venv_site_packages(venv):
    (site_packages,) = (venv / "lib").glob("python*/site-packages")
    return site_packages


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The package's wheel, as ``pip wheel`` builds it from the repository."""
    dist = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "pip", "wheel", REPO, "--no-deps", "--quiet", "-w", dist], cwd=dist)
    (built,) = dist.glob("pooled_models-*.whl")
    return built


def test_the_wheel_installs_trains_and_serves_outside_the_repository(wheel, tmp_path, tiny_backbone_path):
    names = zipfile.ZipFile(wheel).namelist()
    # The card templates live in the repository's top-level model_cards/, which setup.py maps into the package.
    assert {
        "pooled_models/model_cards/pooled_classifier.md",
        "pooled_models/model_cards/pooled_tasks.md",
    } <= set(names)
    # setup.py lists the packages itself: every module of the source tree is in the wheel.
    sources = {path.relative_to(REPO).as_posix() for path in (REPO / "pooled_models").rglob("*.py")}
    assert sources <= set(names), sorted(sources - set(names))
    assert not [name for name in names if name.startswith(("tests/", "bench/", "corpora/"))]

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    python, pip = venv / "bin" / "python", [venv / "bin" / "python", "-m", "pip", "install", "--quiet"]
    elsewhere = tmp_path / "elsewhere"  # not the repository: nothing is imported from the working tree
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HF_HUB_OFFLINE"] = "1"
    torch_requirements = share_torch(venv, tmp_path / "shared_torch")
    run([*pip, *torch_requirements], cwd=elsewhere, env=env)
    run([*pip, wheel], cwd=elsewhere, env=env)

    # The base install: a model loads and runs; the CLI says which extra it needs.
    checkpoint = REPO / "tests" / "modeling" / "fixtures" / "v0_1_0" / "attention_dense"
    script = f"""
        import torch, pooled_models
        from transformers import AutoModelForSequenceClassification
        model = AutoModelForSequenceClassification.from_pretrained({str(checkpoint)!r})
        print(pooled_models.__file__, model(input_ids=torch.tensor([[5, 6, 7]])).logits.shape[-1])
        try:
            import pooled_models.train
        except ImportError as error:
            print(error)
    """
    lines = run([python, "-c", textwrap.dedent(script)], cwd=elsewhere, env=env).stdout.strip().splitlines()
    assert lines[0].startswith(str(venv)) and lines[0].endswith(" 3")
    assert lines[1].startswith("pooled_models' training CLI needs ") and "pooled_models[train]" in lines[1]

    # With [train]: the console script trains to a published, documented model that pipeline() loads.
    run([*pip, f"{wheel}[train]"], cwd=elsewhere, env=env)
    data = {
        split: write_rows(elsewhere / f"{split}.csv", topic_rows(24, seed))
        for split, seed in (("train", 0), ("validation", 1))
    }
    config = elsewhere / "tiny.yaml"
    config.write_text(
        json.dumps(
            {
                "model_name_or_path": tiny_backbone_path,
                "train_file": str(data["train"]),
                "validation_file": str(data["validation"]),
                "output_dir": "model",
                "do_train": True,
                "do_eval": True,
                "num_train_epochs": 1,
                "report_to": "none",
                "disable_tqdm": True,
            }
        )
    )
    trained = run([venv / "bin" / "pooled-train", config], cwd=elsewhere, env=env)
    assert f"Saved to: {elsewhere / 'model'}" in trained.stdout
    card = (elsewhere / "model" / "README.md").read_text()
    assert "pooled_models" in card and "eval_accuracy" not in card and "| validation |" in card
    # Rendered from the installed copy of model_cards/ (there is no repository here to fall back on).
    installed_template = venv_site_packages(venv) / "pooled_models" / "model_cards" / "pooled_classifier.md"
    assert installed_template.is_file()
    assert "fine-tuned with the `train.py` of `pooled_models`" in installed_template.read_text()
    assert "fine-tuned with the `train.py` of `pooled_models`" in card
    script = """
        import pooled_models
        from transformers import pipeline
        print(pipeline("text-classification", model="model")("a goal in the match")[0]["label"])
    """
    label = (
        run([python, "-c", textwrap.dedent(script)], cwd=elsewhere, env=env).stdout.strip().splitlines()[-1]
    )
    assert label in {"food", "music", "sport"}
    assert (
        "usage: python -m pooled_models.train"
        in run([python, "-m", "pooled_models.train", "--help"], cwd=elsewhere, env=env).stdout
    )


QUICKSTART_NOISE = (
    "pin_memory",
    "INFO",
    "Generating data split",
    "Loading weights",
    "Writing model shards",
    "*****",
)


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """``(venv, env)``: the wheel installed in a venv whose other packages are the running environment's."""
    work = tmp_path_factory.mktemp("wheel_quickstart")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HF_HUB_OFFLINE"] = "1"
    venv = work / "venv"
    run([sys.executable, "-m", "venv", venv], work, env=env)
    run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-deps", wheel], work, env=env)
    (venv_site_packages(venv) / "shared_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv, env


def test_pip_installed_demo_trains_and_its_printed_usage_runs(installed, tmp_path):
    venv, env = installed
    found = run(
        [venv / "bin" / "python", "-c", "import pooled_models; print(pooled_models.__file__)"],
        tmp_path,
        env=env,
    )
    assert found.stdout.strip().startswith(str(venv))  # the wheel's package, not the repository's

    demo = run([venv / "bin" / "pooled-train", "--demo", "quickstart"], tmp_path, env=env).stdout
    assert demo.strip().splitlines()[-1].strip() == "pooled-train quickstart/quickstart.yaml"
    command = demo.strip().splitlines()[-1].split()
    fast = ["--max_steps", "3", "--max_eval_samples", "16", "--max_predict_samples", "16"]
    trained = run([venv / "bin" / command[0], *command[1:], *fast], tmp_path, env=env)
    output = trained.stdout + trained.stderr
    assert "Model: PooledForSequenceClassification on sentence-transformers/all-MiniLM-L6-v2 (bert)" in output
    assert f"Saved to: {tmp_path / 'quickstart' / 'outputs' / 'quickstart'}" in trained.stdout
    assert not [line for line in output.splitlines() if any(noise in line for noise in QUICKSTART_NOISE)], (
        output
    )

    usage = trained.stdout.split("Use it:\n", 1)[1]
    snippet = textwrap.dedent(usage)
    assert 'model="quickstart/outputs/quickstart"' in snippet
    answer = run([venv / "bin" / "python", "-c", snippet], tmp_path, env=env).stdout
    assert "'label': " in answer and "'score': " in answer
