"""One run of the sweep: train.py (or a baseline) in this process with the pooling, seed and output folder the
sweep sets, its metrics recorded; a run that fails is recorded with its error, and no folder of an interrupted run
is left to look like a result."""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

from ..train.console import quiet_libraries
from .baselines import logistic_regression_baseline, vanilla_model
from .records import RunRecord

__all__ = ["run_one"]

logger = logging.getLogger("pooled_models.sweep")


def _run_arguments(train_arguments: list[str], pooling: str | None, seed: int, output_dir: Path) -> list[str]:
    # Flags after a config file override it, so the sweep's own come last. Every run trains; the sweep compares
    # runs on validation (and test, when there is one), and keeps no checkpoints.
    arguments = [
        *train_arguments,
        "--seed",
        str(seed),
        "--output_dir",
        str(output_dir),
        "--overwrite_output_dir",
        "--do_train",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
    ]
    return arguments + (["--pooling", pooling] if pooling else [])


def _describe(error: BaseException) -> str:
    if isinstance(error, SystemExit):  # argparse prints its message to stderr and exits
        return f"train.py rejected the arguments (exit status {error.code}; its message is in the log above)"
    message = " ".join(str(error).split())
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def run_one(
    name: str,
    kind: str,
    seed: int,
    train_arguments: list[str],
    runs_dir: Path,
    keep_model: bool,
    verbose: bool = False,
) -> RunRecord:
    """One run; any error is caught and recorded, so the sweep goes on. Unless ``verbose``, the run's own summary
    (what it read and built, where its model went) is left out: the sweep says how each run went, in one line."""
    from ..train.cli import run

    @contextlib.contextmanager
    def quiet():
        if verbose:
            yield
            return
        with contextlib.redirect_stdout(io.StringIO()), quiet_libraries(verbose):
            yield

    record = RunRecord(name=name, kind=kind, seed=seed)
    output_dir = runs_dir / f"{name}-seed{seed}"
    pooling = name if kind == "pooling" else None
    arguments = _run_arguments(train_arguments, pooling, seed, output_dir)
    start = time.perf_counter()
    try:
        if name == "logistic_regression":
            with quiet():
                metrics = logistic_regression_baseline(arguments)
            record.parameters = metrics.pop("parameters")
        else:
            with quiet():
                result = run(arguments, model_factory=vanilla_model if name == "vanilla" else None)
            metrics, record.parameters = result.metrics, result.parameters
        record.metrics = {key: value for key, value in metrics.items() if _is_number_or_list(value)}
    except KeyboardInterrupt:
        # An interrupted run has no result, so none of its folders may stay and look like one.
        _tidy_run_folders(output_dir, keep_model=False)
        raise
    except BaseException as error:  # noqa: BLE001 - a failed run is a result of the sweep, not its end
        record.status, record.error = "failed", _describe(error)
        logger.debug("%s seed %d failed:\n%s", name, seed, traceback.format_exc())
    record.seconds = time.perf_counter() - start
    _tidy_run_folders(output_dir, keep_model)
    return record


def _tidy_run_folders(output_dir: Path, keep_model: bool) -> None:
    """Remove the run's model unless it is kept, and the ``.incomplete`` folder a failed train.py run can leave."""
    if not keep_model:
        shutil.rmtree(output_dir, ignore_errors=True)
    shutil.rmtree(output_dir.with_name(output_dir.name + ".incomplete"), ignore_errors=True)


def _is_number_or_list(value: Any) -> bool:
    return isinstance(value, (int, float, list)) and not isinstance(value, bool)
