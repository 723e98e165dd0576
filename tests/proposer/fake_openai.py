"""A real OpenAI-compatible HTTP server on 127.0.0.1 that answers from a script of faults.

The LLM proposer is tested against real sockets, the real ``openai`` client and real
timeouts, because its job is surviving what servers actually do: refuse connections, fail
with 500, rate-limit with 429 and Retry-After, hang past the timeout, reject
``response_format``, and reply with broken, out-of-schema, absurd or manipulative text.

Each ``POST /v1/chat/completions`` takes the next :class:`Reply` of the script (the
``default`` once the script is empty). ``GET /v1/models``, ``GET /health`` and
``GET /v1/health/ready`` answer as configured. Every request is recorded with its headers,
body and arrival time so tests can assert on what the client sent. Every delay is bounded
and cut short when the server stops; the ``fake`` fixture stops it at teardown.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from recipelab.proposer.llm_endpoint import LLMConfig

MODEL_ID = "fake-model"
TEST_API_KEY = "sk-test-3f9c2a7e1d5b4c8a"
AUTHORIZATION = "{authorization}"  # in a scripted text: replaced by the request's header
MAX_DELAY_S = 30.0
STOP_TIMEOUT_S = 5.0
GOOD_EDIT: dict[str, Any] = {"optimizer.lr": 0.0042, "schedule.kind": "linear"}
GOOD_HYPOTHESIS = "a lower peak rate with linear decay settles faster in 20 steps"


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a completion with ``content``, an error ``status``, or exactly
    the bytes ``body`` (sent as ``content_type``) for a 200 that is not a chat completion."""

    status: int = 200
    content: str = ""
    message: str = "scripted failure"  # the error message of a non-200 answer
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0  # waited before answering: past the client timeout, a hang
    body: bytes | None = None
    content_type: str = "application/json"

    def __post_init__(self) -> None:
        assert 0.0 <= self.delay_s <= MAX_DELAY_S, "keep every delay bounded"


def good(edit: dict[str, Any] | None = None, hypothesis: str = GOOD_HYPOTHESIS,
         delay_s: float = 0.0) -> Reply:
    """A valid reply for the default search space of the tiny proxy."""
    return Reply(content=json.dumps({"edit": GOOD_EDIT if edit is None else edit,
                                     "hypothesis": hypothesis}), delay_s=delay_s)


GOOD_CHANGES: list[dict[str, Any]] = [{"knob": "optimizer.lr", "value": 0.0042}]


def steered(pick: int = 1, changes: list[dict[str, Any]] | None = None,
            hypothesis: str = GOOD_HYPOTHESIS) -> Reply:
    """A valid steering reply: candidate ``pick`` with ``changes`` (by default the lr)."""
    return Reply(content=json.dumps({"pick": pick,
                                     "changes": GOOD_CHANGES if changes is None else changes,
                                     "hypothesis": hypothesis}))


def text(content: str) -> Reply:
    """An assistant message with exactly ``content``."""
    return Reply(content=content)


def error(status: int, message: str = "scripted failure", *,
          retry_after: str | None = None) -> Reply:
    headers = (("Retry-After", retry_after),) if retry_after is not None else ()
    return Reply(status=status, message=message, headers=headers)


def hang(seconds: float) -> Reply:
    """A good reply that arrives only after ``seconds``."""
    return good(delay_s=seconds)


def raw(body: bytes | str, content_type: str = "application/json") -> Reply:
    """A 200 carrying exactly ``body``: what a proxy, a broken server or a tool call sends."""
    return Reply(body=body.encode() if isinstance(body, str) else body, content_type=content_type)


def completion_with(choices: list[Any]) -> Reply:
    """A chat completion whose ``choices`` are exactly ``choices``."""
    return raw(json.dumps({**_completion(MODEL_ID, ""), "choices": choices}))




def refuse_response_format() -> Reply:
    return error(400, "response_format of type json_schema is not supported by this server")


def refuse_guided_json() -> Reply:
    return error(400, "Extra inputs are not permitted: guided_json")


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    raw: str
    at: float  # time.monotonic() on arrival

    @property
    def body(self) -> Any:
        return json.loads(self.raw) if self.raw else None


class FakeOpenAI:
    """The server; configure ``default``, ``health`` and ``loading_probes``, then ``script``."""

    def __init__(self, model: str = MODEL_ID) -> None:
        self.model = model
        self.default = good()
        # llama.cpp-like by default: /health exists, NIM's route does not.
        self.health: dict[str, int] = {"/health": 200, "/v1/health/ready": 404}
        self.loading_probes = 0  # health probes answered 503 before the model is loaded
        self.received: list[Received] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the server first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering; later connections are refused. Hung handlers wake at once."""
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def chat_requests(self) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == "/v1/chat/completions"]

    def wait_for_chat_requests(self, count: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Return once ``count`` chat requests have arrived (bounded, like every wait here)."""
        deadline = time.monotonic() + timeout_s
        while len(self.chat_requests()) < count:
            assert time.monotonic() < deadline, f"fewer than {count} chat requests arrived"
            time.sleep(0.005)

    def requests_to(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]

    def record(self, received: Received) -> None:
        with self._lock:
            self.received.append(received)

    def next_reply(self) -> Reply:
        with self._lock:
            return self._script.popleft() if self._script else self.default

    def health_status(self, path: str) -> int:
        with self._lock:
            status = self.health.get(path, 404)
            if status == 200 and self.loading_probes > 0:
                self.loading_probes -= 1
                return 503
            return status


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeOpenAI) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        fake = self._receive("")
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [
                {"id": fake.model, "object": "model", "created": 0, "owned_by": "fake"}]})
        else:
            status = fake.health_status(self.path)
            self._send(status, {"status": "ready" if status == 200 else "unavailable"})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        fake = self._receive(raw)
        if self.path != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        reply = fake.next_reply()
        if fake.stopping.wait(reply.delay_s):
            return
        auth = self.headers.get("Authorization", "")
        if reply.body is not None:
            self._send_bytes(200, reply.body, reply.content_type)
            return
        if reply.status != 200:
            message = reply.message.replace(AUTHORIZATION, auth)
            self._send(reply.status, {"error": {"message": message, "type": "scripted",
                                                "code": reply.status}}, reply.headers)
            return
        self._send(200, _completion(fake.model, reply.content.replace(AUTHORIZATION, auth)))

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests assert on ``received`` rather than reading a log."""

    def _receive(self, raw: str) -> FakeOpenAI:
        fake: FakeOpenAI = self.server.fake  # type: ignore[attr-defined]
        fake.record(Received(self.command, self.path,
                             {k.lower(): v for k, v in self.headers.items()}, raw,
                             time.monotonic()))
        return fake

    def _send(self, status: int, payload: dict[str, Any],
              headers: tuple[tuple[str, str], ...] = ()) -> None:
        self._send_bytes(status, json.dumps(payload).encode(), "application/json", headers)

    def _send_bytes(self, status: int, data: bytes, content_type: str,
                    headers: tuple[tuple[str, str], ...] = ()) -> None:
        try:
            self.send_response(status)
            for name, value in (("Content-Type", content_type),
                                ("Content-Length", str(len(data))), *headers):
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up first (a timeout test): nothing to answer


def _completion(model: str, content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


PROXY_PAGE = ("<!DOCTYPE html><html><head><title>Sign in</title></head><body><h1>Corporate "
              "proxy</h1><p>Please sign in to continue.</p></body></html>")
TOOL_CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "propose_edit", "arguments": json.dumps({"edit": GOOD_EDIT})}}]}

NOT_A_COMPLETION: dict[str, Reply] = {
    "html page": raw(PROXY_PAGE, "text/html; charset=utf-8"),
    "json without choices": raw(json.dumps({"object": "chat.completion", "model": MODEL_ID})),
    "empty choices": completion_with([]),
    "choice without message": completion_with([{"index": 0, "finish_reason": "stop"}]),
    "null content": completion_with([{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": None}}]),
    "tool call": completion_with([{"index": 0, "finish_reason": "tool_calls",
                                   "message": TOOL_CALL}]),
    # cut short by a proxy, with a Content-Length that matches what is sent
    "truncated json": raw(json.dumps(_completion(MODEL_ID, good().content))[:120]),
    # a good completion, labelled as something else
    "wrong content-type": raw(json.dumps(_completion(MODEL_ID, good().content)), "text/plain"),
}
"""Each kind of 200 answer that is not a chat completion with text, by name."""


def unused_url() -> str:
    """An endpoint where nothing listens: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def fast_config(base_url: str, **overrides: Any) -> LLMConfig:
    """A config with test-sized timeouts and backoff, so every fault resolves in well under
    a second."""
    values: dict[str, Any] = {
        "base_url": base_url, "api_key": TEST_API_KEY, "request_timeout_s": 2.0,
        "readiness_timeout_s": 2.0, "readiness_poll_s": 0.02, "backoff_base_s": 0.01,
        "backoff_max_s": 0.05, "max_retries": 3, "max_attempts": 3}
    return LLMConfig(**(values | overrides))


@pytest.fixture(name="fake")
def fake_openai_fixture() -> Iterator[FakeOpenAI]:
    """A started :class:`FakeOpenAI`, stopped at teardown."""
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()
