"""What a long-run process holds while it trains: its event log, an exclusive lock on its
directory, and a flag SIGTERM sets instead of killing it."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from rich.console import Console

from recipelab.errors import RecipelabError
from recipelab.eventlog import JsonlSink, event_logger
from recipelab.locking import FileLock, LockHeld

LOCK_FILE = ".lock"


class Events:
    """The run's events through the one event pipeline (:mod:`recipelab.eventlog`: secrets
    redacted, JSON lines in ``events.jsonl``, a readable line on the console); rank 0 only."""

    def __init__(self, path: Path | None, campaign: str, run: str, console: TextIO) -> None:
        self.log: Any = None
        self._sink: JsonlSink | None = None
        if path is not None:
            self.log, self._sink = event_logger(path, Console(file=console), campaign=campaign,
                                                run=run)

    def emit(self, event: str, level: str = "info", **fields: Any) -> None:
        if self.log is not None:
            getattr(self.log, level)(event, **fields)

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()


class RunLocked(RecipelabError, ValueError):
    """Another process is writing to the run directory."""


@contextmanager
def run_lock(out: Path) -> Iterator[None]:
    """An exclusive lock on ``out`` for as long as a run writes to it.

    torchrun starts its workers in sessions of their own, so killing the launcher can leave
    a rank 0 training on; a resume into the same directory would then interleave two runs'
    metrics and checkpoints. The lock refuses the second run instead.
    """
    try:
        with FileLock(out / LOCK_FILE, f"pretrain pid {os.getpid()} on {socket.gethostname()}"):
            yield
    except LockHeld as held:
        raise RunLocked(
            f"{held.holder} is still writing to {out}: stop it (torchrun's workers too; they "
            "outlive a killed launcher) before resuming, or give another --out") from None


@contextmanager
def sigterm_flag() -> Iterator[list[bool]]:
    """A flag SIGTERM sets (instead of killing the process), so the run can checkpoint at
    the end of the step and exit for its watchdog to resume it."""
    flag = [False]

    def handle(signum: int, frame: FrameType | None) -> None:
        flag[0] = True

    try:
        previous = signal.signal(signal.SIGTERM, handle)
    except ValueError:  # not the main thread: leave SIGTERM as it is
        yield flag
        return
    try:
        yield flag
    finally:
        signal.signal(signal.SIGTERM, previous)
