"""Crash-safe writes (:mod:`recipelab.fsutil`): a reader sees the old file or the new one,
never half, and a write that fails on a full disk leaves no temporary file behind."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from recipelab.fsutil import atomic_write_bytes, atomic_write_text, is_disk_full


def test_a_write_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    atomic_write_text(path, "old")
    atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_a_write_the_disk_refuses_keeps_the_old_file_and_no_temporary_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "result.json"
    atomic_write_text(path, "old")

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("recipelab.fsutil.os.fsync", no_space)
    with pytest.raises(OSError) as raised:
        atomic_write_text(path, "new")
    assert is_disk_full(raised.value)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


@pytest.mark.parametrize(("error", "full"), [
    (OSError(errno.ENOSPC, "no space"), True), (OSError(errno.EFBIG, "file too large"), True),
    (OSError(errno.EDQUOT, "quota"), True), (OSError(errno.EACCES, "denied"), False),
    (ValueError("not an OSError"), False)])
def test_a_full_disk_is_told_from_other_errors(error: BaseException, full: bool) -> None:
    assert is_disk_full(error) is full
