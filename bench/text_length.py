"""Which text length train.py defaults to for a backbone whose sentence-transformers folder states a shorter one than
the backbone reads (all-MiniLM-L6-v2: 256 stated, 512 read): train.py's defaults at each length, on real tasks.

    python bench/text_length.py                                   # fortunes, package descriptions; 256 and 512
    python bench/text_length.py --corpora manpages --manpages-dir data/manpages
    python bench/text_length.py --table-only                      # the report from the runs already stored
    python bench/text_length.py --backbone mpnet --output bench/results/mpnet/text_length   # all-mpnet-base-v2

Every run is train.py as a user calls it on the packaged backbone (``--backbone minilm|mpnet|PATH``: another one, see
bench/backbones.py; a report folder holds one backbone's runs), with ``--num_train_epochs 2 --seed 0`` and
``--max_seq_length`` the length compared; nothing else is set. Accuracy is read from the run's ``all_results.json``,
and on the test rows longer than the shorter length from its ``predictions.jsonl`` (the rows the lengths treat
differently).

Cost is counted, not timed (the machine these ran on is shared): per training epoch, the tokens train.py's CPU batches
carry (padding-free: each row's tokens, cut at the length), the tokens padded batches carry (rows sorted by length
into batches of 16, train.py's batch size: what length-grouped batches on a GPU come near), and the sum of each row's
squared length (what attention's cost grows with). A corpus with no text longer than the shorter length gives both
runs the same tokens: it is not trained twice, and is reported as a tie.

* fortunes: ``bench/corpora/fortunes.py``, ``--per-class`` quotations per topic (80: 1,344 training rows; issue 48 ran
  about 2,700).
* descriptions: Debian package descriptions with the first paragraph of the long description
  (``bench/corpora/debtags.py``, ``long_description=True``), counted only: none is longer than 256 tokens.
* manpages: ``bench/corpora/manpages.py``'s files in ``--manpages-dir`` (built separately, branch doc-train:
  ``cd bench && python -m corpora.manpages /tmp/manpages``), counted only with ``--count-only manpages``.

The report (markdown and JSON, with the command) goes to ``--output`` (default ``bench/results/text_length/``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from backbones import MINILM, add_backbone_argument, backbone_name, resolve_backbone, train_py_model  # noqa: E402
from corpora.debtags import write_debtags  # noqa: E402
from corpora.fortunes import write_fortunes  # noqa: E402

PROGRAM = "bench/text_length.py"
# What train.py is given for --backbone minilm, as its users name it (the stored runs' commands); others by folder.
LENGTHS = (256, 512)
BATCH = 16  # train.py's per_device_train_batch_size
RESULTS = REPO / "bench" / "results" / "text_length"
SPLITS = ("train", "validation", "test")


def corpus_files(name: str, folder: Path, args: argparse.Namespace) -> tuple[dict[str, Path], str]:
    """The corpus's split files and its label column."""
    manpages = args.manpages_dir
    if name == "fortunes":
        return write_fortunes(folder, max_per_class=args.per_class, seed=0), "label"
    if name == "descriptions":
        return write_debtags(folder, long_description=True, seed=0), "labels"
    if manpages is None:
        sys.exit(
            "bench/text_length.py: --corpora manpages needs --manpages-dir (bench/corpora/manpages.py's output)"
        )
    import csv

    csv.field_size_limit(10**9)  # some pages are longer than csv's default field limit
    files = {split: next(manpages.glob(f"{split}.*")) for split in SPLITS}
    return files, "label"


def read_rows(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def token_lengths(files: dict[str, Path], backbone: str) -> dict[str, list[int]]:
    """Each split's texts' token counts, uncut, with the backbone's tokenizer (special tokens included)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_backbone(PROGRAM, backbone))
    tokenizer.model_max_length = 10**9  # counted uncut; nothing is run through the model here
    return {
        split: [len(ids) for ids in tokenizer([row["text"] for row in read_rows(path)])["input_ids"]]
        for split, path in files.items()
    }


def cost(lengths: list[int], length: int) -> dict[str, int]:
    """A training epoch's tokens at ``length``: padding-free, padded (length-sorted batches), squared."""
    cut = sorted(min(tokens, length) for tokens in lengths)
    padded = sum(
        max(cut[start : start + BATCH]) * len(cut[start : start + BATCH])
        for start in range(0, len(cut), BATCH)
    )
    return {
        "tokens": sum(cut),
        "padded_tokens": padded,
        "squared_tokens": sum(tokens * tokens for tokens in cut),
    }


def train(
    files: dict[str, Path], label_column: str, length: int, output: Path, backbone: str = MINILM
) -> tuple[list[str], dict]:
    """One train.py run at ``length``; its command and its results."""
    command = [
        "train.py",
        "--model_name_or_path",
        train_py_model(PROGRAM, backbone),
        *(argument for split in SPLITS for argument in (f"--{split}_file", str(files[split]))),
        "--label_column",
        label_column,
        "--do_train",
        "--num_train_epochs",
        "2",
        "--seed",
        "0",
        "--max_seq_length",
        str(length),
        "--output_dir",
        str(output),
    ]
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, *command], cwd=REPO, env=environment, check=True)
    results = json.loads((output / "all_results.json").read_text())
    predictions = [json.loads(line) for line in (output / "predictions.jsonl").read_text().splitlines()]
    return command, {
        "results": results,
        "predictions": [row["prediction"] == row["label"] for row in predictions],
    }


def measure(name: str, args: argparse.Namespace, folder: Path) -> dict:
    files, label_column = corpus_files(name, folder / name, args)
    lengths = token_lengths(files, args.backbone)
    shorter = min(LENGTHS)
    report = {
        "rows": {split: len(values) for split, values in lengths.items()},
        "longer_than": {
            str(length): {
                split: sum(tokens > length for tokens in values) for split, values in lengths.items()
            }
            for length in LENGTHS
        },
        "cost": {str(length): cost(lengths["train"], length) for length in LENGTHS},
        "runs": {},
    }
    if not any(tokens > shorter for values in lengths.values() for tokens in values):
        report["tie"] = f"no text longer than {shorter} tokens: every length gives the same tokens"
        return report
    if name in args.count_only:
        report["not_trained"] = (
            "counted only (--count-only): its runs take hours on the shared 2-core machine"
        )
        return report
    long_rows = [index for index, tokens in enumerate(lengths["test"]) if tokens > shorter]
    for length in LENGTHS:
        command, run = train(files, label_column, length, folder / f"{name}-{length}", args.backbone)
        correct = run["predictions"]
        report["runs"][str(length)] = {
            "command": shlex.join(["python", *command]),
            "test_accuracy": run["results"].get("test_accuracy"),
            "test_f1_macro": run["results"].get("test_f1_macro"),
            "long_test_rows": len(long_rows),
            "long_test_accuracy": sum(correct[index] for index in long_rows) / len(long_rows),
        }
    return report


def table(reports: dict[str, dict]) -> list[str]:
    lines = [
        "| corpus | length | train rows cut | test rows cut | test accuracy | test macro-F1 | accuracy on test rows "
        f"> {min(LENGTHS)} tokens | tokens / epoch (padding-free) | padded tokens / epoch | squared tokens / epoch |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, report in reports.items():
        base = report["cost"][str(min(LENGTHS))]
        for length in map(str, LENGTHS):
            run, spent = report["runs"].get(length), report["cost"][length]
            scores = (
                [
                    f"{run['test_accuracy']:.4f}",
                    f"{run['test_f1_macro']:.4f}",
                    f"{run['long_test_accuracy']:.4f} ({run['long_test_rows']} rows)",
                ]
                if run
                else ["tie: not trained" if "tie" in report else "not trained"] * 3
            )
            ratios = [
                f"{spent[key]:,} ({spent[key] / base[key]:.2f}x)"
                for key in ("tokens", "padded_tokens", "squared_tokens")
            ]
            cut = report["longer_than"][length]
            lines.append(
                f"| {name} | {length} | {cut['train']} / {report['rows']['train']} | "
                f"{cut['test']} / {report['rows']['test']} | " + " | ".join(scores + ratios) + " |"
            )
    return lines


def described(backbone: str) -> str:
    """The backbone as the report names it (the packaged all-MiniLM-L6-v2, as the stored report has it)."""
    return "the packaged all-MiniLM-L6-v2" if backbone == MINILM else backbone_name(backbone)


def write_report(
    reports: dict[str, dict], command: str, output: Path = RESULTS, backbone: str = MINILM
) -> None:
    output.mkdir(parents=True, exist_ok=True)
    # a MiniLM report stores no backbone: the reports stored before --backbone were MiniLM's, and read the same
    named = {} if backbone == MINILM else {"backbone": backbone}
    (output / "report.json").write_text(
        json.dumps({"command": command, **named, "corpora": reports}, indent=2) + "\n"
    )
    runs = [run["command"] for report in reports.values() for run in report["runs"].values()]
    lines = [
        f"Command: {command}",
        "",
        f"train.py's defaults on {described(backbone)} (2 epochs, seed 0), at each --max_seq_length. Cost is "
        "counted per training epoch, not timed (shared machine): see bench/text_length.py.",
        "",
        *table(reports),
        "",
        *[f"- {name}: {report['tie']}" for name, report in reports.items() if "tie" in report],
        *[
            f"- {name}: {report['not_trained']}"
            for name, report in reports.items()
            if "not_trained" in report
        ],
        "",
        "Runs:",
        *[f"- `{run}`" for run in runs],
    ]
    (output / "report.md").write_text("\n".join(lines) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpora",
        nargs="+",
        default=["fortunes", "descriptions"],
        choices=["fortunes", "descriptions", "manpages"],
    )
    parser.add_argument("--manpages-dir", type=Path, default=None)
    parser.add_argument(
        "--per-class",
        type=int,
        default=80,
        help="fortunes: quotations per topic (80: 1,344 training rows, 2 runs in about an hour on a loaded 2-core "
        "machine; 160 gives issue 48's 2,700)",
    )
    parser.add_argument(
        "--count-only",
        nargs="*",
        default=[],
        help="corpora whose rows and tokens are counted, without training (man pages: hours per run on 2 cores)",
    )
    parser.add_argument(
        "--table-only", action="store_true", help="rewrite report.md from the stored report.json"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=RESULTS,
        help=f"the report's folder (default {RESULTS.relative_to(REPO)})",
    )
    add_backbone_argument(parser)
    return parser


def stored_report(args: argparse.Namespace) -> dict:
    """The report stored in ``--output`` ({} when none), refused when another backbone's (its runs would mix)."""
    path = args.output / "report.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    backbone = stored.get("backbone", MINILM)  # a report stored before --backbone is MiniLM's
    if stored and not args.table_only and backbone != args.backbone:
        sys.exit(
            f"{PROGRAM}: {path} holds --backbone {backbone}'s runs, not {args.backbone}'s: give another --output."
        )
    if stored:
        args.backbone = backbone
    return stored


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stored = stored_report(args)
    reports = dict(stored.get("corpora", {}))
    command = stored.get("command", "")
    if not args.table_only:
        # the stored report may gather several invocations (man pages are built apart): each one's command is kept
        command = "; ".join(
            filter(
                None, [command, shlex.join(["python", PROGRAM, *(sys.argv[1:] if argv is None else argv)])]
            )
        )
        with tempfile.TemporaryDirectory() as folder:
            for name in args.corpora:
                reports[name] = measure(name, args, Path(folder))
                # after each corpus: an interrupted bench keeps what it measured
                write_report(reports, command, args.output, args.backbone)
    write_report(reports, command, args.output, args.backbone)
    print((args.output / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
