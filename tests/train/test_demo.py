"""pooled-train --demo DIR: the quickstart's config files and data for an install without configs/ and data/. The
files are the repository's (same settings, same rows) with absolute paths, so they run from any folder; training
them from a pip install is tests/test_wheel.py's."""

import os

import pytest
from helpers import REPO

from pooled_models.train.arguments import chosen_model_settings, parse_arguments, read_config_file
from pooled_models.train.cli import main
from pooled_models.train.tasks import task_specs

PATH_SETTINGS = ("train_file", "validation_file", "test_file", "output_dir")


def settings_without_paths(values):
    """A config's settings with its file paths reduced to their last two parts (data/demo/train.csv -> demo/train.csv),
    task by task."""
    shown = {}
    for key, value in values.items():
        if key == "tasks":
            value = {name: settings_without_paths(task) for name, task in value.items()}
        elif key in PATH_SETTINGS:
            value = "/".join(str(value).split("/")[-2:])
        shown[key] = value
    return shown


def test_demo_writes_the_repository_configs_with_absolute_paths_and_its_data(tmp_path, capsys):
    folder = tmp_path / "quickstart"
    assert main(["--demo", str(folder)]) == 0
    printed = capsys.readouterr().out
    assert f"{folder / 'quickstart.yaml'}" in printed.splitlines()[-1]  # the command to run next comes last
    for name in ("quickstart.yaml", "multitask_demo.yaml"):
        written = read_config_file(folder / name)
        assert settings_without_paths(written) == settings_without_paths(
            read_config_file(REPO / "configs" / name)
        )
        paths = [written.get(key) for key in PATH_SETTINGS] + [
            task[key] for task in written.get("tasks", {}).values() for key in PATH_SETTINGS if key in task
        ]
        assert all(os.path.isabs(path) for path in paths if path), paths
    for data in ("demo", "demo_multitask"):
        committed = sorted(path.name for path in (REPO / "data" / data).iterdir())
        assert sorted(path.name for path in (folder / "data" / data).iterdir()) == committed
        for name in committed:
            assert (folder / "data" / data / name).read_bytes() == (REPO / "data" / data / name).read_bytes()


@pytest.mark.parametrize("config", ["quickstart.yaml", "multitask_demo.yaml"])
def test_the_written_configs_parse_from_another_folder(tmp_path, monkeypatch, config):
    main(["--demo", str(tmp_path / "demo")])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    model_args, data_args, training_args = parse_arguments([str(tmp_path / "demo" / config)])
    specs = task_specs(data_args, chosen_model_settings(model_args))
    for spec in specs:
        for path in spec.data.files().values():
            assert os.path.isfile(path), path
    assert training_args.output_dir == str(tmp_path / "demo" / "outputs" / config.removesuffix(".yaml"))


def test_demo_replaces_nothing_and_its_advice_works(tmp_path, capsys):
    folder = tmp_path / "quickstart"
    main(["--demo", str(folder)])
    (folder / "quickstart.yaml").write_text("# edited\n")
    assert main(["--demo", str(folder)]) == 2
    error = capsys.readouterr().err
    assert "quickstart.yaml and 7 more of its files exist already" in error and "Choose a new folder" in error
    assert (folder / "quickstart.yaml").read_text() == "# edited\n"
    assert main(["--demo", str(tmp_path / "another")]) == 0  # the advice: a new folder


def test_demo_without_a_folder_says_how_to_call_it_and_that_works(tmp_path, capsys, monkeypatch):
    assert main(["--demo"]) == 2
    error = capsys.readouterr().err
    assert "--demo takes one folder and nothing else, e.g. " in error
    example = error.strip().split("e.g. ")[1].split()
    monkeypatch.chdir(tmp_path)
    assert main(example[example.index("--demo") :]) == 0
    assert (tmp_path / "quickstart" / "quickstart.yaml").is_file()
