"""Crash-safe file writes shared by the trainer, the store and the agent."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

# How a full disk looks to a writer: no space, a file over RLIMIT_FSIZE, or a quota.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})


def is_disk_full(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS


def fsync_dir(path: Path) -> None:
    """Persist a directory entry (a rename or a new file) across a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so a reader sees the old file or the new one, never half.

    The bytes go to a temporary file in the same directory, are fsynced, and then renamed
    over the destination (rename is atomic within one filesystem).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a half-written file must not hold on to space on a full disk
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())
