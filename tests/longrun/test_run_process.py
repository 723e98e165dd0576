"""A long-run process's own guards: one writer per run directory, a SIGTERM that becomes a
flag (checkpoint, then exit), and events written as JSON lines."""

from __future__ import annotations

import json
import os
import signal
from io import StringIO
from pathlib import Path

import pytest

from recipelab.longrun.run_process import Events, RunLocked, run_lock, sigterm_flag


def test_a_second_writer_of_a_run_directory_is_refused_until_the_first_is_done(
        tmp_path: Path) -> None:
    held = pytest.raises(RunLocked, match=rf"pretrain pid {os.getpid()} .* still writing to")
    with run_lock(tmp_path), held, run_lock(tmp_path):
        pass
    with run_lock(tmp_path):  # released
        pass


def test_sigterm_sets_the_flag_instead_of_killing_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_flag() as flag:
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag == [True]
    assert signal.getsignal(signal.SIGTERM) == before


def test_events_are_json_lines_and_a_run_without_a_file_writes_none(tmp_path: Path) -> None:
    events = Events(tmp_path / "events.jsonl", "night", "run-1", StringIO())
    events.emit("pretrain_start", step=0)
    events.close()
    [line] = (tmp_path / "events.jsonl").read_text().splitlines()
    assert json.loads(line)["event"] == "pretrain_start"
    Events(None, "night", "run-1", StringIO()).emit("ignored")  # a dry run: nothing to write
