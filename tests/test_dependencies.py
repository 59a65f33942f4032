"""Every third-party module the package imports is declared in setup.cfg, in the requirements of the room that
imports it (base install, or the extra its docstring names): a fresh install of that extra must have it. CI's clean
machine once lacked seqeval, which the token metrics import and no extra declared."""

import ast
import configparser
import functools
import importlib.metadata
import re
import sys

import pytest
from helpers import REPO

PACKAGE = REPO / "pooled_models"
# Which extras a room's modules may rely on (besides the base install_requires).
# serving (the vLLM plugin) imports vllm, which one of the engine extras names for each hardware (setup.cfg).
ROOM_EXTRAS = {
    "train": ["train"],
    "sweep": ["sweep"],
    "embed": ["embed"],
    "export.py": ["onnx"],
    "serving": ["vllm-cuda", "vllm-cpu"],
}


def requirement_names(lines: str) -> list[str]:
    names = []
    for line in lines.splitlines():
        line = line.split("#")[0].strip()
        if line:
            names.append(re.split(r"[\s<>=!~;\[]", line, maxsplit=1)[0])
    return names


def declared(extras: list[str]) -> set[str]:
    """Distribution names (normalised) of the base requirements and these extras, following pooled_models[x]."""
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    names = set(requirement_names(setup["options"]["install_requires"]))
    pending, seen = list(extras), set()
    while pending:
        extra = pending.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for line in setup["options.extras_require"][extra].splitlines():
            match = re.match(r"\s*pooled_models\[(\w+)\]", line)
            if match:
                pending.append(match.group(1))
        names |= set(requirement_names(setup["options.extras_require"][extra]))
    return {normalise(name) for name in names if name != "pooled_models"}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules(path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return {
        module for module in modules if module not in sys.stdlib_module_names and module != "pooled_models"
    }


@functools.cache
def installed_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def room_of(path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0]


SOURCES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=[str(path.relative_to(REPO)) for path in SOURCES])
def test_every_imported_distribution_is_declared_for_its_room(path):
    distributions = installed_distributions()
    allowed = declared(ROOM_EXTRAS.get(room_of(path), []))
    missing = {}
    for module in imported_modules(path):
        owners = {normalise(name) for name in distributions.get(module, [module])}
        if not owners & allowed:
            missing[module] = sorted(owners)
    assert not missing, f"{path.relative_to(REPO)} imports {missing}, not declared in setup.cfg for its room"
