"""One orchestrator per campaign: an exclusive lock on ``<campaign>/.lock``
(:class:`recipelab.locking.FileLock`, which a crashed holder never leaves behind)."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from recipelab.errors import RecipelabError
from recipelab.locking import FileLock, LockHeld

LOCK_FILE = ".lock"


class CampaignLocked(RecipelabError, RuntimeError):
    """Another orchestrator holds this campaign."""


class CampaignLock:
    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE
        self._lock = FileLock(self.path)

    def acquire(self) -> None:
        try:
            self._lock.acquire()
        except LockHeld as held:
            raise CampaignLocked(
                f"campaign {self.path.parent} is already being run by {held.holder}; stop that "
                "process first (Ctrl-C or kill), or watch it with 'recipelab status'.") from None

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> CampaignLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()
