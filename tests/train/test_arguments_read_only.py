"""The parsed arguments are read, never written (HOUSE.md, "Layers"): a setting the run works out from them is
resolved once, in the plan (plan.py), so the settings a step sees do not depend on which steps ran before it. A
check over the source, as a linter would make it: no ``args.<name> = ...`` (``training_args``, ``model_args``...),
no ``setattr(args, ...)`` in the training package outside plan.py."""

import ast
from pathlib import Path

import pooled_models.train

TRAIN = Path(pooled_models.train.__file__).parent
ALLOWED = {TRAIN / "plan.py"}


def _is_arguments(node: ast.AST) -> bool:
    """``args``, ``training_args``, ``model_args``, ``data_args``... (an attribute's root name)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and (node.id == "args" or node.id.endswith("_args"))


def argument_writes(source: str) -> list[int]:
    """The lines of ``source`` that write into a parsed-arguments object."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
        ):
            targets = [ast.Attribute(value=node.args[0], attr="", ctx=ast.Store())] if node.args else []
        for target in targets:
            for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(element, ast.Attribute) and _is_arguments(element.value):
                    lines.append(node.lineno)
    return sorted(set(lines))


def test_the_check_finds_each_kind_of_write():
    source = (
        "args.document_mode = mode = 'true'\n"
        "training_args.max_windows_per_document += 1\n"
        "setattr(model_args, 'pooling', 'mean')\n"
        "a, data_args.text_column = 1, 'text'\n"
        "value = args.document_mode\n"  # a read
        "self.eval_strategy = 'epoch'\n"  # a dataclass settling its own fields in __post_init__
        "plan = dataclasses.replace(args, output_dir='x')\n"
    )
    assert argument_writes(source) == [1, 2, 3, 4]


def test_no_module_of_the_training_package_writes_into_the_parsed_arguments():
    found = [
        f"{path.relative_to(TRAIN.parent)}:{line}"
        for path in sorted(TRAIN.rglob("*.py"))
        if path not in ALLOWED
        for line in argument_writes(path.read_text())
    ]
    assert found == [], f"resolve these in the plan (plan.py) instead: {found}"


def test_a_config_files_document_words_are_resolved_for_the_plan_not_written_back():
    from types import SimpleNamespace

    from pooled_models.train.arguments.documents import check_document_arguments, resolved_document_arguments

    # as a YAML file gives them: an unquoted true, and 0 for "no cap"
    parsed = dict(document_mode=True, window_keeping="start_end", max_windows_per_document=0)
    args = SimpleNamespace(
        **parsed, max_windows_per_batch=None, eval_max_windows=None, document_gate_learning_rate=None
    )
    check_document_arguments(args)
    assert {name: getattr(args, name) for name in parsed} == parsed  # read, not written
    assert resolved_document_arguments(args) == {"document_mode": "true", "max_windows_per_document": None}
