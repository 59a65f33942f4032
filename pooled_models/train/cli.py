"""The command line (``train.py``, ``pooled-train``, ``python -m pooled_models.train``): argv -> the arguments
(arguments/) -> the run's tasks (tasks.py) -> the pipeline; ``--demo DIR``; usage, data and disk errors reported in
one line. Nothing here makes transformers run code from a checkpoint or a config file: ``trust_remote_code`` and the
keys that name code are refused wherever they appear (arguments/parsing.py)."""

from __future__ import annotations

import errno
import logging
import sys
from collections.abc import Sequence

from transformers import TrainerCallback

from ..errors import UsageError
from .arguments import DEMO_FLAG, chosen_model_settings, help_command, parse_arguments, program
from .arguments.dependencies import implied_phase_lines
from .console import is_verbose, quiet_libraries, set_up_logging
from .disk_full import DiskFull
from .pipeline import ModelFactory, RunInterrupted, RunResult, run_tasks
from .tasks import task_specs

__all__ = ["main", "run", "RunResult"]

logger = logging.getLogger("pooled_models.train")

# The errors of a full disk or a file system that refuses writes (errno names, as OSError reports them).
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of train.py: runs, and reports usage and data errors without a traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0].split("=")[0] == DEMO_FLAG:
            write_demo_files(argv)
            return 0
        run(argv)
    except UsageError as error:
        print(f"{program()}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupted:
        # Ctrl-C: one line, as pooled-sweep says it; the lock and the staging folder were already put right.
        kept = (
            interrupted.kept if isinstance(interrupted, RunInterrupted) else "nothing was written"
        )  # before the lock
        print(f"{program()}: interrupted; {kept}.", file=sys.stderr)
        return 130  # the shell's status for Ctrl-C (128 + SIGINT)
    except DiskFull as error:  # a save that filled the disk, already put right (disk_full.py): its own line
        print(f"{program()}: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        if error.errno not in DISK_ERRORS:
            raise
        # A full disk or a read-only file system is the machine's state, not a bug: one line, and what to do.
        where = f" while writing {error.filename}" if error.filename else ""
        print(
            f"{program()}: error: {error.strerror}{where}. Free some space (or fix the file system) and run again; "
            "a run that kept a complete checkpoint continues with --resume_from_checkpoint true.",
            file=sys.stderr,
        )
        return 1
    return 0


def run(
    argv: list[str], callbacks: Sequence[TrainerCallback] = (), model_factory: ModelFactory | None = None
) -> RunResult:
    """Train and/or evaluate as ``argv`` says; ``callbacks`` are added to the Trainer's.

    ``model_factory`` replaces the pooled model of a run of one sequence task by another one, trained and evaluated
    the same way; such a run writes no model card (the card describes a pooling).
    """
    arguments = parse_arguments(argv)
    model_args, data_args, training_args = arguments
    set_up_logging(training_args)
    for line in implied_phase_lines(getattr(training_args, "implied_phases", {})):
        logger.info(line)
    specs = task_specs(data_args, chosen_model_settings(model_args))
    with quiet_libraries(is_verbose(training_args)):
        return run_tasks(arguments, specs, callbacks, model_factory)


def write_demo_files(argv: list[str]) -> None:
    """``--demo DIR`` (or ``--demo=DIR``): write the demo into DIR and say what to run next."""
    from .demo import demo_message, write_demo

    given = argv[0].partition("=")[2] if "=" in argv[0] else (argv[1] if len(argv) > 1 else None)
    rest = argv[1:] if "=" in argv[0] else argv[2:]
    if not given or given.startswith("-") or rest:
        raise UsageError(
            f"{DEMO_FLAG} takes one folder and nothing else, e.g. {program()} {DEMO_FLAG} quickstart"
        )
    configs = write_demo(given)
    print(demo_message(given, configs, help_command().removesuffix(" --help")))
