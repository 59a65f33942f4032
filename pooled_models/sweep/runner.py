"""Which pooling for my data? Train one model per pooling on the same data, backbone, seeds and budget, plus the
two baselines, and write a report (:mod:`pooled_models.sweep_report`).

    python sweep.py configs/quickstart.yaml --poolings mean,cls,attention --seeds 0 1 2 --report_dir report
    python sweep.py --model_name_or_path ... --train_file ... --validation_file ... --report_dir report

Everything that is not a sweep option is a train.py argument and applies to every run. Each run is a train.py
run in this process, with ``--pooling``, ``--seed`` and ``--output_dir`` set by the sweep; a run that fails is
reported with its error and the others go on. The command line is ``command_line.py``'s, one run ``one_run.py``'s;
this module plans the runs, resumes, and reports.

Nothing finished is lost. The report is rewritten after every run, each file replaced atomically
(:mod:`pooled_models.sweep_records`), so an interrupted sweep (Ctrl-C, SIGTERM, a kill) leaves a complete report of
the runs it finished. Ctrl-C stops the sweep with exit status 130 and prints the finished runs, the report and the
command that continues it:

    python sweep.py configs/quickstart.yaml --poolings mean,cls,attention --seeds 0 1 2 --report_dir report --resume

``--resume`` skips the runs report.json records as finished, and runs the failed and missing ones; poolings,
baselines and seeds given are added to the earlier sweep's (and default to them). Only report.json says what is
finished, never a folder under report_dir/runs: an interrupted run removes its folders, and a run that is not
recorded runs again and replaces whatever a kill left. A resumed sweep whose runs would not be comparable with the
finished ones (another problem type, main metric, data file contents or train.py setting) is refused before any
run, with the settings that differ; without ``--resume``, a folder that holds a report is refused, not overwritten.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..modeling.registry import POOLINGS
from ..train.arguments import parse_arguments
from ..train.console import is_verbose, quiet_libraries, set_up_logging
from ..train.evaluation import BEST_MODEL_METRIC
from .command_line import BASELINES, DEFAULT_SEED, _command, _program, parse_sweep_arguments
from .one_run import _run_arguments, run_one
from .records import (
    REPORT_FILES,
    RunRecord,
    Sweep,
    existing_report_files,
    setting_differences,
    shared_settings,
)
from .report import write_report

__all__ = [
    "BASELINES",
    "RunRecord",
    "Sweep",
    "SweepInterrupted",
    "parse_sweep_arguments",
    "run_sweep",
    "main",
]


def _check_data(train_arguments: list[str], report_dir: Path) -> tuple[str, str, dict[str, Any]]:
    """Check the data once, before any run, and return the problem type, the metric the sweep ranks by (train.py's
    best-model metric, on the test split when it is labelled, else on validation) and the settings all runs share."""
    from ..train.data.sequence import prepare_splits
    from ..train.plan import needed_splits

    model_args, data_args, training_args = parse_arguments(
        _run_arguments(train_arguments, None, DEFAULT_SEED, report_dir / "runs" / "check")
    )
    set_up_logging(training_args)  # as every run sets it: quiet, unless --log_level info
    if not training_args.do_eval:
        raise UsageError("The sweep compares runs on validation data: set do_eval (and a validation split).")
    with quiet_libraries(is_verbose(training_args)):
        splits, labels = prepare_splits(
            data_args, needed_splits(training_args), cache_dir=model_args.cache_dir
        )
    split = "test" if "test" in splits and splits["test"].labelled else "eval"
    metric = f"{split}_{BEST_MODEL_METRIC[labels.problem_type][0]}"
    return labels.problem_type, metric, shared_settings(model_args, data_args, training_args)


def _verbose(train_arguments: list[str], report_dir: Path) -> bool:
    """Whether the runs print everything (``--log_level info`` among the train.py arguments)."""
    _, _, training_args = parse_arguments(
        _run_arguments(train_arguments, None, DEFAULT_SEED, report_dir / "runs" / "check")
    )
    return is_verbose(training_args)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep's run. ``sweep`` holds the runs finished before it, which the report in ``report_dir``
    already shows; ``run`` is the interrupted one, e.g. "pooling cls, seed 1"."""

    def __init__(self, sweep: Sweep, run: str, report_dir: Path):
        super().__init__(run)
        self.sweep, self.run, self.report_dir = sweep, run, report_dir


def _earlier_sweep(report_dir: Path, resume: bool) -> Sweep | None:
    """The sweep whose report is in ``report_dir``, to resume; None when there is none. A report is never
    overwritten: without ``resume``, one in the folder is refused."""
    existing = existing_report_files(report_dir)
    if not existing:
        return None
    names = ", ".join(path.name for path in existing)
    if not resume:
        raise UsageError(
            f"{report_dir} already holds a sweep's report ({names}), which sweep.py does not overwrite. "
            "Pass --resume to continue that sweep (its finished runs are skipped), or choose another "
            "--report_dir."
        )
    path = report_dir / "report.json"
    if not path.exists():
        raise UsageError(
            f"--resume: {report_dir} holds {names} but no report.json, which records the finished runs. "
            "Choose another --report_dir."
        )
    try:
        earlier = Sweep.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise UsageError(
            f"--resume: {path} cannot be read ({error}). Choose another --report_dir."
        ) from error
    if not earlier.settings:
        raise UsageError(
            f"--resume: {path} was written by an earlier sweep.py, which did not record the settings of "
            "its runs, so whether new runs would be comparable cannot be checked. Choose another "
            "--report_dir."
        )
    return earlier


def _union(first: Sequence[Any], second: Sequence[Any]) -> list[Any]:
    return list(dict.fromkeys([*first, *second]))


def _names_and_seeds(options: argparse.Namespace, earlier: Sweep | None) -> tuple[list[str], list[int]]:
    """The poolings and baselines (in that order), and the seeds, of the sweep to run. Resuming, the command's are
    added to the earlier sweep's, so that its runs are all finished and none is dropped from the report."""
    if earlier is None:
        poolings = options.poolings or list(POOLINGS)
        baselines = list(BASELINES) if options.baselines is None else options.baselines
        return [*poolings, *baselines], options.seeds or [DEFAULT_SEED]
    poolings = _union([name for name in earlier.names if _kind(name) == "pooling"], options.poolings or [])
    baselines = _union([name for name in earlier.names if _kind(name) == "baseline"], options.baselines or [])
    return [*poolings, *baselines], _union(earlier.seeds, options.seeds or [])


def _new_sweep(options: argparse.Namespace, train_arguments: list[str], earlier: Sweep | None) -> Sweep:
    """The sweep to run, with the earlier sweep's records when resuming."""
    problem_type, metric, settings = _check_data(train_arguments, options.report_dir)
    names, seeds = _names_and_seeds(options, earlier)
    return Sweep(
        problem_type=problem_type,
        metric=metric,
        greater_is_better=BEST_MODEL_METRIC[problem_type][1],
        names=names,
        seeds=seeds,
        train_arguments=list(train_arguments),
        settings=settings,
        records=list(earlier.records) if earlier else [],
    )


def _refuse_incomparable(earlier: Sweep, sweep: Sweep, report_dir: Path) -> None:
    """Runs of the resumed sweep must be comparable with the finished ones: same problem, metric and settings."""
    differences = [
        f"{what} was {before}, now {now}"
        for what, before, now in (
            ("the problem type", earlier.problem_type, sweep.problem_type),
            ("the main metric", earlier.metric, sweep.metric),
        )
        if before != now
    ]
    differences += setting_differences(earlier.settings, sweep.settings)
    if differences:
        raise UsageError(
            f"--resume: the sweep in {report_dir} was made with other settings, and new runs would not be comparable "
            "with its finished ones:\n  "
            + "\n  ".join(differences)
            + "\nIts train.py arguments were: "
            + (shlex.join(earlier.train_arguments) or "(none)")
            + "\nResume with the same settings, or choose "
            "another --report_dir for a new sweep."
        )


def _finished(sweep: Sweep) -> set[tuple[str, int]]:
    """The runs a resumed sweep skips: the ones its report records as successful (a failed run runs again)."""
    return {(record.name, record.seed) for record in sweep.records if record.status == "ok"}


def _kind(name: str) -> str:
    return "baseline" if name in BASELINES else "pooling"


def _plan(sweep: Sweep) -> list[tuple[str, int]]:
    """Every run of the sweep, ``(name, seed)``, in the order they run: all poolings and baselines, seed by seed."""
    return [(name, seed) for seed in sweep.seeds for name in sweep.names]


def _with_record(sweep: Sweep, record: RunRecord) -> Sweep:
    """The sweep with ``record`` added, in place of an earlier record of the same run."""
    records = [old for old in sweep.records if (old.name, old.seed) != (record.name, record.seed)]
    return replace(sweep, records=[*records, record])


def _outcome(record: RunRecord, metric: str) -> str:
    if record.status == "failed":
        return f"FAILED: {record.error}"
    value = record.metrics.get(metric)
    return f"{metric} {value:.4f}" if isinstance(value, float) else f"no {metric}"


def run_sweep(options: argparse.Namespace, train_arguments: list[str]) -> Sweep:
    """Run the sweep; the report in ``options.report_dir`` is rewritten after every run, so an interrupted sweep
    keeps the runs it finished (Ctrl-C raises :class:`SweepInterrupted`, which says which)."""

    earlier = _earlier_sweep(options.report_dir, options.resume)
    sweep = _new_sweep(options, train_arguments, earlier)
    if earlier is not None:
        _refuse_incomparable(earlier, sweep, options.report_dir)
    runs_dir = options.report_dir / "runs"
    verbose = _verbose(train_arguments, options.report_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    plan, finished = _plan(sweep), _finished(sweep)
    if earlier is not None:
        print(
            f"[sweep] resuming the sweep in {options.report_dir}: {len(finished)} of {len(plan)} runs done, "
            "the others run now",
            flush=True,
        )
    run = "the first run"
    try:
        for index, (name, seed) in enumerate(plan, 1):
            if (name, seed) in finished:
                continue
            run = f"{_kind(name)} {name}, seed {seed}"
            print(f"[sweep {index}/{len(plan)}] {run} ...", flush=True)
            record = run_one(
                name, _kind(name), seed, train_arguments, runs_dir, options.keep_models, verbose=verbose
            )
            updated = _with_record(sweep, record)
            write_report(updated, options.report_dir)
            sweep = (
                updated  # only once its report is written: the runs an interruption reports are the report's
            )
            print(
                f"[sweep {index}/{len(plan)}] {run}: {_outcome(record, sweep.metric)} ({record.seconds:.0f} s)",
                flush=True,
            )
    except KeyboardInterrupt as interrupt:
        raise SweepInterrupted(sweep, run, options.report_dir) from interrupt
    finally:
        _remove_if_empty(runs_dir)
    return sweep


def _remove_if_empty(folder: Path) -> None:
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def _report_paths(folder: Path) -> list[Path]:
    return [folder / name for name in REPORT_FILES]


def _interrupted_message(interrupted: KeyboardInterrupt, argv: list[str]) -> str:
    """What Ctrl-C leaves: the runs finished (in the report) and the command that continues the sweep."""
    if not isinstance(interrupted, SweepInterrupted):  # while the arguments and data were checked
        lines = [f"{_program()}: interrupted before the first run; nothing was written."]
    elif interrupted.sweep.records:
        records = interrupted.sweep.records
        finished = [
            f"{record.name} seed {record.seed}" + (" (failed)" if record.status == "failed" else "")
            for record in records
        ]
        lines = [
            f"{_program()}: interrupted during {interrupted.run}.",
            f"Finished runs ({len(records)}): {', '.join(finished)}.",
            "Their report: " + ", ".join(map(str, _report_paths(interrupted.report_dir))),
        ]
    else:
        lines = [
            f"{_program()}: interrupted during {interrupted.run}.",
            "No run had finished; nothing was written.",
        ]
    resume = [] if "--resume" in argv else ["--resume"]
    lines.append(
        "To continue (successful runs are skipped, failed ones run again): "
        + shlex.join([*_command(), *argv, *resume])
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        options, train_arguments = parse_sweep_arguments(argv)
        sweep = run_sweep(options, train_arguments)
    except UsageError as error:
        print(f"{_program()}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupted:
        print(_interrupted_message(interrupted, argv), file=sys.stderr)
        return 130  # the shell's status for Ctrl-C (128 + SIGINT)
    print((options.report_dir / "report.md").read_text())
    print("Report: " + ", ".join(map(str, _report_paths(options.report_dir))))
    return 0 if any(record.status == "ok" for record in sweep.records) else 1
