"""One OpenAI-compatible server, talked to patiently: readiness, retries, structured output
and scrubbing.

Servers differ in how they constrain output, so ``structured_output="auto"`` starts with
OpenAI's ``response_format`` JSON schema and, when the server refuses it, falls back to
vLLM/NIM's ``guided_json`` and finally to a schema described only in the prompt. Local
servers also load slowly and stall under load: readiness is polled before the first call,
and only transient errors (connection, timeout, 408, 409, 429, 5xx) are retried with
jittered exponential backoff, honouring Retry-After. The client's own retries are off so
the two policies never multiply.

The API key is a :class:`~pydantic.SecretStr`: it goes into the Authorization header and
nowhere else, and is scrubbed from every error message in case a server echoes it back.
Credentials written into the base URL (``http://user:secret@host/v1``) are scrubbed the same
way. A 200 that is not a chat completion is a :class:`BadReply`, asked again like an invalid
reply.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar, cast

import httpx2
import openai
from openai.types.chat import ChatCompletionMessageParam
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
)
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from recipelab import environment
from recipelab.errors import RecipelabError
from recipelab.proposer.llm_reply import INPUT_CHARS
from recipelab.proposer.prompt import (
    PROMPT_BUDGET_CHARS,
    Message,
)
from recipelab.redaction import MIN_SECRET_CHARS, redact_text, redact_url, url_secrets
from recipelab.text import clip

StructuredOutput = Literal["auto", "json_schema", "json_object", "guided_json", "nvext", "prompt"]
Mode = Literal["json_schema", "json_object", "guided_json", "nvext", "prompt"]
AUTO_MODES: tuple[Mode, ...] = ("json_schema", "guided_json", "prompt")

ENV_BASE_URL = environment.LLM_BASE_URL
ENV_MODEL = environment.LLM_MODEL
ENV_API_KEYS = environment.LLM_API_KEYS
PLACEHOLDER_API_KEY = "not-needed"  # local servers ignore the key; the client wants one

RETRYABLE_STATUSES = frozenset({408, 409, 429})
ABSENT_STATUSES = frozenset({404, 405})  # a readiness route this kind of server lacks
KEY_REFUSED_STATUSES = frozenset({401, 403})
STRUCTURED_OUTPUT_WORDS = ("response_format", "json_schema", "guided_json", "nvext")
# llama-cpp-python answers an unknown response_format type with a 500 (its request model's
# literal_error), not a 400, so a 500 naming the structured-output parameters counts too.
REFUSAL_STATUSES = frozenset({400, 422, 500})
PROBE_TIMEOUT_S = 5.0
REPLY_CHARS = 8_000  # max_tokens bounds a real reply; this bounds a broken server's
CAUSE_CHARS = 300

T = TypeVar("T")
LINE_BREAKS = re.compile(r"[\r\n]+")


class LLMUnavailable(RecipelabError, RuntimeError):
    """The endpoint is down, keeps failing or keeps replying nonsense.

    The message names the endpoint and the cause, never the API key. A hybrid proposer
    answers it by falling back to its classical proposer.
    """


class LLMConfig(BaseModel):
    """Where the model is served and how patiently to talk to it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(pattern=r"^https?://\S+$")
    model: str | None = None  # None: the first id GET /v1/models lists
    api_key: SecretStr = SecretStr(PLACEHOLDER_API_KEY)
    structured_output: StructuredOutput = "auto"
    request_timeout_s: float = Field(default=60.0, gt=0)
    readiness_timeout_s: float = Field(default=120.0, ge=0)
    readiness_poll_s: float = Field(default=1.0, gt=0)
    max_attempts: int = Field(default=3, ge=1)  # replies per proposal, re-asking invalid ones
    max_retries: int = Field(default=4, ge=0)  # extra tries of one request on transient errors
    backoff_base_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)
    retry_after_max_s: float = Field(default=60.0, ge=0)
    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    max_tokens: int = Field(default=512, ge=1)
    # ~4 characters a token: the default fits a 4k-token context with room for the reply.
    prompt_budget_chars: int = Field(default=PROMPT_BUDGET_CHARS, ge=1_000)

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        """As pydantic's, with the base URL's credentials redacted like the key."""
        for name, value in super().__repr_args__():
            yield name, (redact_url(value) if name == "base_url" and isinstance(value, str)
                         else value)

    @classmethod
    def from_env(cls, **overrides: Any) -> LLMConfig:
        """A config from ``RECIPELAB_LLM_BASE_URL``, ``RECIPELAB_LLM_MODEL`` and
        ``RECIPELAB_LLM_API_KEY`` (else ``OPENAI_API_KEY``, else a placeholder), with
        ``overrides`` taking precedence."""
        key = next((value for name in ENV_API_KEYS if (value := environment.read(name))),
                   PLACEHOLDER_API_KEY)
        found = {"base_url": environment.read(ENV_BASE_URL), "model": environment.read(ENV_MODEL),
                 "api_key": key}
        values = {name: value for name, value in found.items() if value is not None} | overrides
        if values.get("base_url") is None:
            raise ValueError(f"no LLM endpoint: set {ENV_BASE_URL} (for example "
                             "http://localhost:8000/v1 for a NIM) or pass base_url")
        return cls(**values)


class ModeRefused(RecipelabError):
    """The server rejected the structured-output parameters of the request."""


class BadReply(RecipelabError, ValueError):
    """A 200 answer that is not a chat completion with text: asked again like an invalid
    reply, since a proxy's error page or a model's tool call may well not happen twice."""


def reply_text(content_type: str, body: bytes) -> str:
    """The assistant's text from a chat completion's raw HTTP body.

    Raises :class:`BadReply` naming the problem (with the start of the body) when the body
    is not JSON, not a completion, has no choice or message, or carries no text.
    """
    start = clip(body[:200].decode("utf-8", errors="replace"), INPUT_CHARS)
    media_type = content_type.split(";", 1)[0].strip().lower()
    if not media_type.endswith("json"):
        raise BadReply(f"the server answered 200 with content-type {media_type or 'none'!r}, "
                       f"not a JSON chat completion (the body starts {start!r})")
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise BadReply(f"the body of the 200 answer is not valid JSON ({exc}; it starts "
                       f"{start!r}): truncated or garbled on the way") from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list):
        raise BadReply(f"the 200 answer is not a chat completion: no 'choices' list "
                       f"(the body starts {start!r})")
    if not choices:
        raise BadReply("the chat completion holds no choice ('choices' is empty)")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise BadReply("the chat completion's first choice holds no 'message'")
    content = message.get("content")
    if content is None and message.get("tool_calls"):
        raise BadReply("the model called a tool instead of answering in text; reply with "
                       "one JSON object as the message content")
    if content is None:
        raise BadReply("the chat completion's message has no text ('content' is null)")
    if not isinstance(content, str):
        raise BadReply(f"the message content is {type(content).__name__}, not text")
    return content


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: the server may answer next time. 400/401/403/404/422 never are."""
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    return isinstance(exc, openai.APIStatusError) and (
        exc.status_code in RETRYABLE_STATUSES or exc.status_code >= 500)


def retry_after_s(exc: BaseException | None) -> float | None:
    """The delay the server asked for (``retry-after-ms`` or ``retry-after`` seconds)."""
    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        try:
            return max(0.0, float(headers.get(name, "")) * scale)
        except ValueError:
            continue  # absent, or an HTTP date: use our own backoff
    return None


def _refuses_structured_output(exc: openai.APIStatusError) -> bool:
    text = f"{exc.message} {exc.body}".lower()
    return (exc.status_code in REFUSAL_STATUSES
            and any(word in text for word in STRUCTURED_OUTPUT_WORDS))


def modes_after_refusal(refused: Mode, message: str, remaining: list[Mode]) -> list[Mode]:
    """The modes ``auto`` tries after the server refused ``refused``.

    llama-cpp-python refuses ``json_schema`` by listing the ``response_format`` types it
    admits, ``'text' or 'json_object'``; its ``json_object`` with a schema is the form it
    constrains, and it silently ignores ``guided_json``, so that refusal goes straight to
    ``json_object``.
    """
    if refused == "json_schema" and "'json_object'" in message:
        return ["json_object", *(mode for mode in remaining if mode != "guided_json")]
    return remaining


def decoding_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The reply schema in the plain form grammar-constrained decoders handle best.

    Servers turn the schema into a grammar, and several (llama.cpp among them) follow
    ``$ref``, ``anyOf [T, null]`` or ``pattern`` poorly or not at all, which lets a small
    model wander out of JSON. So references are inlined, an optional knob is simply not
    required rather than nullable, and patterns and titles are dropped. The reply is still
    validated against the full pydantic model.
    """
    definitions = schema.get("$defs", {})

    def simplify(node: Any) -> Any:
        if isinstance(node, list):
            return [simplify(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return simplify(definitions[node["$ref"].rsplit("/", 1)[-1]])
        options = node.get("anyOf")
        if isinstance(options, list):
            concrete = [o for o in options if o != {"type": "null"}]
            if len(concrete) == 1:
                extra = {k: v for k, v in node.items() if k not in ("anyOf", "default")}
                return simplify({**concrete[0], **extra})
        return {key: simplify(value) for key, value in node.items()
                if key not in ("$defs", "title", "pattern", "default")}

    simplified: dict[str, Any] = simplify(schema)
    return simplified


def _constraint(mode: Mode, schema: dict[str, Any]) -> dict[str, Any]:
    """The request parameters that make the server follow ``schema`` in ``mode``."""
    if mode == "json_schema":
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "edit", "schema": schema,
                                                    "strict": True}}}
    if mode == "json_object":  # llama-cpp-python's server: a schema-constrained JSON object
        return {"extra_body": {"response_format": {"type": "json_object", "schema": schema}}}
    if mode == "guided_json":
        return {"extra_body": {"guided_json": schema}}
    if mode == "nvext":
        return {"extra_body": {"nvext": {"guided_json": schema}}}
    return {}


class Endpoint:
    """One OpenAI-compatible server: readiness, the model id, retried calls, scrubbing."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.url = config.base_url.rstrip("/")
        self.shown_url = redact_url(self.url)
        root = self.url.removesuffix("/v1")
        self.probes = (f"{root}/v1/health/ready", f"{root}/health", f"{self.url}/models")
        self._key = config.api_key.get_secret_value()
        # Placeholders are no secret, and scrubbing a common word would garble replies.
        key = ([self._key] if len(self._key) >= MIN_SECRET_CHARS
               and self._key != PLACEHOLDER_API_KEY else [])
        self._secrets = sorted({*key, *url_secrets(self.url)}, key=len, reverse=True)
        self._client = openai.OpenAI(base_url=self.url, api_key=self._key, max_retries=0,
                                     timeout=config.request_timeout_s)
        self._jitter = wait_random_exponential(multiplier=config.backoff_base_s,
                                               max=config.backoff_max_s)
        self._model: str | None = None
        self._waited = False  # the first call waits for a loading server; later ones probe

    def redact(self, text: str) -> str:
        """``text`` without the API key or the base URL's credentials."""
        return redact_text(text.replace(self.url, self.shown_url), self._secrets)

    def unavailable(self, cause: str) -> LLMUnavailable:
        return LLMUnavailable(self.redact(f"LLM endpoint {self.shown_url}: {cause}"))

    def model(self) -> str:
        """The served model's id. The first call waits up to ``readiness_timeout_s`` for a
        server still loading its model; a later call (after a failure) probes it once: the
        campaign's circuit breaker, not this call, waits out a server that stays down."""
        if self._model is None:
            first, self._waited = not self._waited, True
            self._wait_ready(self.config.readiness_timeout_s if first else 0.0)
            self._model = self.config.model or self._first_model()
        return self._model

    def chat(self, messages: list[Message], mode: Mode, schema: dict[str, Any]) -> str:
        """The assistant's reply text; raises ModeRefused or LLMUnavailable."""
        model = self.model()

        def request() -> tuple[str, bytes]:
            try:
                # The raw response: the client's own parsing would turn an HTML page into a
                # str and a body without choices into an object missing attributes.
                raw = self._client.chat.completions.with_raw_response.create(
                    model=model, messages=cast("list[ChatCompletionMessageParam]", messages),
                    temperature=self.config.temperature, max_tokens=self.config.max_tokens,
                    **_constraint(mode, schema))
                return raw.headers.get("content-type", ""), raw.http_response.content
            except openai.APIStatusError as exc:
                if mode != "prompt" and _refuses_structured_output(exc):
                    raise ModeRefused(self.redact(self._describe(exc))) from None
                raise

        content_type, body = self._retried("chat completion", request)
        try:
            return clip(reply_text(content_type, body), REPLY_CHARS)
        except BadReply as exc:
            raise BadReply(self.redact(str(exc))) from None

    def close(self) -> None:
        self._client.close()

    def _first_model(self) -> str:
        page = self._retried("listing models", self._client.models.list)
        if not page.data:
            raise self.unavailable(f"GET {self.url}/models lists no model; set {ENV_MODEL}")
        return page.data[0].id

    def _retried(self, what: str, call: Callable[[], T]) -> T:
        retrying = Retrying(retry=retry_if_exception(is_transient), wait=self._wait,
                            stop=stop_after_attempt(self.config.max_retries + 1), reraise=True)
        try:
            return retrying(call)
        except openai.APIError as exc:
            # Not chained: the original exception may carry what the server echoed back.
            raise self._failure(what, exc, retrying.statistics.get("attempt_number", 1)) from None

    def _wait(self, state: RetryCallState) -> float:
        asked = retry_after_s(state.outcome.exception() if state.outcome else None)
        return self._jitter(state) if asked is None else min(asked, self.config.retry_after_max_s)

    def _describe(self, exc: openai.APIError) -> str:
        if isinstance(exc, openai.APITimeoutError):
            return f"no reply within {self.config.request_timeout_s:g} s"
        if isinstance(exc, openai.APIConnectionError):
            return f"cannot connect ({exc.__cause__ or exc})"
        if isinstance(exc, openai.APIStatusError):
            return f"HTTP {exc.status_code}: {clip(exc.message, CAUSE_CHARS)}"
        return clip(str(exc), CAUSE_CHARS)

    def _failure(self, what: str, exc: openai.APIError, attempts: int) -> LLMUnavailable:
        cause = self._describe(exc)
        if is_transient(exc):
            cause += f" (gave up after {attempts} attempts)"
        elif isinstance(exc, openai.APIStatusError) and exc.status_code in KEY_REFUSED_STATUSES:
            cause += f"; check {ENV_API_KEYS[0]}"
        return self.unavailable(f"{what} failed: {cause}")

    def _wait_ready(self, timeout_s: float) -> None:
        """Poll the readiness routes until one says ready, within ``timeout_s`` (0: one round
        of probes, each allowed :data:`PROBE_TIMEOUT_S`)."""
        deadline = time.monotonic() + (timeout_s or PROBE_TIMEOUT_S)
        with httpx2.Client(headers={"Authorization": f"Bearer {self._key}"}) as http:
            while True:
                ready, seen = self._probe_round(http, deadline)
                remaining = deadline - time.monotonic()
                if ready:
                    return
                if remaining <= 0 or timeout_s == 0:
                    waited = f"after {timeout_s:g} s" if timeout_s else "at a second look"
                    raise self.unavailable(f"not ready {waited} ({'; '.join(seen)})")
                time.sleep(min(self.config.readiness_poll_s, remaining))

    def _probe_round(self, http: httpx2.Client, deadline: float) -> tuple[bool, list[str]]:
        """Ask NIM's, then llama.cpp's readiness route, then the model list; the first route
        the server has decides (a 503 from a health route means still loading)."""
        seen = []
        for url in self.probes:
            status = self._probe(http, url, deadline)
            seen.append(f"GET {url} → {status}")
            if status == 200:
                return True, seen
            if status in KEY_REFUSED_STATUSES:
                raise self.unavailable(f"GET {url} → {status}: the server refuses the API key; "
                                       f"check {ENV_API_KEYS[0]}")
            if status not in ABSENT_STATUSES:
                return False, seen
        return False, seen

    def _probe(self, http: httpx2.Client, url: str, deadline: float) -> int | str:
        timeout = max(0.05, min(PROBE_TIMEOUT_S, self.config.request_timeout_s,
                                deadline - time.monotonic()))
        try:
            response = http.get(url, timeout=timeout)
        except httpx2.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        return response.status_code
