"""bench/gpu.py: on a machine without CUDA it says so in one line and exits 0; its runs are the arms it names; and
(slow) the plumbing of a run works on the CPU, both sides counting the same tokens (never a figure: no GPU here)."""

import subprocess
import sys

import gpu
import pytest
import torch
from corpora.fortunes import FORTUNES_DIR
from helpers import REPO


def test_without_cuda_it_says_so_in_one_line_and_exits_0(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("bench/gpu.py: no CUDA device on this machine"), out


@pytest.mark.slow  # a fresh interpreter
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the script would measure")
def test_the_script_itself_exits_0_on_this_machine():
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu.py")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines() == [gpu.no_cuda_message()]


def test_the_arms_compare_sdpa_and_flash_attention_packed_and_padded():
    assert [name for name, *_ in gpu.arms(flash=False)] == [
        "vanilla, sdpa",
        "train.py, sdpa",
        "train.py, sdpa, packed",
    ]
    with_flash = gpu.arms(flash=True)
    assert len(with_flash) == 6 and with_flash[0][0] == gpu.BASELINE
    assert ("train.py, flash_attention_2, packed", "train.py", "flash_attention_2", True) in with_flash
    assert not any(who == "vanilla" and packed for _, who, _, packed in with_flash)


@pytest.mark.slow  # three short trainings of MiniLM on the CPU
@pytest.mark.skipif(not FORTUNES_DIR.is_dir(), reason="Debian's fortunes package is not installed")
def test_a_run_of_each_side_works_and_counts_the_same_tokens(tmp_path):
    files = gpu.data_files(tmp_path / "data", per_class=2)
    vanilla = gpu.run_vanilla(files, tmp_path / "vanilla", 0, "sdpa", False, 8, bf16=False)
    packed = gpu.run_train_py(files, tmp_path / "packed", 0, "sdpa", True, 8, bf16=False)
    switched = gpu.run_train_py(files, tmp_path / "eager", 0, "eager", False, 8, bf16=False)
    assert vanilla[0] > 0 and vanilla[0] == packed[0] == switched[0]  # the same texts, cut at the same length
    assert all(seconds > 0 for _, seconds, _ in (vanilla, packed, switched))
    assert (vanilla[2], packed[2], switched[2]) == (
        "sdpa",
        "sdpa",
        "eager",
    )  # the attention asked for is used
