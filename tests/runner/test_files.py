"""The file contract between the campaign directory and a trial that trains elsewhere
(:mod:`recipelab.runner.files`): a checkpoint travels as its newest step and lands whole or
not at all; the node a task runs on is kept in the trial's home folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipelab.runner import files
from recipelab.runner.files import (
    latest_step,
    pack_checkpoint,
    read_node,
    unpack_checkpoint,
    write_node,
)


def write_checkpoint(directory: Path, step: str, weights: bytes) -> None:
    """A checkpoint as the trainer leaves it: the step's folder, then ``latest``."""
    (directory / step).mkdir(parents=True)
    (directory / step / "model.safetensors").write_bytes(weights)
    (directory / step / "state.json").write_text("{}")
    (directory / "latest").write_text(step)


def test_a_checkpoint_travels_as_its_newest_step_and_replaces_the_older_one(tmp_path: Path) -> None:
    there, home = tmp_path / "scratch", tmp_path / "home"
    write_checkpoint(there, "step-10", b"old")
    write_checkpoint(home, "step-10", b"old")
    (there / "latest").unlink()
    write_checkpoint(there, "step-20", b"new")
    packed = pack_checkpoint(there)
    assert packed is not None
    assert sorted(packed) == ["latest", "step-20/model.safetensors", "step-20/state.json"]
    unpack_checkpoint(home, packed)
    assert latest_step(home) == "step-20"
    assert (home / "step-20" / "model.safetensors").read_bytes() == b"new"
    assert not (home / "step-10").exists()  # one checkpoint kept: the newest


def test_an_unpack_cut_short_leaves_the_previous_checkpoint_usable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``latest`` moves last and old steps go after it: a disk that fills up before then
    leaves ``latest`` naming the whole previous checkpoint, which a resume reads."""
    there, home = tmp_path / "scratch", tmp_path / "home"
    write_checkpoint(home, "step-10", b"old")
    write_checkpoint(there, "step-20", b"new")
    packed = pack_checkpoint(there)
    assert packed is not None

    def disk_full(path: Path, text: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "atomic_write_text", disk_full)  # the pointer's write fails
    with pytest.raises(OSError, match="No space"):
        unpack_checkpoint(home, packed)
    assert latest_step(home) == "step-10"
    assert (home / "step-10" / "model.safetensors").read_bytes() == b"old"


def test_no_checkpoint_packs_to_none(tmp_path: Path) -> None:
    assert pack_checkpoint(tmp_path / "none") is None
    assert latest_step(tmp_path / "none") is None
    (tmp_path / "dangling").mkdir()
    (tmp_path / "dangling" / "latest").write_text("step-5")  # its folder is gone
    assert pack_checkpoint(tmp_path / "dangling") is None


def test_the_node_a_task_runs_on_is_kept_in_its_home_folder(tmp_path: Path) -> None:
    assert read_node(tmp_path) is None
    write_node(tmp_path, "vm/e0e6b21b")
    assert read_node(tmp_path) == "vm/e0e6b21b"
