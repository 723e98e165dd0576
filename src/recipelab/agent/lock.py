"""One orchestrator per campaign: an exclusive ``flock`` on ``<campaign>/.lock``.

The kernel drops a ``flock`` when its holder dies, even by SIGKILL, so a crashed campaign
never leaves a stale lock behind; the pid written inside only serves the error message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType

LOCK_FILE = ".lock"


class CampaignLocked(RuntimeError):
    """Another orchestrator holds this campaign."""


class CampaignLock:
    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise CampaignLocked(
                f"campaign {self.path.parent} is already being run by pid {holder}; stop that "
                "process first (Ctrl-C or kill), or watch it with 'recipelab status'.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> CampaignLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()
