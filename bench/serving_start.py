"""What serving a label-text classifier costs at start: vLLM's start time and the process's peak host memory, for a
label-text checkpoint against a mean-pooled one of the same backbone, with this checkout's plugin and, with
``--before CHECKOUT``, another checkout's (the code before the change: ``git worktree add /tmp/before adca240``).

The checkpoints, built here from one random backbone (``--backbone``: a Llama, the decoder label text is served on, or a
BERT; ``--hidden-size``, ``--layers``), with the packaged MiniLM's tokenizer (bench/backbones.py's ``minilm``; here
``--backbone`` names the random backbone's architecture, not the other benchmarks' ``--backbone minilm|mpnet|PATH``: no
pretrained backbone is loaded): ``pooling="label_text"`` with its few-example default
(``label_text_scorer="per_label"``, one label per fortunes topic) and ``pooling="mean"``, both saved in float32. Before
issue 41 the plugin worked a label-text model's own label vectors out with a float32 copy of the checkpoint's
transformers model on the CPU while vLLM loaded it; after, through vLLM's own modules at
``process_weights_after_loading`` (pooled_models/serving/label_text.py).

Each (code, checkpoint) pair runs ``--rounds`` times, each in a fresh Python process (the engine in that process:
``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so its peak resident memory is the engine's): the seconds ``LLM(model=folder,
runner="pooling", dtype="float32", enforce_eager=True)`` takes to return, and the process's peak resident set
(``ru_maxrss``) once one ``classify`` call has answered. Reported: the medians, and label text over mean pooling.
Another checkout's code is imported in place of this one's by putting it first on ``sys.path`` and dropping the
editable install's finder (which would otherwise win).

    python bench/serving_start.py --before /tmp/before    # Llama, 1024 wide, 16 layers (0.3B parameters), 3 rounds
    python bench/serving_start.py --hidden-size 64 --layers 2 --rounds 1 --output /tmp/start-check    # it runs

Runs in the venv ``make test-vllm`` builds. Writes report.md and results.json to ``--output`` (default
bench/results/serving/start). Exit status 0 when every run started and answered, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROGRAM = "bench/serving_start.py"
TOPICS = 28  # the fortunes corpus's topics: the labels of train.py's few-example default on it

# Run in a fresh process: argv[1] the checkout whose pooled_models to import ("" for this one), argv[2] the folder.
CHILD = r"""
import json, os, resource, sys, time
checkout, folder = sys.argv[1], sys.argv[2]
if checkout:
    sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("__editable__")]
    sys.path.insert(0, checkout)
from vllm import LLM
import pooled_models
start = time.perf_counter()
llm = LLM(model=folder, runner="pooling", dtype="float32", enforce_eager=True)
started = time.perf_counter() - start
probs = llm.classify(["A first request."], use_tqdm=False)[0].outputs.probs
print("RESULT " + json.dumps({
    "start_seconds": started,
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "labels": len(probs),
    "package": os.path.dirname(pooled_models.__file__),
}))
"""


def backbone_config(kind: str, hidden: int, layers: int, vocab_size: int, pad_token_id: int):
    from transformers import BertConfig, LlamaConfig

    sizes = {
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": max(1, hidden // 64),
        "intermediate_size": 4 * hidden,
        "vocab_size": vocab_size,
        "pad_token_id": pad_token_id,
        "max_position_embeddings": 512,
    }
    if kind == "llama":
        return LlamaConfig(num_key_value_heads=max(1, hidden // 64), **sizes)
    return BertConfig(**sizes)


def build(folder: Path, pooling: str, args, tokenizer) -> Path:
    import torch

    from pooled_models import PooledConfig, PooledForSequenceClassification
    from pooled_models.modeling.label_text import label_text_token_ids

    labels = [f"topic {index}" for index in range(TOPICS)]
    settings = {"pooling": pooling, "id2label": dict(enumerate(labels))}
    if pooling == "label_text":
        settings.update(label_text_scorer="per_label", label_text_ids=label_text_token_ids(labels, tokenizer))
    config = PooledConfig(
        backbone_config=backbone_config(
            args.backbone, args.hidden_size, args.layers, len(tokenizer), tokenizer.pad_token_id
        ),
        **settings,
    )
    torch.manual_seed(0)
    PooledForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run(checkout: str, folder: Path) -> dict:
    environment = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}
    environment.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    completed = subprocess.run(
        [sys.executable, "-c", CHILD, checkout, str(folder)], capture_output=True, text=True, env=environment
    )
    for line in completed.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
            expected = Path(checkout) if checkout else REPO
            if Path(result["package"]).resolve() != (expected / "pooled_models").resolve():
                return {"error": f"imported {result['package']}, not {expected}'s pooled_models"}
            return result
    return {"error": (completed.stderr or completed.stdout)[-3000:]}


def report_markdown(results: dict) -> str:
    settings = results["settings"]
    lines = [
        "# What serving a label-text classifier costs at start: vLLM's start time and peak host memory",
        "",
        f"Written by `{results['command']}` ({PROGRAM}); machine: {results['machine']}; vLLM {results['vllm']}. "
        f"Backbone: a random {settings['backbone']} ({settings['hidden_size']} wide, {settings['layers']} layers, "
        f"{settings['parameters'] / 1e6:.0f}M parameters, float32), {TOPICS} labels; {settings['rounds']} rounds, "
        "each in a fresh process, the median.",
        "",
        "| code | checkpoint | start (s) | peak host memory (MiB) | label text over mean: start | label text over mean: "
        "memory |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for code, arms in results["runs"].items():
        medians = {name: arm["median"] for name, arm in arms.items()}
        for name in ("label_text", "mean"):
            median = medians[name]
            extra = ""
            if name == "label_text":
                extra = (
                    f"{median['start_seconds'] - medians['mean']['start_seconds']:+.1f} s | "
                    f"{median['peak_rss_mib'] - medians['mean']['peak_rss_mib']:+.0f} MiB"
                )
            lines.append(
                f"| {code} | {name} | {median['start_seconds']:.1f} | {median['peak_rss_mib']:.0f} | "
                f"{extra or ' | '} |"
            )
    return "\n".join([*lines, ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--before", help="a checkout of the code to compare with (its pooled_models is imported)"
    )
    parser.add_argument("--backbone", choices=["llama", "bert"], default="llama")
    parser.add_argument("--hidden-size", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results" / "serving" / "start")
    args = parser.parse_args(argv)

    import vllm
    from backbones import MINILM, resolve_backbone  # bench/backbones.py (standard library)
    from serving import machine  # bench/serving.py
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_backbone(PROGRAM, MINILM))
    codes = {"this checkout": ""}
    if args.before:
        codes = {f"before ({args.before})": str(Path(args.before).resolve()), **codes}
    runs: dict = {}
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-serving-start-") as scratch:
        folders = {
            name: build(Path(scratch) / name, name, args, tokenizer) for name in ("label_text", "mean")
        }
        from pooled_models import PooledForSequenceClassification

        parameters = sum(
            p.numel() for p in PooledForSequenceClassification.from_pretrained(folders["mean"]).parameters()
        )
        for code, checkout in codes.items():
            runs[code] = {}
            for name, folder in folders.items():
                rounds = [run(checkout, folder) for _ in range(args.rounds)]
                failed = [result["error"] for result in rounds if "error" in result]
                if failed:
                    print(f"{code}, {name}: failed\n{failed[0]}", file=sys.stderr)
                    ok = False
                    continue
                median = {
                    key: statistics.median(result[key] for result in rounds)
                    for key in ("start_seconds", "peak_rss_mib")
                }
                runs[code][name] = {"rounds": rounds, "median": median}
    results = {
        "command": "python bench/serving_start.py" + "".join(f" {arg}" for arg in (argv or sys.argv[1:])),
        "machine": machine(),
        "vllm": vllm.__version__,
        "settings": {
            "backbone": args.backbone,
            "hidden_size": args.hidden_size,
            "layers": args.layers,
            "parameters": parameters,
            "rounds": args.rounds,
        },
        "runs": runs,
    }
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    if ok:
        (args.output / "report.md").write_text(report_markdown(results))
        print(report_markdown(results))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
