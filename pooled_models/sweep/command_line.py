"""The sweep's command line: its own options (``--poolings``, ``--baselines``, ``--seeds``, ``--report_dir``,
``--resume``, ``--keep_models``), checked, and the train.py arguments every run gets."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ..errors import UsageError, program_name
from ..modeling.registry import POOLINGS

__all__ = ["BASELINES", "DEFAULT_SEED", "SET_BY_THE_SWEEP", "parse_sweep_arguments"]

BASELINES = ("vanilla", "logistic_regression")
DEFAULT_SEED = 42
# train.py arguments the sweep sets itself, one value per run.
SET_BY_THE_SWEEP = ("pooling", "seed", "output_dir")


def _program() -> str:
    return program_name("sweep.py", "pooled-sweep", "pooled_models.sweep")


def _command() -> list[str]:
    """How to run the sweep again, as the user ran it."""
    program = _program()
    return ["python", program] if program == "sweep.py" else program.split()


def _comma_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_program(),
        allow_abbrev=False,  # --pooling and --seed are train.py flags the sweep refuses, not short for its own
        description="Train one model per pooling on the same data, backbone, seeds and budget, with two baselines, "
        "and write a report (report.md, report.json, report.png). Every other argument is a train.py argument "
        "(see train.py --help) and applies to every run.",
    )
    parser.add_argument(
        "--poolings",
        type=_comma_list,
        default=None,
        help=f"comma-separated poolings to compare (default: all registered: {', '.join(POOLINGS)}; "
        "with --resume, the earlier sweep's)",
    )
    parser.add_argument(
        "--baselines",
        type=_comma_list,
        default=None,
        help=f"comma-separated baselines to add, or 'none' (default: {','.join(BASELINES)}; with "
        "--resume, the earlier sweep's)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help=f"one run per pooling and seed (default: {DEFAULT_SEED}; with --resume, the earlier sweep's)",
    )
    parser.add_argument(
        "--report_dir",
        type=Path,
        required=True,
        help="where the report and the runs go. The report is rewritten after every run, so an "
        "interrupted sweep keeps the runs it finished. A folder that already holds a report is "
        "refused, unless --resume",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the sweep whose report is in --report_dir: the runs it records as finished "
        "are skipped, failed and missing ones run. Refused, before any run, if the data, the problem "
        "type or any train.py setting that changes results differs from the earlier sweep's. "
        "Poolings, baselines and seeds given are added to the earlier sweep's and run (none are "
        "dropped), and the report covers them all. Without a report in the folder, a new sweep starts",
    )
    parser.add_argument(
        "--keep_models",
        action="store_true",
        help="keep every run's trained model under report_dir/runs (default: only their results)",
    )
    return parser


def parse_sweep_arguments(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """The sweep's own options, and the train.py arguments every run gets (config file first, if any).

    ``poolings``, ``baselines`` and ``seeds`` are None when not given: the defaults, or with ``--resume`` the
    earlier sweep's, which only ``run_sweep`` reads.
    """
    options, train_arguments = _parser().parse_known_args(list(argv))
    registered = list(POOLINGS)
    options.poolings = options.poolings or None  # --poolings "" too
    unknown = [name for name in options.poolings or [] if name not in registered]
    if unknown:
        raise UsageError(f"Unknown pooling(s) {', '.join(unknown)}. Valid choices: {', '.join(registered)}.")
    options.baselines = [] if options.baselines == ["none"] else options.baselines
    unknown = [name for name in options.baselines or [] if name not in BASELINES]
    if unknown:
        raise UsageError(
            f"Unknown baseline(s) {', '.join(unknown)}. Valid choices: {', '.join(BASELINES)}, or none."
        )
    set_here = [arg for arg in train_arguments if arg.lstrip("-").split("=")[0] in SET_BY_THE_SWEEP]
    if set_here:
        raise UsageError(
            f"{', '.join(set_here)}: the sweep sets the pooling, seed and output folder of each run; "
            "use --poolings, --seeds and --report_dir."
        )
    if options.seeds and len(set(options.seeds)) != len(options.seeds):
        raise UsageError(f"--seeds has repeats: {options.seeds}.")
    return options, train_arguments
