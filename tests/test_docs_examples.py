"""The examples of README.md and docs/*.md run as written, offline, and print what the pages show.

The pages follow these conventions (docs/index.md, "The examples", tells readers):
- The ```python blocks of a page run in order, in one Python session, in a fresh folder. Every page but the README
  runs where the README's Python quickstart saved its model (``sentiment/``): one trained model serves them all.
- A ```bash block runs only when the line before it is ``<!-- run -->``; otherwise that line says why not
  (``<!-- not-run: why -->``) or ``<!-- needs-hub -->``. Every folder a shell block runs in holds what a clone of the
  repository has at its root for the commands (train.py, sweep.py, configs/, data/).
- A ``<!-- needs-hub -->`` block is skipped, and its first line tells the reader what to use offline.
- A ```text block is what the block before it prints: each of its lines appears in the output, in order, where
  ``~<number>`` stands for a number that varies from run to run. A shell block's output is its standard output and
  error together, as a terminal shows them.
- A shell block that trains (train.py, pooled-train) prints no library chatter (:data:`NOISE`), and the README's
  quickstart prints its summary in a few lines (``test_the_quickstart_prints_its_summary_and_no_chatter``).

Run as a script (``python tests/test_docs_examples.py docs/models.md``) it prints what each block of a page printed,
to regenerate the outputs a page shows.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CHECKOUT = ["train.py", "sweep.py", "configs", "data"]  # what shell examples use from a clone's root
SENTINEL = "@@docs-example-block@@"
FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!-- (run|needs-hub|not-run: .+) -->$")
NUMBER = r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?"


@dataclass
class Block:
    page: Path
    line: int  # the page's line of the block's first code line (1-based)
    lang: str
    code: str
    marker: str | None
    output: str | None = None  # the ```text block after it

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def runs(self) -> bool:
        return (self.lang == "python" and self.marker is None) or (
            self.lang == "bash" and self.marker == "run"
        )


def blocks_of(page: Path) -> list[Block]:
    """The page's fenced code blocks, each ```text block attached to the block before it as its output."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        code = "\n".join(lines[index + 1 : end]) + "\n"
        lang = opening.group(1)
        before = lines[index - 1].strip() if index else ""
        marker = MARKER.match(before)
        if lang == "text":
            assert blocks and blocks[-1].runs and blocks[-1].output is None, (
                f"{page.name}:{index + 1}: a text block must follow the example whose output it shows"
            )
            blocks[-1].output = code
        else:
            blocks.append(Block(page, index + 2, lang, code, marker.group(1) if marker else None))
        index = end + 1
    return blocks


def output_patterns(shown: str) -> list[re.Pattern]:
    patterns = []
    for line in shown.splitlines():
        if line.strip():
            pieces = re.split(rf"~{NUMBER}", line.strip())
            patterns.append(re.compile(NUMBER.join(re.escape(piece) for piece in pieces)))
    return patterns


def check_output(block: Block, printed: str) -> None:
    """Each shown line matches a printed line, in order (other lines, such as library logs, may come between)."""
    printed_lines = [line.strip() for line in printed.splitlines()]
    position = 0
    for pattern in output_patterns(block.output):
        while position < len(printed_lines) and not pattern.fullmatch(printed_lines[position]):
            position += 1
        assert position < len(printed_lines), (
            f"{block.where}: the page shows a line matching {pattern.pattern!r} that the example did not print "
            f"(in this order). It printed:\n{printed}"
        )
        position += 1


DRIVER = f"""
import json, subprocess, sys
namespace = {{"__name__": "__main__"}}
for index, block in enumerate(json.load(open(sys.argv[1]))):
    print("\\n{SENTINEL}", index, flush=True)
    if block["lang"] == "python":
        # Padded with blank lines so that a traceback's line numbers are the page's.
        exec(compile("\\n" * (block["line"] - 1) + block["code"], block["page"], "exec"), namespace)
    else:
        subprocess.run(["bash", "-e", "-c", block["code"]], check=True, stderr=subprocess.STDOUT)
    sys.stdout.flush()
"""


# What a training run printed before it was quiet by default (issue 25); --log_level info brings it back.
NOISE = {
    "accelerate's INFO lines": re.compile(r"INFO accelerate|The used dataset had no length"),
    "the pin_memory warning": re.compile(r"pin_memory"),
    "datasets' progress bars": re.compile(r"Generating data split|Tokenizing (train|validation|test)"),
    "transformers' loading and writing bars": re.compile(r"Loading weights|Writing model shards"),
    "Trainer's metrics dumps": re.compile(r"\*\*\*\*\* \w+ metrics \*\*\*\*\*"),
    "Trainer's logged dicts": re.compile(r"\{'(eval_|train_|loss)"),
    "a bar without a total, or transformers' own bar": re.compile(r"\d+it \[|it/s\]"),
    "a Python warning": re.compile(r"Warning: "),
}


def trains(block: Block) -> bool:
    return block.lang == "bash" and bool(re.search(r"(train\.py|pooled-train) \S+\.(yaml|json)", block.code))


def check_quiet(block: Block, printed: str) -> None:
    found = {
        what: line for line in printed.splitlines() for what, noise in NOISE.items() if noise.search(line)
    }
    assert not found, f"{block.where}: the run printed library chatter: {found}"


def test_the_chatter_check_sees_what_a_run_printed_before_it_was_quiet():
    block = Block(REPO / "README.md", 1, "bash", "pooled-train quickstart/quickstart.yaml\n", "run")
    before = [  # lines of the quickstart's output before issue 25
        "2026-11-24 05:08:14,983 INFO accelerate.accelerator: [RANK 0] The used dataset had no length, returning",
        "dataloader.py:759: UserWarning: 'pin_memory' argument is set as true but no accelerator is found",
        "Generating data split: 400 examples [00:00, 75386.28 examples/s]",
        "Loading weights: 100%|##########| 101/101 [00:00<00:00, 20844.59it/s]",
        "***** train metrics *****",
        "{'eval_loss': '0.001736', 'eval_accuracy': '1', 'epoch': '1'}",
        "26it [00:01, 16.44it/s]",
    ]
    for line in before:
        with pytest.raises(AssertionError, match="library chatter"):
            check_quiet(block, f"Data: train file data/demo/train.csv: 400 rows\n{line}\n")
    check_quiet(block, "train: 100%|##########| 100/100 [00:31<00:00,  3.20step/s, loss=0.1644]\n")
    assert trains(block) and not trains(
        Block(REPO / "README.md", 1, "bash", "pooled-train --demo x\n", "run")
    )


def prepare_folder(folder: Path, model_from: Path | None) -> None:
    for name in CHECKOUT:
        (folder / name).symlink_to(REPO / name)
    # The venv `make install` builds at a clone's root, which the pages say to activate: the one running the tests.
    (folder / ".venv").symlink_to(Path(sys.prefix))
    if model_from is not None:
        shutil.copytree(model_from / "sentiment", folder / "sentiment")


def run_page(page: Path, folder: Path) -> list[tuple[Block, str]]:
    """Runs the page's examples in ``folder``, offline, in one process; each runnable block with what it printed."""
    runnable = [block for block in blocks_of(page) if block.runs]
    spec = [
        {"lang": block.lang, "code": block.code, "line": block.line, "page": str(block.page)}
        for block in runnable
    ]
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "blocks.json").write_text(json.dumps(spec))
        (Path(scratch) / "driver.py").write_text(DRIVER)
        # As a user's shell has it: without the suite's TRANSFORMERS_VERBOSITY (conftest.py), which would also turn
        # Trainer's progress bars off (disable_tqdm follows transformers' verbosity).
        env = {
            **{key: value for key, value in os.environ.items() if key != "TRANSFORMERS_VERBOSITY"},
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
        }
        result = subprocess.run(
            [sys.executable, str(Path(scratch) / "driver.py"), str(Path(scratch) / "blocks.json")],
            cwd=folder,
            env=env,
            capture_output=True,
            timeout=900,
        )
    # Decoded by hand: text mode would turn a progress bar's \r (which redraws its line) into a new line.
    stdout, stderr = (stream.decode("utf-8", "replace") for stream in (result.stdout, result.stderr))
    assert result.returncode == 0, f"the examples of {page.name} failed:\n{stdout[-3000:]}\n{stderr[-6000:]}"
    outputs = stdout.split(SENTINEL)[1:]
    assert len(outputs) == len(runnable)
    return [(block, output.split("\n", 1)[1]) for block, output in zip(runnable, outputs, strict=True)]


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


# ---------------------------------------------------------------------------------------------------------------
# What the pages hold: fast checks


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_example_runs_or_says_why_not(page):
    for block in blocks_of(page):
        assert block.lang in {"python", "bash", "yaml", ""}, (
            f"{block.where}: unexpected block language {block.lang!r}"
        )
        if block.lang == "bash":
            assert block.marker, (
                f"{block.where}: say whether the shell block runs (<!-- run --> or <!-- not-run: ...)"
            )
        if block.marker == "needs-hub":
            first = block.code.splitlines()[0]
            assert re.match(r"# Needs the (Hugging Face )?Hub.*; offline, ", first), (
                f"{block.where}: a block that needs the Hub says so in its first line, and what to use offline"
            )
        if block.lang == "python" and block.marker not in (None, "needs-hub"):
            pytest.fail(f"{block.where}: Python examples run, or need the Hub")


def test_the_readme_says_how_to_train_on_your_own_data():
    """Issue 42: the README's "Your own data" named neither the backbone flag nor the phases, and never said to activate
    .venv before pooled-train. Its command runs as printed with the README's examples (the slow test below)."""
    section = (
        (REPO / "README.md").read_text(encoding="utf-8").split("### Your own data", 1)[1].split("\n## ", 1)[0]
    )
    (block,) = [
        block
        for block in blocks_of(REPO / "README.md")
        if block.runs and "pooled-train --model" in block.code
    ]
    assert block.code.startswith("source .venv/bin/activate\n") and block.code in section
    for flag in (
        "--model_name_or_path",
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--train_file",
        "--output_dir",
    ):
        assert flag in block.code and f"`{flag}`" in section


def test_the_readmes_list_of_poolings_is_the_registry():
    """Issue 48: the README said fifteen pooling strategies while --pooling listed sixteen. It gives no count, and its
    list names as many poolings as the registry holds (parentheses explain one, they are not more)."""
    from pooled_models.modeling.registry import POOLINGS

    text = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    listed = text.split("The pooling strategies built in: ", 1)[1].split(". ", 1)[0]
    listed = re.sub(r" \([^)]*\)", "", listed)
    names = re.split(r", | and ", listed)
    assert len(names) == len(POOLINGS), (names, list(POOLINGS))
    numbers = "ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|\\d+"
    assert not re.search(rf"\b({numbers}) pooling(s| strategies)\b", text, re.IGNORECASE)


def test_the_readme_is_the_front_door():
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 300


@pytest.mark.parametrize("page", [*PAGES, REPO / "CHANGELOG.md"], ids=page_id)
def test_no_figure_that_goes_stale_with_every_commit(page):
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"\b\d[\d,]* tests\b", text), f"{page.name} gives the suite's size"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_repository_path_a_page_cites_exists(page):
    text = page.read_text(encoding="utf-8")
    cited = set(re.findall(r"`((?:tests|bench|pooled_models|configs|data|docs|model_cards)/[^`\s]*)`", text))
    missing = [path for path in sorted(cited) if not re.search(r"[*<]", path) and not (REPO / path).exists()]
    assert not missing, f"{page.name} cites paths that do not exist: {missing}"


# ---------------------------------------------------------------------------------------------------------------
# The examples themselves: slow, they train


@pytest.fixture(scope="session")
def readme_folder(tmp_path_factory):
    """The README's examples run in a fresh folder: its Python quickstart trains ``sentiment/`` there."""
    folder = tmp_path_factory.mktemp("readme")
    prepare_folder(folder, model_from=None)
    results = run_page(REPO / "README.md", folder)
    return folder, results


@pytest.mark.slow
def test_the_readme_examples_run_and_print_what_it_shows(readme_folder):
    folder, results = readme_folder
    assert any(block.lang == "python" for block, _ in results) and any(
        block.lang == "bash" for block, _ in results
    )
    for block, printed in results:
        if block.output is not None:
            check_output(block, printed)
        if trains(block):
            check_quiet(block, printed)
    assert (folder / "sentiment" / "model.safetensors").is_file()


# The quickstart's summary: every line a user needs (what was read and built, the bars of its phases, the
# evaluations, the metrics, where the model went and how to use it), in a few lines. Before quiet output it printed
# 129 to 188 lines.
QUICKSTART_SUMMARY = [
    "Data: train file ",
    "Labels: single label classification, 4 labels: account, billing, delivery, technical",
    "Model: PooledForSequenceClassification on sentence-transformers/all-MiniLM-L6-v2 (bert): mean pooling",
    "train: 100%",
    "epoch 1: eval_accuracy ",
    "epoch 4: eval_accuracy ",
    "evaluate: 100%",
    "predict: 100%",
    "Trained 4 epochs on 400 rows in ",
    "Evaluation:",
    "test_f1_macro",
    "Saved to: ",
    "The saved model, loaded with pipeline():",
    "Use it:",
    "import pooled_models",
    'classify = pipeline("text-classification", model="quickstart/outputs/quickstart")',
]
QUICKSTART_MAX_LINES = 40


@pytest.mark.slow
def test_the_quickstart_prints_its_summary_and_no_chatter(readme_folder):
    _, results = readme_folder
    (printed,) = [printed for block, printed in results if trains(block) and "quickstart.yaml" in block.code]
    lines = printed.split("\n")  # a progress bar redraws its line with \r: one line on a terminal
    assert len(lines) <= QUICKSTART_MAX_LINES, printed
    missing = [wanted for wanted in QUICKSTART_SUMMARY if not any(wanted in line for line in lines)]
    assert not missing, f"the quickstart did not print {missing}:\n{printed}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "page",
    [page for page in PAGES if page.parent.name == "docs" and any(block.runs for block in blocks_of(page))],
    ids=page_id,
)
def test_the_pages_examples_run_and_print_what_they_show(page, readme_folder, tmp_path):
    prepare_folder(tmp_path, model_from=readme_folder[0])
    for block, printed in run_page(page, tmp_path):
        if block.output is not None:
            check_output(block, printed)
        if trains(block):
            check_quiet(block, printed)


if __name__ == "__main__":
    # Regenerates the outputs a page shows: python tests/test_docs_examples.py docs/models.md [folder with sentiment/]
    target = Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory() as work:
        prepare_folder(Path(work), Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else None)
        for block, printed in run_page(target, Path(work)):
            print(f"--- {block.where}\n{printed}")
