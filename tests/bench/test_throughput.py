"""bench/throughput.py: (slow) one tiny round of its four runs on fortunes, which stores a report with its command.
The script had stopped at its vanilla run since the collator took the run's task kinds; this runs every arm."""

import pytest
from corpora.fortunes import FortunesMissing, build_fortunes
from throughput import DEFAULTS, MEAN, RANDOM_ORDER, VANILLA, main


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.slow  # trains all-MiniLM-L6-v2 four times for one epoch on a few dozen quotations
def test_a_tiny_round_runs_every_arm_and_stores_its_report(tmp_path, capsys):
    try:
        build_fortunes(max_per_class=1)
    except FortunesMissing as error:
        pytest.skip(str(error))
    output = tmp_path / "results" / "throughput.md"
    argv = ["--datasets", "fortunes", "--rounds", "1", "--per-class", "5", "--output", str(output)]
    assert main(argv) == 0
    stored = output.read_text()
    assert stored.startswith(f"Command: python bench/throughput.py {' '.join(argv)}\n")
    rows = {line.split(" | ")[0].strip("| "): line for line in stored.splitlines() if line.startswith("| ")}
    assert [name for name in rows if name != "run"] == [VANILLA, RANDOM_ORDER, DEFAULTS, MEAN]
    # each ratio is against vanilla's own round
    assert rows[VANILLA].split(" | ")[3] == "1.00x / 1.00x / 1.00x"
    # length-grouped batches carry more real tokens than random ones, in every phase
    real = {
        name: [float(value) for value in rows[name].split(" | ")[1].split(" / ")]
        for name in rows
        if name != "run"
    }
    for grouped in (DEFAULTS, MEAN):
        assert all(g > r for g, r in zip(real[grouped], real[RANDOM_ORDER], strict=True))
    assert stored.strip() in capsys.readouterr().out
