"""bench/overhead.py: (slow) one tiny run, which times each model against vanilla and stores its report."""

import pytest
from helpers import named_backbone_folder
from overhead import main


@pytest.mark.slow  # builds four all-MiniLM-L6-v2 classifiers and times a few small batches
def test_a_tiny_run_stores_a_report_with_its_command_and_every_row(tmp_path, capsys):
    output = tmp_path / "results" / "overhead.md"
    argv = ["--poolings", "mean", "--label-counts", "4", "--rounds", "1", "--warmup", "0"]
    argv += ["--batch-size", "2", "--seq-len", "8", "--output", str(output)]
    main(argv)  # the exit status says whether the ratios met their targets: not asserted on a shared machine
    stored = output.read_text()
    assert stored.startswith(f"Command: python bench/overhead.py {' '.join(argv)}\n")
    rows = [line.split(" | ")[0].strip("| ") for line in stored.splitlines() if line.startswith("| ")][1:]
    assert rows == ["vanilla", "mean", "label_tokens, 4 labels"]
    assert stored.strip() in capsys.readouterr().out  # printed as stored


def test_backbone_path_is_the_folder_every_model_wraps(monkeypatch, tmp_path):
    import overhead

    folder = named_backbone_folder(tmp_path)
    built = []

    class Built(Exception):
        pass

    def build_candidates(backbone, args):
        built.append(backbone)
        raise Built

    monkeypatch.setattr(overhead, "build_candidates", build_candidates)
    with pytest.raises(Built):
        main(["--poolings", "mean", "--backbone", str(folder)])
    assert built == [str(folder)]
