"""Long documents (issue 46): does reading the whole text beat cutting it, on a real corpus of long texts?

    python bench/long_documents.py                                   # every arm, 3 seeds, the stored report
    python bench/long_documents.py --arms cut "document, mean" --seeds 0
    python bench/long_documents.py --timing-only                     # time and memory per document alone

The corpus: Debian's manual pages by section (bench/corpora/manpages.py: each page's DESCRIPTION, six sections
named in words, ``--per-section`` pages each, split 60/20/20 with the data seed), or with ``--corpus kernel-docs`` the
Linux kernel's documentation by top-level folder (bench/corpora/kernel_docs.py, ``--per-section`` pages a folder at
most, from Debian's linux-doc-6.1 package; ``--doc-dir`` where it is unpacked). A document is *long* when it has
more than ``--window`` tokens with the backbone's special tokens, so the cut model never reads all of it.

The arms, each trained by train.py as a user calls it (the packaged all-MiniLM-L6-v2, train.py's defaults, the same
epochs, batch size and seeds; only the flags in ``ARM_FLAGS`` differ), then scored on the test split:

* ``tf-idf + logistic regression``: scikit-learn on the whole text (word 1-2 grams, C chosen on validation);
* ``tf-idf + logistic regression, cut``: the same on texts cut at ``--window`` tokens: what the words past the window
  are worth to a classifier of words;
* ``minilm vectors + logistic regression, first window / mean of windows / first and mean``: the pretrained
  backbone's window vectors, not fine-tuned (bench/long_documents_vectors.py): whether the backbone's own vectors
  carry the label past the first window, whatever the training recipe;
* ``cut``: today's model, the text cut at ``--window`` tokens (``--max_seq_length``);
* ``cut at twice the window``: the same model reading twice as many tokens in one window: whether the model uses the
  words past the window when it can read them at all;
* ``head+tail``: the text cut by hand before train.py reads it, its first quarter of ``--window`` tokens and its last
  three quarters kept (Sun et al. 2019's best head+tail split at 512, scaled), as a user without document mode would;
* ``document, <pooling>``: document mode (``--document_mode true --document_window W``), every window read, with
  each cross-window pooling (mean, max, attention, transformer, first_plus_rest).

Accuracy and macro-F1 overall and on the long and short documents, mean and standard deviation over seeds. The
timing part (``--timing``, or alone with ``--timing-only``: bench/long_documents_timing.py) measures one document's
prediction time and peak memory against its number of windows, and a training step's peak memory at a fixed window
budget. Timings need a quiet machine: on a shared one, run ``--timing-only`` again later.
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from backbones import MINILM, add_backbone_argument, backbone_name, resolve_backbone  # noqa: E402
from corpora.kernel_docs import DOC_DIR, write_kernel_docs  # noqa: E402  (bench/ is this script's folder)
from corpora.manpages import write_manpages  # noqa: E402
from long_documents_vectors import VECTOR_ARMS, chosen_logistic_regression, run_vectors  # noqa: E402

csv.field_size_limit(sys.maxsize)  # a manual page's description can run past csv's 131,072 characters

TFIDF, CUT, HEAD_TAIL = "tf-idf + logistic regression", "cut", "head+tail"
TFIDF_CUT, CUT_TWICE = "tf-idf + logistic regression, cut", "cut at twice the window"
DOCUMENT_POOLINGS = ("mean", "max", "attention", "transformer", "first_plus_rest")
DOCUMENT_ARMS = tuple(f"document, {pooling}" for pooling in DOCUMENT_POOLINGS)
ARMS = (TFIDF, TFIDF_CUT, *VECTOR_ARMS, CUT, CUT_TWICE, HEAD_TAIL, *DOCUMENT_ARMS)
UNSEEDED = (TFIDF, TFIDF_CUT, *VECTOR_ARMS)  # no seed changes logistic regression on fixed features
SPLITS = ("train", "validation", "test")
# The settings under which arms of several invocations go into one table.
SAME_CORPUS_AND_TRAINING = (
    "corpus", "window", "epochs", "batch_size", "per_section", "data_seed", "document_gate_learning_rate", "backbone"
)  # fmt: skip
# What a report stored before a setting existed ran with.
SETTINGS_BEFORE_THEY_EXISTED = {
    "corpus": "manpages",
    "document_gate_learning_rate": "None",
    "backbone": MINILM,
}
CORPORA = {
    "manpages": "Debian manual pages by section",
    "kernel-docs": "the Linux kernel's documentation by folder",
}


def backbone_path(args) -> str:
    """The folder of the run's ``--backbone`` (MiniLM for a caller that names none)."""
    return resolve_backbone("bench/long_documents.py", getattr(args, "backbone", MINILM))


def backbone_of(report: dict) -> str:
    return report["settings"].get("backbone", SETTINGS_BEFORE_THEY_EXISTED["backbone"])


def shown_arm(arm: str, backbone: str) -> str:
    """An arm's name in a report: the vector arms name the backbone whose vectors they read."""
    return (
        arm
        if backbone == MINILM
        else arm.replace("minilm vectors", f"{backbone_name(backbone).split('/')[-1]} vectors")
    )


def arm_flags(arm: str, window: int, gate_learning_rate: float | None = None) -> list[str]:
    """The train.py flags of an arm beyond the shared ones (``gate_learning_rate``: first_plus_rest's gate, train.py's
    default where None)."""
    if arm in (CUT, HEAD_TAIL):
        return ["--document_mode", "false", "--max_seq_length", str(window)]
    if arm == CUT_TWICE:
        return ["--document_mode", "false", "--max_seq_length", str(2 * window)]
    pooling = arm.removeprefix("document, ")
    gate = [] if gate_learning_rate is None or pooling != "first_plus_rest" else [
        "--document_gate_learning_rate", str(gate_learning_rate)
    ]  # fmt: skip
    return [
        "--document_mode", "true", "--max_seq_length", str(window),
        "--document_window", str(window), "--document_pooling", pooling, *gate,
    ]  # fmt: skip


def read_rows(folder: Path) -> dict[str, list[dict[str, str]]]:
    rows = {}
    for split in SPLITS:
        with (folder / f"{split}.csv").open(newline="", encoding="utf-8") as handle:
            rows[split] = list(csv.DictReader(handle))
    return rows


def write_rows(folder: Path, rows: dict[str, list[dict[str, str]]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split, split_rows in rows.items():
        with (folder / f"{split}.csv").open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=["text", "label"])
            writer.writeheader()
            writer.writerows({"text": row["text"], "label": row["label"]} for row in split_rows)


def token_counts(texts: list[str], tokenizer) -> list[int]:
    """Each text's length in tokens with the special tokens, as a window counts them."""
    return [len(ids) for ids in tokenizer(texts, truncation=False, verbose=False)["input_ids"]]


def head_only(text: str, tokenizer, window: int) -> str:
    """The text's first window of tokens (special tokens aside), as text."""
    ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    room = window - tokenizer.num_special_tokens_to_add()
    return text if len(ids) <= room else tokenizer.decode(ids[:room])


def head_and_tail(text: str, tokenizer, window: int) -> str:
    """The text's first quarter of a window's tokens and the last three quarters (special tokens aside), as text."""
    ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    room = window - tokenizer.num_special_tokens_to_add()
    if len(ids) <= room:
        return text
    head = room // 4
    return tokenizer.decode(ids[:head]) + " " + tokenizer.decode(ids[len(ids) - (room - head) :])


def scores(gold: list[str], predicted: list[str], long: list[bool]) -> dict[str, float]:
    """Accuracy and macro-F1 on every test document, the long ones and the short ones."""
    from sklearn.metrics import accuracy_score, f1_score

    result = {}
    for part, keep in (("all", [True] * len(gold)), ("long", long), ("short", [not flag for flag in long])):
        g = [label for label, kept in zip(gold, keep, strict=True) if kept]
        p = [label for label, kept in zip(predicted, keep, strict=True) if kept]
        result[f"{part}_accuracy"] = accuracy_score(g, p)
        result[f"{part}_f1_macro"] = f1_score(
            g, p, average="macro", labels=sorted(set(gold)), zero_division=0
        )
    return result


def run_tfidf(rows) -> list[str]:
    """TF-IDF (word 1-2 grams, sublinear counts) and logistic regression on the whole text, C chosen on validation."""
    vectorizer, model = fit_tfidf(rows)
    return list(model.predict(vectorizer.transform([row["text"] for row in rows["test"]])))


def fit_tfidf(rows):
    """The TF-IDF vectorizer and the logistic regression (C chosen on validation accuracy) fitted on the training
    split."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    train = vectorizer.fit_transform([row["text"] for row in rows["train"]])
    validation = vectorizer.transform([row["text"] for row in rows["validation"]])
    model = chosen_logistic_regression(
        train,
        [row["label"] for row in rows["train"]],
        validation,
        [row["label"] for row in rows["validation"]],
    )
    return vectorizer, model


def run_train_py(data: Path, output_dir: Path, seed: int, flags: list[str], args) -> tuple[list[str], dict]:
    """train.py on ``data`` as a user runs it; the test predictions (input order) and the run's metrics."""
    from pooled_models.train.cli import run as train_py

    argv = [
        "--model_name_or_path", backbone_path(args),
        "--train_file", str(data / "train.csv"),
        "--validation_file", str(data / "validation.csv"),
        "--test_file", str(data / "test.csv"),
        "--output_dir", str(output_dir),
        "--do_train", "--do_predict",
        "--num_train_epochs", str(args.epochs),
        "--per_device_train_batch_size", str(args.batch_size),
        "--save_strategy", "no",
        "--seed", str(seed),
        "--disable_tqdm", "true",
        "--report_to", "none",
        *flags,
    ]  # fmt: skip
    started = time.perf_counter()
    result = train_py(argv)
    metrics = {"seconds": time.perf_counter() - started, **result.metrics, **gate_opening(output_dir)}
    with (output_dir / "predictions.jsonl").open(encoding="utf-8") as handle:
        predicted = [json.loads(line)["prediction"] for line in handle]
    return predicted, metrics


def gate_opening(model_dir: Path) -> dict[str, float]:
    """first_plus_rest's trained gate, as the mean and largest |value| over its dimensions (how far the windows after
    the first were let in; it starts at 0); empty for another model."""
    from safetensors.torch import load_file

    gate = load_file(model_dir / "model.safetensors").get("classifier.document_pooler.across.gate")
    return (
        {} if gate is None else {"gate_mean": gate.abs().mean().item(), "gate_max": gate.abs().max().item()}
    )


def run_arm(arm: str, rows, folders: dict[str, Path], seed: int, work: Path, args) -> tuple[list[str], dict]:
    if arm in UNSEEDED:
        started = time.perf_counter()
        if arm in VECTOR_ARMS:
            predicted = run_vectors(rows, arm, backbone_path(args), args.window)
        else:
            predicted = run_tfidf(rows if arm == TFIDF else read_rows(folders[TFIDF_CUT]))
        return predicted, {"seconds": time.perf_counter() - started}
    data = folders[HEAD_TAIL] if arm == HEAD_TAIL else folders["whole"]
    output_dir = work / f"{arm.replace(', ', '_').replace(' ', '_')}_{seed}"
    return run_train_py(
        data, output_dir, seed, arm_flags(arm, args.window, args.document_gate_learning_rate), args
    )


def corpus(args, work: Path):
    """The corpus' rows, the folders train.py reads (whole texts, and the head+tail cut), and which test documents
    are long."""
    from transformers import AutoTokenizer

    if args.data is None:
        args.data = work / args.corpus
        if args.corpus == "kernel-docs":
            write_kernel_docs(
                args.data, directory=args.doc_dir, max_per_folder=args.per_section, seed=args.data_seed
            )
        else:
            write_manpages(args.data, max_per_section=args.per_section, seed=args.data_seed)
    rows = read_rows(Path(args.data))
    tokenizer = AutoTokenizer.from_pretrained(backbone_path(args))
    folders = {"whole": Path(args.data), HEAD_TAIL: work / "head_tail", TFIDF_CUT: work / "head"}
    for arm, cut in ((HEAD_TAIL, head_and_tail), (TFIDF_CUT, head_only)):
        write_rows(folders[arm], {split: [{**row, "text": cut(row["text"], tokenizer, args.window)} for row in part]
                                  for split, part in rows.items()})  # fmt: skip
    lengths = {split: token_counts([row["text"] for row in part], tokenizer) for split, part in rows.items()}
    return rows, folders, lengths


def describe_corpus(rows, lengths, window: int) -> dict:
    every = sorted(length for split in SPLITS for length in lengths[split])
    return {
        "documents": {split: len(rows[split]) for split in SPLITS},
        "labels": sorted({row["label"] for row in rows["train"]}),
        "median_tokens": statistics.median(every),
        "p90_tokens": every[int(0.9 * (len(every) - 1))],
        "max_tokens": every[-1],
        **{
            f"share_over_{limit}": sum(n > limit for n in every) / len(every)
            for limit in (128, 256, 512, 1024)
        },
        "long_test_documents": sum(n > window for n in lengths["test"]),
        "long_train_share": sum(n > window for n in lengths["train"]) / len(lengths["train"]),
    }


def summarise(runs: list[dict]) -> dict:
    """Mean and sample standard deviation over seeds of each score."""
    keys = [key for key in runs[0]["scores"]] + ["seconds"]
    summary = {}
    for key in keys:
        values = [run["scores"][key] if key in run["scores"] else run["seconds"] for run in runs]
        summary[key] = {
            "mean": statistics.fmean(values),
            "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
        }
    return summary


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS, help="which arms to run")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds")
    parser.add_argument(
        "--window", type=int, default=128, help="tokens of a window, and the cut arms' length"
    )
    parser.add_argument("--epochs", type=float, default=2, help="training epochs, the same for every arm")
    parser.add_argument("--batch-size", type=int, default=16, help="training batch size (documents)")
    parser.add_argument(
        "--document-gate-learning-rate",
        type=float,
        default=None,
        help="first_plus_rest's gate rate (train.py's --document_gate_learning_rate; unset: train.py's default)",
    )
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="manpages", help="which corpus to build")
    parser.add_argument(
        "--per-section", type=int, default=80, help="manual pages per section (kernel-docs: pages per folder)"
    )
    parser.add_argument(
        "--doc-dir", type=Path, default=DOC_DIR, help="kernel-docs: the Documentation folder of linux-doc-6.1"
    )
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the corpus' draw and split")
    parser.add_argument(
        "--data", type=Path, default=None, help="a folder of train/validation/test.csv instead"
    )
    parser.add_argument(
        "--output", type=Path, default=REPO / "bench/results/long_documents", help="report folder"
    )
    parser.add_argument("--timing", action="store_true", help="also measure time and memory per document")
    parser.add_argument(
        "--keeping-only",
        action="store_true",
        help="only which windows a capped document should keep (seconds)",
    )
    parser.add_argument(
        "--timing-only", action="store_true", help="only the timing part (rerun on a quiet machine)"
    )
    add_backbone_argument(parser)
    args = parser.parse_args(argv)
    command = shlex.join(["python", "bench/long_documents.py", *(sys.argv[1:] if argv is None else argv)])
    args.output.mkdir(parents=True, exist_ok=True)
    if args.timing or args.timing_only:
        from long_documents_timing import measure, write_timing

        write_timing(args.output, measure(backbone_path(args), args.window), command)
    if args.timing_only:
        return
    if args.keeping_only:
        from long_documents_keeping import keeping_report
        from transformers import AutoTokenizer

        with tempfile.TemporaryDirectory(prefix="long_documents_") as temporary:
            rows, _, lengths = corpus(args, Path(temporary))
            tokenizer = AutoTokenizer.from_pretrained(backbone_path(args))
            table = keeping_report(rows["test"], lengths["test"], args.window, tokenizer, fit_tfidf(rows))
            text = f"Command: {command}\n\n" + table
        (args.output / "keeping.md").write_text(text)
        print(text)
        return
    with tempfile.TemporaryDirectory(prefix="long_documents_") as temporary:
        report = accuracy_report(args, Path(temporary), command)
    print(render(report))


def accuracy_report(args, work: Path, command: str) -> dict:
    """Every arm and seed run, each run stored in the report as soon as it ends (report.json and report.md)."""
    rows, folders, lengths = corpus(args, work)
    long = [n > args.window for n in lengths["test"]]
    gold = [row["label"] for row in rows["test"]]
    report = {
        "settings": {k: str(v) for k, v in vars(args).items()},
        "corpus": describe_corpus(rows, lengths, args.window),
    }
    for arm in args.arms:
        for seed in [0] if arm in UNSEEDED else args.seeds:
            predicted, metrics = run_arm(arm, rows, folders, seed, work, args)
            run = {"seed": seed, "seconds": metrics["seconds"], "scores": scores(gold, predicted, long)}
            run.update({key: metrics[key] for key in ("gate_mean", "gate_max") if key in metrics})
            print(f"{arm} seed {seed}: {run['scores']}", flush=True)
            one = {**report, "command": command, "arms": {arm: {"runs": [run], "summary": summarise([run])}}}
            report = merged_with_stored(one, args.output / "report.json")
            (args.output / "report.md").write_text(render(report))
    return report


def merged_with_stored(report: dict, path: Path) -> dict:
    """The stored report's runs kept where this invocation did not run them, when its corpus and training settings
    are these: arms (and seeds of an arm) run in several invocations make one table; every command is listed. The
    read and the write hold a lock, so invocations running side by side do not lose each other's runs."""
    with open(Path(tempfile.gettempdir()) / "long_documents_report.lock", "w") as lock:  # not in the results
        fcntl.flock(lock, fcntl.LOCK_EX)
        stored = json.loads(path.read_text()) if path.exists() else None
        if stored is None or any(
            stored["settings"].get(key, SETTINGS_BEFORE_THEY_EXISTED.get(key)) != report["settings"][key]
            for key in SAME_CORPUS_AND_TRAINING
        ):
            report["commands"] = [report["command"]]
        else:
            for arm, result in stored["arms"].items():
                new = report["arms"].get(arm, {"runs": []})["runs"]
                seeds = {run["seed"] for run in new}
                runs = sorted(
                    [*(run for run in result["runs"] if run["seed"] not in seeds), *new],
                    key=lambda r: r["seed"],
                )
                report["arms"][arm] = {"runs": runs, "summary": summarise(runs)}
            report["arms"] = {arm: report["arms"][arm] for arm in ARMS if arm in report["arms"]}
            commands = stored["commands"]
            report["commands"] = commands + ([report["command"]] if report["command"] not in commands else [])
        path.write_text(json.dumps(report, indent=1) + "\n")
    return report


def render(report: dict) -> str:
    corpus_ = report["corpus"]
    window = report["settings"]["window"]
    backbone = backbone_of(report)
    tokens = backbone_name(backbone).split("/")[-1]
    lines = [
        *(f"Command: {command}" for command in report.get("commands", [report["command"]])),
        "",
        f"Corpus: {CORPORA[report['settings'].get('corpus', SETTINGS_BEFORE_THEY_EXISTED['corpus'])]} ({', '.join(corpus_['labels'])}); documents "
        f"train/validation/test {corpus_['documents']['train']}/{corpus_['documents']['validation']}/"
        f"{corpus_['documents']['test']}; {tokens} tokens: median {corpus_['median_tokens']:.0f}, p90 "
        f"{corpus_['p90_tokens']}, max {corpus_['max_tokens']}; longer than 256: {corpus_['share_over_256']:.0%}, "
        f"than 512: {corpus_['share_over_512']:.0%}. Long = more than {window} tokens: "
        f"{corpus_['long_test_documents']} of {corpus_['documents']['test']} test documents.",
        "",
        f"Epochs {report['settings']['epochs']}, batch size {report['settings']['batch_size']}{gate_setting(report)}; "
        "mean ± sd over the seeds (0, 1, 2, ... as many as the column says). Seconds: train.py's whole run (train and predict) on a "
        "shared 2-core machine, not comparable between arms run under different load.",
        "",
        "| arm | seeds | accuracy | macro-F1 | long: accuracy | long: macro-F1 | short: accuracy | short: macro-F1 "
        "| seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, result in report["arms"].items():
        s = result["summary"]
        cells = [f"{s[key]['mean']:.3f} ± {s[key]['sd']:.3f}" for key in (
            "all_accuracy", "all_f1_macro", "long_accuracy", "long_f1_macro", "short_accuracy", "short_f1_macro"
        )]  # fmt: skip
        seeds = len(result["runs"])
        lines.append(
            f"| {shown_arm(arm, backbone)} | {seeds} | {' | '.join(cells)} | {s['seconds']['mean']:.0f} |"
        )
    return "\n".join([*lines, *gate_lines(report)]) + "\n"


def gate_setting(report: dict) -> str:
    """The gate rate a report's first_plus_rest runs were given, where not train.py's default."""
    default = SETTINGS_BEFORE_THEY_EXISTED["document_gate_learning_rate"]
    rate = report["settings"].get("document_gate_learning_rate", default)
    return "" if rate == default else f", first_plus_rest's gate learning rate {rate}"


def gate_lines(report: dict) -> list[str]:
    """A line per arm whose runs stored their first_plus_rest gate: its mean and largest |value| after training."""
    lines = []
    for arm, result in report["arms"].items():
        gates = [
            f"seed {r['seed']} {r['gate_mean']:.3f} ({r['gate_max']:.3f})"
            for r in result["runs"]
            if "gate_mean" in r
        ]
        if gates:
            lines.append(
                f"{arm}: the gate after training, mean (largest) |value| over its dimensions: {'; '.join(gates)}."
            )
    return ["", *lines] if lines else []


if __name__ == "__main__":
    main()
