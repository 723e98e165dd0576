"""``recipelab`` started as its own process, as a user's shell starts it, and what its
errors look like."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def closed_port() -> int:
    """A localhost port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def recipelab(*args: str, cwd: Path, env: dict[str, str] | None = None,
              timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``recipelab ARGS`` as its own process, as a user starts it."""
    return subprocess.run([sys.executable, "-m", "recipelab", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=timeout, check=False,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]
