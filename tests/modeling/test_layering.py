"""The house's rules, read from the source: what each room may import (modeling <- train <- sweep, and modeling <-
embed), no import cycle, and the model room is exactly what travels next to a checkpoint."""

import ast
import json
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO, tiny_model, tiny_multitask_model

from pooled_models import PooledForTokenClassification

PACKAGE = REPO / "pooled_models"
MODELING = PACKAGE / "modeling"
# Small shared pieces: they import nothing of the package, or only one another.
# Outside the rooms: the public API's ONNX export (a client of the model room only).
EXPORT = "pooled_models.export"
# The vLLM plugin (vLLM loads it through its entry point): the only room that imports vllm, and no room imports it.
SERVING = "pooled_models.serving"
LEAVES = {
    "pooled_models.modeling.problem_types",
    "pooled_models.modeling.registry",
    "pooled_models.errors",
    "pooled_models.thresholds",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> list[tuple[str, int, str]]:
    """``(module imported, relative level, line)`` for every import of the file, at any depth (functions and
    TYPE_CHECKING blocks included): an import anywhere in a model file runs on some user's machine."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, 0, ast.unparse(node)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", node.level, ast.unparse(node)))
    return found


def resolve(path: Path, module: str, level: int) -> str:
    if level == 0:
        return module
    base = module_name(path).split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def package_imports(path: Path) -> set[str]:
    """The package's modules a file imports (``from .x import y`` may name a module ``x.y``)."""
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    found = set()
    for module, level, _ in imports_of(path):
        target = resolve(path, module, level)
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target.startswith("pooled_models") and target != module_name(path):
            found.add(target)
    return found


MODEL_FILES = sorted(path for path in MODELING.glob("*.py") if path.name != "__init__.py")


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda path: path.name)
def test_a_model_file_imports_only_the_standard_library_torch_transformers_and_its_siblings(path):
    for module, level, line in imports_of(path):
        if level:
            assert level == 1 and module and "." not in module, (
                f"{path.name}: {line} (only `from .sibling import`)"
            )
            assert (MODELING / f"{module}.py").is_file(), f"{path.name}: {line}"
        else:
            top = module.split(".")[0]
            # huggingface_hub: transformers requires it, and its own model configs import @strict from it.
            assert top in sys.stdlib_module_names or top in ("torch", "transformers", "huggingface_hub"), (
                f"{path.name}: {line}"
            )


# The model files only a task model's checkpoint needs (a sequence classifier's does not name them in its auto_map).
TASK_MODEL_FILES = {"modeling_token.py", "modeling_multitask.py", "configuration_multitask.py"}
# The zero-shot pipeline: only a label-text classifier's config.json names it (custom_pipelines).
PIPELINE_FILES = {"zero_shot_pipeline.py"}
# The text-classification pipeline and what both pipelines import: a sequence classifier's config names it; a token
# classifier's and a multi-task model's name no pipeline.
TEXT_PIPELINE_FILES = {"text_classification_pipeline.py", "pipeline_registration.py"}


def saved_checkpoints(tmp_path):
    """One checkpoint of every kind of pooled model: folder -> the model room files it must hold."""
    every = {path.name for path in MODEL_FILES}
    # label_tokens: the pooling with the most modules behind it; label_text: the one whose config names a pipeline.
    for pooling, settings in (("mean", {}), ("label_tokens", {"label_token_init": "random"})):
        tiny_model(pooling, **settings).save_pretrained(tmp_path / pooling)
        yield tmp_path / pooling, every - TASK_MODEL_FILES - PIPELINE_FILES
    tiny_model("label_text").save_pretrained(tmp_path / "label_text")
    yield tmp_path / "label_text", every - TASK_MODEL_FILES
    torch.manual_seed(0)
    token = tiny_model("mean", model_class=PooledForTokenClassification)
    token.save_pretrained(tmp_path / "token")
    yield (
        tmp_path / "token",
        every
        - {"modeling_multitask.py", "configuration_multitask.py"}
        - PIPELINE_FILES
        - TEXT_PIPELINE_FILES,
    )
    tiny_multitask_model().save_pretrained(tmp_path / "multitask")
    yield tmp_path / "multitask", every - PIPELINE_FILES - TEXT_PIPELINE_FILES


def test_the_files_saved_next_to_a_checkpoint_are_the_model_room_its_auto_map_needs(tmp_path):
    for folder, expected in saved_checkpoints(tmp_path):
        saved = {path.name for path in folder.glob("*.py")}
        assert saved == expected, folder.name
        config = json.loads((folder / "config.json").read_text())
        references = [*config["auto_map"].values()]
        references += [task["impl"] for task in config.get("custom_pipelines", {}).values()]
        for reference in references:
            assert f"{reference.split('.')[0]}.py" in saved, (folder.name, reference)
        # A sequence classifier's config names the text-classification pipeline, a label-text one the zero-shot one
        # too; a token classifier's none (pipeline() would take a config's only entry for a call without a task).
        expected_tasks = {
            "label_text": {"text-classification", "zero-shot-classification"},
            "multitask": set(),
            "token": set(),
        }
        tasks = set(config.get("custom_pipelines", {}))
        assert tasks == expected_tasks.get(folder.name, {"text-classification"}), folder.name


def import_closure(module: str) -> set[str]:
    """The package's modules ``module`` imports, directly or through others."""
    graph = {module_name(path): package_imports(path) - {"pooled_models"} for path in PACKAGE.rglob("*.py")}
    found, todo = set(), [module]
    while todo:
        for target in graph[todo.pop()] - found:
            found.add(target)
            todo.append(target)
    return found


def test_no_config_module_imports_a_pipeline():
    # The package registers the zero-shot pipeline where it registers its Auto classes (pooled_models/__init__.py).
    pipeline = "pooled_models.modeling.zero_shot_pipeline"
    for config_module in ("configuration_pooled", "configuration_multitask"):
        assert pipeline not in import_closure(f"pooled_models.modeling.{config_module}"), config_module
    assert pipeline in import_closure(
        "pooled_models"
    )  # control: the closure does reach it where it is imported


def test_rooms_import_one_way_and_leaves_import_no_room():
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        imported = package_imports(path)
        if name.startswith("pooled_models.modeling"):
            assert all(target.startswith("pooled_models.modeling") for target in imported), (name, imported)
        elif name.startswith("pooled_models.train"):
            assert not any(target.startswith("pooled_models.sweep") for target in imported), (name, imported)
        elif name.startswith("pooled_models.embed"):  # a client of the model room only
            assert all(
                target.startswith(("pooled_models.modeling", "pooled_models.embed")) for target in imported
            ), (
                name,
                imported,
            )
        elif name.startswith(
            SERVING
        ):  # the vLLM plugin: a client of the model room (and of the Auto registration)
            assert all(
                target == "pooled_models" or target.startswith(("pooled_models.modeling", SERVING))
                for target in imported
            ), (
                name,
                imported,
            )
        elif name in ("pooled_models", EXPORT):
            assert all(
                target.startswith("pooled_models.modeling") or target == EXPORT for target in imported
            ), (name, imported)
        if name in LEAVES:
            assert imported <= LEAVES, (name, imported - LEAVES)


def test_there_is_no_import_cycle():
    graph = {module_name(path): package_imports(path) for path in PACKAGE.rglob("*.py")}
    visiting, done = set(), set()

    def visit(module, trail):
        assert module not in visiting, "import cycle: " + " -> ".join([*trail, module])
        if module in done:
            return
        visiting.add(module)
        for target in graph.get(module, ()):
            if (
                target != "pooled_models"
            ):  # every submodule's package __init__ runs first; it imports modeling
                visit(target, [*trail, module])
        visiting.discard(module)
        done.add(module)

    for module in graph:
        visit(module, [])


def test_only_the_serving_room_imports_vllm_and_no_room_imports_it():
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        if not name.startswith(SERVING):
            assert not any(
                module.split(".")[0] == "vllm" for module, level, _ in imports_of(path) if not level
            ), name
            assert not any(target.startswith(SERVING) for target in package_imports(path)), name
