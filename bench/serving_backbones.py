"""Serving pooled classifiers on other backbones: the plugin against vLLM's own classifier of the same backbone, both
against transformers' pipeline, and the transformers route (a backbone vLLM does not implement) against pipeline.

For each backbone vLLM implements with a classifier of its own (BERT, ModernBERT, Qwen3), one backbone's weights make
two checkpoints: the pooled classifier (linear head; the pooling vLLM's own classifier uses: CLS for BERT, mean for
ModernBERT, the last token for Qwen3), and transformers' own ``*ForSequenceClassification`` on the same backbone
weights, saved as its own checkpoint and served by vLLM's own class (no plugin code runs for it). BERT is the packaged
all-MiniLM-L6-v2; ModernBERT and Qwen3 are small random models (4 layers of 256, head size 64), so that a forward
costs what a small real model costs. For the transformers route: a small random DeBERTa-v3 and DistilBERT pooled
classifier (mean), which vLLM runs through the checkpoint's own transformers module.

``--backbone minilm|mpnet|PATH`` (bench/backbones.py) puts another real backbone in the BERT row's place: its row is
named by its model type and name, and compared with vLLM's own classifier when vLLM has one for that type (BERT,
ModernBERT, Qwen3), else served through the transformers route (mean pooling). It does not apply to the random
backbones, which stay as they are, with MiniLM's tokenizer (as do the texts: at most 256 of MiniLM's tokens).

Texts: the first ``--texts`` Debian fortunes quotations of at most 256 tokens (bench/serving.py's). Each side:
``LLM(model=folder, runner="pooling", enforce_eager=True, dtype="float32").classify(texts)`` or
``pipeline("text-classification", model=folder, top_k=None)(texts)``, one untimed warm-up, then ``--rounds`` timed
rounds, the median. Before timing, the plugin's scores must equal the pooled classifier's pipeline scores (1e-4).

    python bench/serving_backbones.py                          # 200 texts, 3 rounds (about 4 minutes on 2 cores)
    python bench/serving_backbones.py --quick --output /tmp/x  # 16 texts, 1 round: it runs
    python bench/serving_backbones.py --backbone mpnet --output bench/results/mpnet/serving/backbones

Runs in the venv ``make test-vllm`` builds. Writes report.md and results.json to ``--output`` (default
bench/results/serving/backbones). Exit status 0 when every plugin score equals transformers', else 1.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch  # noqa: E402
from backbones import MINILM, add_backbone_argument, backbone_name, resolve_backbone  # noqa: E402  (standard library)
from serving import ENGINE, REPO, TOLERANCE, fortunes_texts, machine  # noqa: E402  (bench/serving.py: env set)
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModel,
    AutoTokenizer,
    BertForSequenceClassification,
    DebertaV2Config,
    DistilBertConfig,
    ModernBertConfig,
    ModernBertForSequenceClassification,
    Qwen3Config,
    Qwen3ForSequenceClassification,
    pipeline,
)

from pooled_models import PooledConfig, PooledForSequenceClassification  # noqa: E402

PROGRAM = "bench/serving_backbones.py"
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
SMALL = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 512}


def small_backbone(kind: str, tokenizer):
    ids = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
    if kind == "modernbert":
        return ModernBertConfig(**SMALL, **ids, max_position_embeddings=512, classifier_pooling="mean")
    if kind == "qwen3":
        return Qwen3Config(**SMALL, **ids, num_key_value_heads=2, head_dim=64, max_position_embeddings=512)
    if kind == "deberta-v2":  # DeBERTa-v3's disentangled attention
        return DebertaV2Config(
            **SMALL,
            **ids,
            max_position_embeddings=512,
            relative_attention=True,
            position_biased_input=False,
            pos_att_type=["p2c", "c2p"],
            norm_rel_ebd="layer_norm",
            share_att_key=True,
        )
    if kind == "distilbert":
        return DistilBertConfig(
            dim=256, n_layers=4, n_heads=4, hidden_dim=512, max_position_embeddings=512, **ids
        )
    raise ValueError(kind)


# backbone -> (pooled pooling, transformers' own classifier class or None for the transformers route)
BACKBONES = {
    "bert (all-MiniLM-L6-v2)": ("cls", BertForSequenceClassification),
    "modernbert": ("mean", ModernBertForSequenceClassification),
    "qwen3": ("last_token", Qwen3ForSequenceClassification),
    "deberta-v2": ("mean", None),
    "distilbert": ("mean", None),
}
MINILM_ROW = "bert (all-MiniLM-L6-v2)"  # the one real backbone: --backbone's; the others are random
# model type -> the row whose pooling and own classifier a real backbone of that type takes (vLLM has a classifier)
OWN_CLASSIFIER_ROWS = {"bert": MINILM_ROW, "modernbert": "modernbert", "qwen3": "qwen3"}


def run_backbones(backbone: str, folder: str) -> dict[str, tuple]:
    """BACKBONES with ``--backbone``'s row (``folder`` its model) in MiniLM's place, first; MiniLM's run: BACKBONES."""
    if backbone == MINILM:
        return dict(BACKBONES)
    model_type = AutoConfig.from_pretrained(folder).model_type
    row = BACKBONES[OWN_CLASSIFIER_ROWS[model_type]] if model_type in OWN_CLASSIFIER_ROWS else ("mean", None)
    name = f"{model_type} ({backbone_name(backbone).split('/')[-1]})"
    return {name: row, **{key: value for key, value in BACKBONES.items() if key != MINILM_ROW}}


def build_checkpoints(
    name: str, work: Path, tokenizer, row: tuple, real: str | None = None
) -> dict[str, Path]:
    """The pooled classifier (and vLLM's own classifier on the same backbone weights), saved with the tokenizer: on the
    real backbone's weights (``real``, a model folder) or a small random ``name`` backbone."""
    pooling, own_class = row
    torch.manual_seed(0)
    if real is not None:
        backbone = AutoModel.from_pretrained(real)
    else:
        backbone = AutoModel.from_config(small_backbone(name, tokenizer))
    config = PooledConfig(backbone_config=backbone.config, pooling=pooling, id2label=LABELS)
    pooled = PooledForSequenceClassification(config, backbone=backbone).eval()
    with torch.no_grad():
        for parameter in pooled.classifier.head.parameters():
            parameter.normal_(std=1.0)  # labels well apart, as bench/serving.py's head
    folders = {"pooled": work / name / "pooled"}
    pooled.save_pretrained(folders["pooled"])
    if own_class is not None:
        own_config = backbone.config.__class__.from_dict(
            {**backbone.config.to_dict(), "id2label": LABELS, "label2id": {v: k for k, v in LABELS.items()}}
        )
        own = own_class(own_config).eval()
        own.base_model.load_state_dict(
            backbone.state_dict()
        )  # the same backbone weights; its own head at random
        folders["vllm"] = work / name / "vllm"
        own.save_pretrained(folders["vllm"])
    for folder in folders.values():
        tokenizer.save_pretrained(folder)
    return folders


def vllm_scores_and_times(folder: Path, texts: list[str], rounds: int) -> tuple[torch.Tensor, list[float]]:
    from vllm import LLM
    from vllm.distributed import cleanup_dist_env_and_memory

    llm = LLM(model=str(folder), **ENGINE)
    try:
        scores = torch.tensor([output.outputs.probs for output in llm.classify(texts, use_tqdm=False)])
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            llm.classify(texts, use_tqdm=False)
            times.append(time.perf_counter() - start)
    finally:
        del llm
        gc.collect()
        cleanup_dist_env_and_memory()
    return scores, times


def pipeline_scores_and_times(
    folder: Path, texts: list[str], rounds: int
) -> tuple[torch.Tensor, list[float]]:
    classify = pipeline("text-classification", model=str(folder), top_k=None)
    results = classify(texts)  # the warm-up; its scores are compared
    scores = torch.tensor(
        [[{i["label"]: i["score"] for i in row}[LABELS[k]] for k in LABELS] for row in results]
    )
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        classify(texts)
        times.append(time.perf_counter() - start)
    return scores, times


def measure(pooling: str, folders: dict[str, Path], texts: list[str], rounds: int) -> dict:
    served, served_times = vllm_scores_and_times(folders["pooled"], texts, rounds)
    expected, pipeline_times = pipeline_scores_and_times(folders["pooled"], texts, rounds)
    per_second = {"plugin": len(texts) / statistics.median(served_times)}
    per_second["pipeline"] = len(texts) / statistics.median(pipeline_times)
    if "vllm" in folders:
        _, own_times = vllm_scores_and_times(folders["vllm"], texts, rounds)
        per_second["vllm_own"] = len(texts) / statistics.median(own_times)
    return {
        "route": "transformers" if "vllm" not in folders else "vLLM kernels",
        "pooling": pooling,
        "texts_per_second": per_second,
        "plugin_over_vllm_own": per_second["plugin"] / per_second["vllm_own"]
        if "vllm_own" in per_second
        else None,
        "plugin_over_pipeline": per_second["plugin"] / per_second["pipeline"],
        "max_score_difference": float((served - expected).abs().max()),
    }


def report_markdown(results: dict) -> str:
    lines = [
        "# Serving pooled classifiers on other backbones",
        "",
        f"Written by `{results['command']}` ({PROGRAM}); machine: {results['machine']}; vLLM "
        f"{results['versions']['vllm']}, transformers {results['versions']['transformers']}, torch "
        f"{results['versions']['torch']}. Texts: {results['texts']} fortunes quotations; {results['rounds']} rounds, "
        "the median. vLLM in float32, eager.",
        "",
        "| backbone | route | pooling | plugin texts/s | vLLM's own classifier texts/s | plugin / vLLM's own | "
        "pipeline texts/s | plugin / pipeline | plugin vs pipeline scores |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in results["backbones"].items():
        rate = row["texts_per_second"]
        own = f"{rate['vllm_own']:.1f}" if "vllm_own" in rate else "(none in vLLM)"
        ratio = f"{row['plugin_over_vllm_own']:.2f}x" if row["plugin_over_vllm_own"] else ""
        lines.append(
            f"| {name} | {row['route']} | {row['pooling']} | {rate['plugin']:.1f} | {own} | {ratio} | "
            f"{rate['pipeline']:.1f} | {row['plugin_over_pipeline']:.2f}x | {row['max_score_difference']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=200, help="fortunes quotations to classify")
    parser.add_argument(
        "--rounds", type=int, default=3, help="timed rounds per side (the median is reported)"
    )
    parser.add_argument("--quick", action="store_true", help="16 texts, 1 round: check that it runs")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results" / "serving" / "backbones")
    add_backbone_argument(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.texts, args.rounds = 16, 1

    import transformers
    import vllm

    tokenizer = AutoTokenizer.from_pretrained(
        resolve_backbone(PROGRAM, MINILM)
    )  # the texts' and the random ones'
    real = resolve_backbone(PROGRAM, args.backbone)
    real_tokenizer = tokenizer if args.backbone == MINILM else AutoTokenizer.from_pretrained(real)
    table = run_backbones(args.backbone, real)
    real_row = next(iter(table))
    texts, _ = fortunes_texts(args.texts, tokenizer)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench-serving-backbones-") as scratch:
        for name, row in table.items():
            if name == real_row:
                folders = build_checkpoints(name, Path(scratch), real_tokenizer, row, real)
            else:
                folders = build_checkpoints(name, Path(scratch), tokenizer, row)
            rows[name] = measure(row[0], folders, texts, args.rounds)
            print(name, rows[name], flush=True)
    results = {
        "command": "python bench/serving_backbones.py" + "".join(f" {a}" for a in (argv or sys.argv[1:])),
        "machine": machine(),
        "versions": {
            "vllm": vllm.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        },
        "texts": len(texts),
        "rounds": args.rounds,
        "backbones": rows,
    }
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.output / "report.md").write_text(report_markdown(results))
    print(report_markdown(results))
    return 0 if all(row["max_score_difference"] <= TOLERANCE for row in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
