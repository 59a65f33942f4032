"""What ``python train.py`` does: parse the arguments into run settings and a list of task specs, and hand them to
the one pipeline (:mod:`pooled_models.train.pipeline`); report usage, data and disk errors in one line."""

from __future__ import annotations

import errno
import logging
import sys
from collections.abc import Sequence

import transformers
from transformers import TrainerCallback

from .arguments import parse_arguments, pooled_config_kwargs
from .errors import UsageError, program_name
from .pipeline import ModelFactory, RunResult, needed_splits, run_specs
from .task_specs import task_specs

__all__ = ["RunResult", "run", "main", "needed_splits"]

# The errors of a full disk or a file system that refuses writes (errno names, as OSError reports them).
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of train.py: runs, and reports usage and data errors without a traceback."""
    try:
        run(list(sys.argv[1:] if argv is None else argv))
    except UsageError as error:
        print(f"{_program()}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        if error.errno not in DISK_ERRORS:
            raise
        # A full disk or a read-only file system is the machine's state, not a bug: one line, and what to do.
        where = f" while writing {error.filename}" if error.filename else ""
        print(
            f"{_program()}: error: {error.strerror}{where}. Free some space (or fix the file system) and run again; "
            "a run that kept a complete checkpoint continues with --resume_from_checkpoint true.",
            file=sys.stderr,
        )
        return 1
    return 0


def run(
    argv: list[str], callbacks: Sequence[TrainerCallback] = (), model_factory: ModelFactory | None = None
) -> RunResult:
    """Train and/or evaluate as ``argv`` says; ``callbacks`` are added to the Trainer's.

    ``model_factory`` replaces the pooled model by another one, trained and evaluated the same way; such a run
    writes no model card (the card describes a pooling).
    """
    model_args, data_args, training_args = parse_arguments(argv)
    _set_up_logging(training_args)
    specs = task_specs(data_args, pooled_config_kwargs(model_args))
    return run_specs(model_args, data_args, training_args, specs, callbacks, model_factory)


def _program() -> str:
    return program_name("train.py", "pooled-train", "pooled_models.train")


def _set_up_logging(training_args) -> None:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    level = training_args.get_process_log_level()
    logging.getLogger("pooled_models").setLevel(logging.INFO if training_args.should_log else level)
    transformers.utils.logging.set_verbosity(level)
