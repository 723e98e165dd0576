"""The one file lock (:mod:`recipelab.locking`): one holder at a time, a second is refused
with the holder's note, and a holder's death releases it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from recipelab.locking import FileLock, LockHeld

HOLD = """
import sys, time
from pathlib import Path
from recipelab.locking import FileLock
lock = FileLock(Path(sys.argv[1]), "the other process")
lock.acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_holder_is_refused_with_the_first_ones_note(tmp_path: Path) -> None:
    path = tmp_path / "campaign.lock"
    with FileLock(path, "recipelab run (pid 1)"):
        with pytest.raises(LockHeld, match=r"recipelab run \(pid 1\)") as refused:
            FileLock(path).acquire()
        assert refused.value.holder == "recipelab run (pid 1)"
    with FileLock(path, "the next run"):  # released on leaving
        assert path.read_text() == "the next run\n"


def test_a_holder_killed_by_sigkill_leaves_no_stale_lock(tmp_path: Path) -> None:
    path = tmp_path / "campaign.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld, match="the other process"):
            FileLock(path).acquire()
    finally:
        holder.kill()
        holder.wait()
    with FileLock(path, "after the crash"):
        pass
