"""Multi-task benchmark: one all-MiniLM-L6-v2 shared by two real tasks, against two single-task models with the
same backbone and budget, and the task sampling strategies when one task has ten times the data of the other.

    python bench/multitask.py                  # the full run (make bench-multitask)
    python bench/multitask.py --quick          # 100 rows a task, one epoch: proves the pipeline, not the numbers
    python bench/multitask.py -- --learning_rate 5e-5   # other train.py settings, for every run
    python bench/multitask.py --backbone mpnet --output bench/results/mpnet/multitask   # all-mpnet-base-v2

``--backbone minilm|mpnet|PATH`` (bench/backbones.py) is the backbone every run trains (default minilm).

The two tasks, both from the package index a Debian machine holds (``apt-cache dumpavail``), on the same packages'
short descriptions:

* ``debtags``: which debtags describe a package (multi-label, 28 tags; bench/corpora/debtags.py), test micro-F1;
* ``mentions``: which words name the package's language or user-interface toolkit (token task, LANG / TOOLKIT; silver
  labels projected from the package's own implemented-in / devel::lang / uitoolkit debtags, see
  bench/corpora/debtags_mentions.py), test entity F1.

Part 1, sharing: each task with ``--rows`` training rows. ``separate`` is two train.py runs (one per task), ``shared``
one multi-task run (proportional sampling: one pass over each task's rows an epoch), so each task's head sees the
same rows the same number of times in both, and the optimizer takes the same total number of steps. Reported: each
task's test metric, the total training time (Trainer's train_runtime, added up) and the total parameters to keep.

Part 2, sampling: ``debtags`` with ``--rows`` training rows, ``mentions`` with a tenth of them, trained together with
each of ``proportional``, ``temperature`` (``--alpha``) and ``round_robin``, for the same number of steps (those
proportional takes for ``--epochs`` epochs: ``max_steps``), so the strategies differ only in which task a step
trains; the single-task runs on the same data are the reference.

Every run uses train.py's defaults otherwise (``--max_seq_length 64``: every description fits). The report
(markdown and JSON) goes to ``bench/results/multitask/`` (``--quick``: ``bench/results/multitask_quick/``).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from safetensors import safe_open

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from backbones import add_backbone_argument, backbone_name, train_py_model  # noqa: E402  (bench/: this folder)
from corpora.debtags import DebtagsMissing, write_debtags  # noqa: E402
from corpora.debtags_mentions import write_mentions  # noqa: E402

# What train.py is given for --backbone minilm, as its users name it (the stored runs' commands); others by folder.
SPLIT_FRACTIONS = (0.6, 0.2, 0.2)
# The metric each task is judged by: micro-F1 for the multi-label task, entity F1 for the token task.
METRICS = {"debtags": "f1_micro", "mentions": "f1"}
STRATEGIES = ("proportional", "temperature", "round_robin")


def write_data(folder: Path, rows: dict[str, int], seed: int) -> dict[str, dict[str, Path]]:
    """Both tasks' splits with ``rows[task]`` training rows (and a third of that each for validation and test)."""
    total = {task: math.ceil(count / SPLIT_FRACTIONS[0]) for task, count in rows.items()}
    try:
        return {
            "debtags": write_debtags(folder / "debtags", max_rows=total["debtags"], seed=seed),
            "mentions": write_mentions(folder / "mentions", max_rows=total["mentions"], seed=seed),
        }
    except DebtagsMissing as error:
        sys.exit(f"bench/multitask.py cannot run: {error}")


def task_settings(task: str, files: dict[str, Path]) -> dict:
    data = {f"{split}_file": str(path) for split, path in files.items()}
    # A subsample may leave a rare tag out of training: its evaluation rows are skipped rather than refused.
    data["skip_unseen_labels"] = True
    if task == "debtags":
        return {"kind": "sequence", "text_column": "text", "label_column": "labels", **data}
    return {"kind": "token", "words_column": "words", "tags_column": "tags", **data}


def common_flags(args: argparse.Namespace) -> list[str]:
    return [
        "--model_name_or_path", train_py_model("bench/multitask.py", args.backbone),
        "--do_train", "--do_eval", "--do_predict",
        "--max_seq_length", "64",
        "--num_train_epochs", str(args.epochs),
        "--seed", str(args.seed),
        "--save_strategy", "no", "--eval_strategy", "epoch",
        "--load_best_model_at_end", "false",
        "--report_to", "none",
        "--overwrite_output_dir",
    ]  # fmt: skip


def train(config: dict, output_dir: Path, flags: list[str], log: Path) -> dict:
    """One train.py run from ``config`` (a config file's settings) and ``flags``; returns its all_results.json."""
    config_file = output_dir.with_suffix(".yaml")
    config_file.write_text(yaml.safe_dump({**config, "output_dir": str(output_dir)}))
    command = [sys.executable, str(REPO / "train.py"), str(config_file), *flags]
    started = time.perf_counter()
    with log.open("a") as handle:
        handle.write(f"\n$ {' '.join(command)}\n")
        handle.flush()
        result = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO)
    if result.returncode != 0:
        sys.exit(f"bench/multitask.py: a train.py run failed ({output_dir.name}); see {log}")
    results = json.loads((output_dir / "all_results.json").read_text())
    results["wall_seconds"] = time.perf_counter() - started
    state = output_dir / "trainer_state.json"
    results["global_step"] = json.loads(state.read_text())["global_step"] if state.exists() else None
    results["parameters"] = count_parameters(output_dir)
    return results


def count_parameters(folder: Path) -> int:
    total = 0
    for path in folder.glob("*.safetensors"):
        with safe_open(str(path), "pt") as weights:
            for key in weights.keys():  # noqa: SIM118  (safe_open has no iterator)
                total += math.prod(weights.get_slice(key).get_shape())
    return total


def test_metric(results: dict, task: str, multitask: bool) -> float | None:
    metric = METRICS[task]
    keys = [f"test_{task}_{metric}"] if multitask else [f"test_{metric}", f"test_tokens_{metric}"]
    return next((results[key] for key in keys if key in results), None)


def separate_runs(data, work: Path, flags: list[str], log: Path) -> dict[str, dict]:
    """Each task alone: the multi-label task as a plain train.py run, the token task as a token run."""
    runs = {}
    for task, files in data.items():
        settings = task_settings(task, files)
        settings.pop("kind")
        runs[task] = train(settings, work / f"separate_{task}", flags, log)
    return runs


def shared_run(data, work: Path, name: str, flags: list[str], log: Path, **settings) -> dict:
    tasks = {task: task_settings(task, files) for task, files in data.items()}
    return train({"tasks": tasks, **settings}, work / name, flags, log)


def steps_of(results: dict) -> int:
    if results.get("global_step"):
        return int(results["global_step"])
    return round(results["train_runtime"] * results["train_steps_per_second"])


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def report(parts: dict, args: argparse.Namespace) -> str:
    lines = [
        "# Multi-task benchmark (bench/multitask.py)",
        "",
        f"Backbone {backbone_name(args.backbone).split('/')[-1]}; {args.epochs} epoch(s), seed {args.seed}, data seed {args.data_seed}; "
        f"command: `python bench/multitask.py {' '.join(sys.argv[1:])}`.",
        "",
        f"## Sharing: each task with {args.rows} training rows",
        "",
        "| models | debtags micro-F1 | mentions entity F1 | training time (s) | parameters |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, row in parts["sharing"].items():
        lines.append(
            f"| {name} | {fmt(row['debtags'])} | {fmt(row['mentions'])} | {row['train_seconds']:.0f} | "
            f"{row['parameters']:,} |"
        )
    lines += [
        "",
        f"## Sampling: debtags {args.rows} training rows, mentions {max(1, args.rows // 10)}",
        "",
        "| run | debtags micro-F1 | mentions entity F1 | training time (s) | steps |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, row in parts["sampling"].items():
        lines.append(
            f"| {name} | {fmt(row['debtags'])} | {fmt(row['mentions'])} | {row['train_seconds']:.0f} | "
            f"{row['steps']} |"
        )
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rows", type=int, default=2000, help="Training rows of each task (part 2: of debtags)."
    )
    parser.add_argument("--epochs", type=float, default=3, help="Epochs of every run.")
    parser.add_argument("--alpha", type=float, default=0.5, help="The temperature strategy's sampling_alpha.")
    parser.add_argument("--seed", type=int, default=42, help="Training seed.")
    parser.add_argument("--data-seed", type=int, default=0, help="Seed of the subsampling and the splits.")
    parser.add_argument(
        "--quick", action="store_true", help="100 rows, one epoch: a check that everything runs."
    )
    parser.add_argument(
        "--output", type=Path, help="Report folder (default bench/results/multitask[_quick])."
    )
    parser.add_argument("train_args", nargs="*", help="After --: more train.py flags for every run.")
    add_backbone_argument(parser)
    return parser


def main() -> int:
    args = build_parser().parse_args()
    if args.quick:
        args.rows, args.epochs = 100, 1
    output = args.output or REPO / "bench" / "results" / ("multitask_quick" if args.quick else "multitask")
    output.mkdir(parents=True, exist_ok=True)
    log = output / "train.log"
    log.write_text("")
    flags = common_flags(args) + list(args.train_args)
    parts: dict[str, dict] = {"sharing": {}, "sampling": {}}
    with tempfile.TemporaryDirectory(prefix="bench-multitask-") as temporary:
        work = Path(temporary)
        # Part 1: the same rows for both tasks, separate models against one shared model.
        data = write_data(work / "equal", {"debtags": args.rows, "mentions": args.rows}, args.data_seed)
        separate = separate_runs(data, work, flags, log)
        parts["sharing"]["separate (2 models)"] = {
            **{task: test_metric(separate[task], task, False) for task in data},
            "train_seconds": sum(run["train_runtime"] for run in separate.values()),
            "parameters": sum(run["parameters"] for run in separate.values()),
        }
        shared = shared_run(data, work, "shared", flags, log, task_sampling="proportional")
        parts["sharing"]["shared (1 model, proportional)"] = {
            **{task: test_metric(shared, task, True) for task in data},
            "train_seconds": shared["train_runtime"],
            "parameters": shared["parameters"],
        }
        # Part 2: one task with a tenth of the other's rows; every strategy gets proportional's number of steps.
        small = max(1, args.rows // 10)
        data = write_data(work / "skewed", {"debtags": args.rows, "mentions": small}, args.data_seed)
        separate = separate_runs(data, work / "skewed", flags, log)
        parts["sampling"]["separate (2 models)"] = {
            **{task: test_metric(separate[task], task, False) for task in data},
            "train_seconds": sum(run["train_runtime"] for run in separate.values()),
            "steps": sum(steps_of(run) for run in separate.values()),
        }
        budget = None
        for strategy in STRATEGIES:
            extra = ["--max_steps", str(budget)] if budget else []
            settings = {"task_sampling": strategy}
            if strategy == "temperature":
                settings["sampling_alpha"] = args.alpha
            run = shared_run(data, work / "skewed", f"shared_{strategy}", flags + extra, log, **settings)
            budget = budget or steps_of(run)
            name = f"shared, {strategy}" + (f" (alpha {args.alpha})" if strategy == "temperature" else "")
            parts["sampling"][name] = {
                **{task: test_metric(run, task, True) for task in data},
                "train_seconds": run["train_runtime"],
                "steps": steps_of(run),
            }
    (output / "results.json").write_text(json.dumps(parts, indent=2) + "\n")
    text = report(parts, args)
    (output / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
