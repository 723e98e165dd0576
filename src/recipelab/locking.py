"""The one file lock: an exclusive ``flock`` with a note saying who holds it.

The kernel drops a ``flock`` when its holder dies, even by SIGKILL, so a crashed process
never leaves a stale lock behind; the note written inside only serves error messages. Used
for one orchestrator per campaign, one writer per long-run directory, and one process
tokenizing a corpus into the cache while the others wait for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType

from recipelab.errors import RecipelabError

__all__ = ["FileLock", "LockHeld"]


class LockHeld(RecipelabError):
    """The lock is held by another process; ``holder`` is its note."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is locked by {holder}")
        self.path, self.holder = path, holder


class FileLock:
    """``with FileLock(path, note):`` holds an exclusive lock on ``path`` (created if
    missing). ``wait=False`` raises :class:`LockHeld` instead of waiting for the holder."""

    def __init__(self, path: Path, note: str | None = None, *, wait: bool = False) -> None:
        self.path, self.wait = path, wait
        self.note = note or f"pid {os.getpid()}"
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise LockHeld(self.path, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{self.note}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()
