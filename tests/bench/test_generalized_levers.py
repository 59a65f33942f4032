"""bench/generalized_zero_shot.py's parts: the generalized scores (seen rows, unseen rows, harmonic mean, with a margin
taken off the trained labels) against a count by hand, and the label subsets of its training arm."""

import numpy as np
import pytest
import torch
from generalized_zero_shot import label_subset, scores


def test_scores_count_the_seen_and_unseen_rows_apart_and_the_margin_moves_answers():
    # two trained labels, one unseen; rows 0-1 seen (label 0), rows 2-3 unseen (label 2)
    logits = np.array([[3.0, 0.0, 2.5], [1.0, 2.0, 0.0], [2.0, 0.0, 1.0], [0.0, 0.5, 1.0]])
    targets, is_seen = np.array([0, 0, 2, 2]), np.array([True, True, False, False])
    assert scores(logits, targets, is_seen, 2) == (0.5, 0.5, 0.5)
    # a margin of 1.2 off the trained labels: row 0 turns to the unseen label, row 2 to its own
    assert scores(logits, targets, is_seen, 2, 1.2) == (0.0, 1.0, 0.0)


def test_a_label_subset_keeps_the_batchs_labels_and_renumbers_its_targets():
    generator = torch.Generator().manual_seed(0)
    targets = [5, 1, 5, 7]
    chosen, renumbered = label_subset(targets, 10, generator)
    assert len(chosen) == 5 and {1, 5, 7} <= set(chosen) and chosen == sorted(chosen)
    assert [chosen[index] for index in renumbered] == targets
    # more labels in the batch than half: all of them, and no other
    assert label_subset([0, 1, 2, 3], 6, generator)[0] == [0, 1, 2, 3]


def test_tasks_backbone_and_skipped_subsets_reach_the_runs_and_the_report(monkeypatch, tmp_path):
    """--tasks, --skip-label-subsets and --backbone (the base-size report's command) reach the train.py runs and the
    report: only the tasks asked, no label-subsets run, the backbone given."""
    import sys

    import generalized_zero_shot as bench

    runs = []

    def train(data, output, log, subsets=False, reuse=False, backbone="minilm"):
        runs.append((data.name, subsets, backbone))
        return {"zero_shot_accuracy": 0.5}

    monkeypatch.setattr(bench, "train", train)
    monkeypatch.setattr(bench, "levers", lambda *args, **kwargs: ([("lever", (0.5, 0.25, 1 / 3))], 1.0))
    monkeypatch.setitem(bench.TASKS, "fortunes", lambda folder: None)
    argv = ["--tasks", "fortunes", "--skip-label-subsets", "--backbone", "mpnet", "--work", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", ["generalized_zero_shot.py", *argv, "--output", str(tmp_path / "r.md")])
    bench.main()
    assert runs == [("fortunes", False, "mpnet")]
    report = (tmp_path / "r.md").read_text()
    assert (
        "## fortunes" in report
        and "## sections" not in report
        and "| lever | 0.500 | 0.250 | 0.333 |" in report
    )
    assert "--tasks fortunes --skip-label-subsets --backbone mpnet" in report
    assert "sentence-transformers/all-mpnet-base-v2 (bench/backbones.py)" in report
    monkeypatch.setattr(sys, "argv", ["generalized_zero_shot.py", "--tasks", "nope"])
    with pytest.raises(SystemExit):
        bench.main()
