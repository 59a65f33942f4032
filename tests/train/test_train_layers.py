"""The training room's shape, read from the source: its layers (the command line above the pipeline, the pipeline
above the steps: plan, data, model, trainer, evaluation, card, predictions, console, output folder; those above the
pieces they share: arguments, tasks, options) with imports running one way; its sizes (no function in it over 60
lines; and anywhere in the package no module over 500 lines, no function over 80: a cap on the number of modules would
reward growing files, a cap on their length does not); no chain of module-level imports within the room over 8 modules.
tests/modeling/test_layering.py holds the rules between rooms."""

import ast
from pathlib import Path

import pytest
from helpers import REPO

PACKAGE = REPO / "pooled_models"
TRAIN = PACKAGE / "train"

# Top to bottom; a module may import its own layer's modules (no cycle: tests/modeling/test_layering.py) and lower.
LAYERS = [
    {"cli", "__main__"},
    {"pipeline"},
    {
        "plan",
        "few_examples",
        "source",
        "data",
        "model",
        "trainer",
        "evaluation",
        "card",
        "predictions",
        "disk_full",
        "console",
        "output_dir",
        "checkpoints",
        "demo",
        "batch_layout",
        "zero_shot_eval",
        "loss_guard",
    },
    {"arguments", "tasks", "options", "__init__"},
]
# The only modules that may import the pipeline or the command line: the entry points and the sweep, which runs
# train.py's run in its own process.
ENTRY_POINTS = ("pooled_models.train.cli", "pooled_models.train.__main__", "pooled_models.sweep")
# The shared pieces below the steps: arguments/ (what argv and config files say), tasks.py (the task specs) and
# options/ (the registered training options and the parameter groups they and the Trainer share); the one UsageError
# is pooled_models/errors.py, shared with the sweep.
MAX_MODULE_LINES = 500  # anywhere in the package
MAX_TRAIN_FUNCTION_LINES = 60
MAX_FUNCTION_LINES = 80  # anywhere in the package
MAX_IMPORT_CHAIN = 8


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> set[str]:
    return {module_name(path) for path in PACKAGE.rglob("*.py")}


def resolve(path: Path, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    base = module_name(path).split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imported_modules(path: Path, top_level_only: bool = False) -> set[str]:
    """The package's modules ``path`` imports: anywhere in the file, or only at module level (what runs on import:
    not inside functions, not under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    known, found = modules(), set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve(path, node.module, node.level)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("pooled_models") and target != module_name(path):
                found.add(target)
    return found


def layer(module: str) -> int | None:
    """The layer of a training-room module (its first name under train/), None outside the room."""
    if not module.startswith("pooled_models.train"):
        return None
    parts = module.split(".")
    top = parts[2] if len(parts) > 2 else "__init__"
    for index, names in enumerate(LAYERS):
        if top in names:
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


TRAIN_FILES = sorted(TRAIN.rglob("*.py"))


@pytest.mark.parametrize("path", TRAIN_FILES, ids=lambda path: str(path.relative_to(TRAIN)))
def test_a_training_module_imports_only_its_layer_and_the_layers_below(path):
    name = module_name(path)
    own = layer(name)
    upward = sorted(target for target in imported_modules(path) if (layer(target) or own) < own)
    assert upward == [], f"{name} (layer {own}) imports a layer above it: {upward}"


def test_only_the_entry_points_import_the_pipeline_and_the_command_line():
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        if name.startswith(ENTRY_POINTS):
            continue
        top = {"pooled_models.train.cli", "pooled_models.train.pipeline"} & imported_modules(path)
        allowed = {"pooled_models.train.pipeline"} if name == "pooled_models.train.cli" else set()
        assert top <= allowed, f"{name} imports {sorted(top - allowed)}"


def long_modules(root: Path, limit: int = MAX_MODULE_LINES) -> dict[str, int]:
    """file relative to ``root`` -> its lines, for the files over ``limit``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > limit:
            found[str(path.relative_to(root))] = lines
    return found


def test_no_module_of_the_package_is_over_500_lines():
    # Every room, the model room (copied next to checkpoints) and the vLLM plugin included: modules of one job each.
    found = long_modules(PACKAGE)
    assert found == {}, (
        f"modules of pooled_models/ over {MAX_MODULE_LINES} lines: "
        + ", ".join(f"{path} ({lines} lines)" for path, lines in found.items())
        + "; split each into modules of one job"
    )


def test_the_module_check_sees_a_long_module(tmp_path):
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert long_modules(tmp_path) == {"long.py": MAX_MODULE_LINES + 1}


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> dict[tuple[str, str], int]:
    """(file relative to ``root``, function) -> its lines, decorators included, for those over ``limit``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
                lines = node.end_lineno - start + 1
                if lines > limit:
                    found[(str(path.relative_to(root)), node.name)] = lines
    return found


def test_no_function_in_the_package_is_over_80_lines():
    assert long_functions(PACKAGE) == {}


def test_no_function_in_the_training_room_is_over_60_lines():
    assert long_functions(TRAIN, MAX_TRAIN_FUNCTION_LINES) == {}


@pytest.mark.parametrize("limit", [MAX_FUNCTION_LINES, MAX_TRAIN_FUNCTION_LINES])
def test_the_length_check_sees_a_long_function(tmp_path, limit):
    body = "\n".join(f"    x{index} = {index}" for index in range(limit))
    (tmp_path / "long.py").write_text(
        f"def long():\n{body}\n\n\ndef short():\n{body[: body.rindex(chr(10))]}\n"
    )
    assert long_functions(tmp_path, limit) == {("long.py", "long"): limit + 1}


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest path of module-level imports (the graph has no cycle: tests/modeling/test_layering.py)."""
    memo: dict[str, list[str]] = {}

    def chain(module: str) -> list[str]:
        if module not in memo:
            memo[module] = [module] + max(
                (chain(target) for target in graph.get(module, ())), key=len, default=[]
            )
        return memo[module]

    return max((chain(module) for module in graph), key=len)


def test_no_chain_of_module_level_imports_is_over_8_modules():
    # The training room's own chains (the model room's, up to 5 modules from a config to the registry, is its own).
    graph = {
        module_name(path): {
            target for target in imported_modules(path, top_level_only=True) if layer(target) is not None
        }
        for path in TRAIN_FILES
    }
    chain = longest_chain(graph)
    assert len(chain) <= MAX_IMPORT_CHAIN, " -> ".join(chain)


def test_the_chain_check_counts_every_module_of_a_chain():
    graph = {f"m{index}": {f"m{index + 1}"} for index in range(9)} | {"m9": set(), "side": {"m8"}}
    assert longest_chain(graph) == [f"m{index}" for index in range(10)]


def trainer_classes(root: Path) -> list[str]:
    """``file:class`` for each class under ``root`` that derives from a class named ``Trainer`` or ``*Trainer``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
                if any(base.endswith("Trainer") for base in bases):
                    found.append(f"{path.relative_to(root)}:{node.name}")
    return found


def test_one_trainer_class_serves_every_run():
    # One task or several: one Trainer subclass, as sentence-transformers' serves one dataset or a dict of them.
    assert trainer_classes(PACKAGE) == ["train/trainer.py:PooledTrainer"]


def test_the_trainer_check_sees_a_second_trainer(tmp_path):
    (tmp_path / "a.py").write_text("class A(Trainer):\n    pass\n\n\nclass B(PooledTrainer):\n    pass\n")
    (tmp_path / "b.py").write_text(
        "class C(transformers.Trainer):\n    pass\n\n\nclass D(TrainerCallback):\n    pass\n"
    )
    assert trainer_classes(tmp_path) == ["a.py:A", "a.py:B", "b.py:C"]
