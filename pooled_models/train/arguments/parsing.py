"""From ``[CONFIG.yaml|CONFIG.json] [--flag value ...]`` to the three argument dataclasses: the config file read and
checked (unknown keys named with a suggestion, removed options and code references refused), flags overriding it."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import yaml
from transformers import HfArgumentParser

from ...errors import UsageError, program_name
from ..options import refuse_removed_options
from .data import DataArguments
from .dependencies import check_dependencies, given_on_command_line, implied_phases
from .model import ModelArguments
from .training import PooledTrainingArguments

__all__ = [
    "CONFIG_FILE_SUFFIXES",
    "REFUSED_KEYS",
    "DEMO_FLAG",
    "program",
    "help_command",
    "read_config_file",
    "parser",
    "parse_arguments",
]

CONFIG_FILE_SUFFIXES = (".yaml", ".yml", ".json")


# Settings that would make transformers import and run code named by a checkpoint or a config file.
REFUSED_KEYS = ("trust_remote_code", "auto_map", "custom_pipelines")


# pooled-train --demo DIR: the quickstart's config files and data, for an install that has no configs/ and data/.
DEMO_FLAG = "--demo"


def program() -> str:
    """The command the user ran: ``train.py``, ``pooled-train`` or ``python -m pooled_models.train``."""
    return program_name("train.py", "pooled-train", "pooled_models.train")


def help_command() -> str:
    """The command that lists every setting, as the user runs the CLI (a pip install has no train.py)."""
    name = program()
    return f"{'python train.py' if name == 'train.py' else name} --help"


def _refuse_code_references(keys, source: str) -> None:
    for key in keys:
        name = key.lstrip("-").replace("-", "_").split("=")[0]
        if name in REFUSED_KEYS:
            raise UsageError(
                f"{source} sets {name!r}, which is refused: train.py never runs code from a checkpoint, a dataset or "
                "a config file. Use a backbone whose model type is built into transformers."
            )


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The settings of a YAML or JSON config file, as a flat ``{argument: value}`` mapping."""
    path = Path(path)
    if path.suffix not in CONFIG_FILE_SUFFIXES:
        raise UsageError(f"Config file {path} must end in one of {', '.join(CONFIG_FILE_SUFFIXES)}.")
    try:
        text = path.read_text(encoding="utf-8")
        values = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except OSError as error:
        raise UsageError(f"Cannot read config file {path}: {error.strerror or error}.") from error
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise UsageError(
            f"Config file {path} is not valid {path.suffix.lstrip('.').upper()}: {error}"
        ) from error
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise UsageError(
            f"Config file {path} must hold a mapping of argument names to values, got {type(values).__name__}."
        )
    _refuse_code_references(values, f"Config file {path}")
    return values


def parser() -> HfArgumentParser:
    name = program()
    return HfArgumentParser(
        (ModelArguments, DataArguments, PooledTrainingArguments),
        prog=name,
        usage=f"{name} [CONFIG.yaml|CONFIG.json] [--flag value ...]",
        description="Fine-tune any Transformers backbone with any pooling head. Settings come from an optional "
        "YAML/JSON config file (first argument) and flags; flags override the file. "
        f"{name} {DEMO_FLAG} DIR writes the quickstart's config files and data into DIR.",
    )


def parse_arguments(argv: list[str]) -> tuple[ModelArguments, DataArguments, PooledTrainingArguments]:
    """``(model_args, data_args, training_args)`` from ``[config_file] [--flag value ...]``.

    A validation or test file turns its phase on (``training_args.implied_phases`` says which, for the run to tell);
    a setting that would take no effect with the others is refused (dependencies.py)."""
    flags = parser()
    file_values: dict[str, Any] = {}
    if argv and not argv[0].startswith("-"):
        config_file, argv = argv[0], argv[1:]
        file_values = _config_file_values(config_file, {action.dest for action in flags._actions})
        flags.set_defaults(**file_values)  # flags given after the file override it
    _refuse_code_references([arg for arg in argv if arg.startswith("--")], "The command line")
    refuse_removed_options(_command_line_settings(argv), "The command line")
    values = {**file_values, **given_on_command_line(flags, argv)}
    implied = implied_phases(values)
    flags.set_defaults(**dict.fromkeys(implied, True))
    arguments = _parse(flags, argv)
    check_dependencies(arguments, set(values))
    arguments[2].implied_phases = implied
    return arguments


def _config_file_values(config_file: str, known: set[str]) -> dict[str, Any]:
    """The settings of a config file, its unknown keys named with a suggestion."""
    file_values = read_config_file(config_file)
    refuse_removed_options(file_values, f"Config file {config_file}")
    unknown = sorted(set(file_values) - known)
    if unknown:
        named = "; ".join(_with_suggestion(key, known) for key in unknown)
        raise UsageError(
            f"Config file {config_file} has unknown settings: {named}. Run {help_command()} for the list."
        )
    return file_values


def _parse(flags: HfArgumentParser, argv: list[str]):
    try:
        *outputs, remaining = flags.parse_args_into_dataclasses(
            args=argv, return_remaining_strings=True, look_for_args_file=False
        )
    except UsageError:
        raise
    except (
        ValueError
    ) as error:  # TrainingArguments' own consistency checks, e.g. mismatched eval/save strategies
        raise UsageError(str(error)) from error
    if remaining:
        raise UsageError(
            f"Unknown arguments: {_unknown_flags(remaining, flags)}. Run {help_command()} for the list."
        )
    return tuple(outputs)


def _unknown_flags(remaining: list[str], flags: HfArgumentParser) -> str:
    """The arguments argparse did not take, a misspelled flag with the flags it may mean (as config keys get)."""
    # Every spelling of a flag (--do_eval, --do-eval) -> its first, which the suggestion names.
    spellings = {
        option: action.option_strings[0]
        for action in flags._actions
        for option in action.option_strings
        if option.startswith("--")
    }
    shown = []
    for arg in remaining:
        flag = arg.split("=")[0]
        matches = difflib.get_close_matches(flag, spellings, n=3) if flag.startswith("--") else []
        named = list(dict.fromkeys(spellings[match] for match in matches))[:2]
        shown.append(f"{arg} (did you mean {' or '.join(named)}?)" if named else arg)
    return " ".join(shown)


def _command_line_settings(argv: list[str]) -> dict[str, Any]:
    """``{--flag: the value after it}`` of the flags on a command line (None for the last flag)."""
    settings = {}
    for index, arg in enumerate(argv):
        if arg.startswith("--"):
            settings[arg] = argv[index + 1] if index + 1 < len(argv) else None
    return settings


def _with_suggestion(key: str, known: set[str]) -> str:
    matches = difflib.get_close_matches(key, known, n=2)
    return f"{key} (did you mean {' or '.join(matches)}?)" if matches else key
