"""The LLM proposer: a local model behind an OpenAI-compatible API proposes the next edit.

The model (a NIM, vLLM, llama.cpp server or Ollama on the user's desk) reads the campaign
so far and answers with one edit and a one-line hypothesis. Everything it says is treated
as untrusted input: the reply must be one JSON object matching a schema generated from
the search space, is validated with pydantic, and only then becomes knob values (which
the guardrails check again). Nothing in a reply is executed or used as a path or format.

Servers differ in how they constrain output, so ``structured_output="auto"`` starts with
OpenAI's ``response_format`` JSON schema and, when the server refuses it, falls back to
vLLM/NIM's ``guided_json`` and finally to a schema described only in the prompt,
remembering what worked. Local servers also load slowly and stall under load: readiness
is polled before the first call, and only transient errors (connection, timeout, 408,
409, 429, 5xx) are retried with jittered exponential backoff, honouring Retry-After. The
client's own retries are off so the two policies never multiply.

The API key is a :class:`~pydantic.SecretStr`: it goes into the Authorization header and
nowhere else, and is scrubbed from every error message and artifact in case a server
echoes it back. Credentials written into the base URL (``http://user:secret@host/v1``) are
scrubbed the same way; :func:`redact_url` is the one way to show such a URL.

A 200 that is not a chat completion (a proxy's HTML page, a body without ``choices`` or
``message``, a tool call instead of text, truncated JSON) is a bad reply like an invalid
one: asked again with the problem quoted, then :class:`LLMUnavailable`. Nothing else
escapes :meth:`LLMProposer.propose` or :meth:`LLMProposer.prefetch`: whatever goes wrong in
talking to the model becomes :class:`LLMUnavailable` with its cause, so the hybrid falls
back to its classical proposer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar, cast

import httpx2
import openai
from openai.types.chat import ChatCompletionMessageParam
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    create_model,
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
from recipelab.proposer.base import Observation, Proposal, Proposer
from recipelab.proposer.classical import ClassicalProposer, Suggestion
from recipelab.proposer.prompt import (
    HYPOTHESIS_CHARS,
    PROMPT_BUDGET_CHARS,
    Message,
    best_complete,
    build_messages,
    build_steer_messages,
)
from recipelab.proposer.space import Knob, SearchSpace
from recipelab.proposer.steer import (
    DEFAULT_CANDIDATES,
    MAX_CHANGES,
    STEER_ARTIFACT,
    Change,
    apply_changes,
    steer_line,
    steer_model,
    typed_changes,
)
from recipelab.recipe import BASELINE_PROPOSER, LLM_PROPOSER_PREFIX, Recipe, flatten
from recipelab.redaction import MIN_SECRET_CHARS, redact_text, redact_url, url_secrets
from recipelab.text import clip

StructuredOutput = Literal["auto", "json_schema", "json_object", "guided_json", "nvext", "prompt"]
Mode = Literal["json_schema", "json_object", "guided_json", "nvext", "prompt"]
AUTO_MODES: tuple[Mode, ...] = ("json_schema", "guided_json", "prompt")

ENV_BASE_URL = environment.LLM_BASE_URL
ENV_MODEL = environment.LLM_MODEL
ENV_API_KEYS = environment.LLM_API_KEYS
PLACEHOLDER_API_KEY = "not-needed"  # local servers ignore the key; the client wants one

EXCHANGE_ARTIFACT = "llm_exchange.json"
TERMINAL_STATUSES = frozenset({"rejected", "complete", "failed", "interrupted"})
RETRYABLE_STATUSES = frozenset({408, 409, 429})
ABSENT_STATUSES = frozenset({404, 405})  # a readiness route this kind of server lacks
KEY_REFUSED_STATUSES = frozenset({401, 403})
STRUCTURED_OUTPUT_WORDS = ("response_format", "json_schema", "guided_json", "nvext")
# llama-cpp-python answers an unknown response_format type with a 500 (its request model's
# literal_error), not a 400, so a 500 naming the structured-output parameters counts too.
REFUSAL_STATUSES = frozenset({400, 422, 500})
PROBE_TIMEOUT_S = 5.0
REPLY_CHARS = 8_000  # max_tokens bounds a real reply; this bounds a broken server's
QUOTED_REPLY_CHARS = 2_000
ERROR_CHARS = 600
CAUSE_CHARS = 300
INPUT_CHARS = 60

T = TypeVar("T")
LINE_BREAKS = re.compile(r"[\r\n]+")

Hypothesis = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                              max_length=HYPOTHESIS_CHARS,
                                              pattern=r"^[^\r\n]+$")]


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


# --- the reply schema ----------------------------------------------------------------------


def field_name(knob: str) -> str:
    """A Python identifier for a dotted knob name: ``optimizer.lr`` → ``optimizer__lr``."""
    return knob.replace(".", "__")


def _knob_field(knob: Knob) -> tuple[Any, Any]:
    """An optional pydantic field holding exactly the values the knob allows."""
    if knob.choices is not None:
        choices: Any = Literal.__getitem__(knob.choices)
        return choices | None, Field(default=None, alias=knob.name)
    assert knob.low is not None and knob.high is not None  # a range, by Knob's own check
    if knob.integer:
        return int | None, Field(default=None, alias=knob.name, ge=int(knob.low),
                                 le=int(knob.high))
    return float | None, Field(default=None, alias=knob.name, ge=knob.low, le=knob.high,
                               allow_inf_nan=False)


def edit_model(space: SearchSpace) -> type[BaseModel]:
    """The reply schema: ``{"edit": {<knob>: <value>, ...}, "hypothesis": "<one line>"}``.

    Every knob is optional, typed and bounded by the space; unknown keys are errors, and
    validation is strict (no ``"0.1"`` for a number), so what passes is a point of the space.
    """
    fields: dict[str, Any] = {field_name(knob.name): _knob_field(knob) for knob in space.knobs}
    knobs = create_model(
        "EditKnobs",
        __config__=ConfigDict(extra="forbid", populate_by_name=True, strict=True), **fields)
    return create_model("Edit", __config__=ConfigDict(extra="forbid", strict=True),
                        edit=(knobs, ...), hypothesis=(Hypothesis, ...))


def batch_model(edit: type[BaseModel], n: int) -> type[BaseModel]:
    """The reply schema when ``n`` > 1 trials run at once: ``{"edits": [<edit reply>, ...]}``
    with one to ``n`` items, each exactly what :func:`edit_model` accepts."""
    items = Annotated[list[edit], Field(min_length=1, max_length=n)]  # type: ignore[valid-type]
    return create_model("Edits", __config__=ConfigDict(extra="forbid", strict=True),
                        edits=(items, ...))


def batch_request(n: int) -> str:
    """What the user message adds when ``n`` edits are wanted from one reply."""
    return (f"{n} trials will train at the same time: propose {n} different edits at once, as "
            'one JSON object {"edits": [{"edit": {...}, "hypothesis": "..."}, ...]} holding '
            f"{n} items, each following the rules for one edit.")


READER = json.JSONDecoder(strict=False)
"""Reads a reply as a small model writes it: a raw line break or tab inside a string is kept."""


def extract_json_object(text: str) -> str:
    """The JSON object at the first ``{`` in ``text``, where json's own scanner ends it:
    tolerates a code fence or prose around it and a raw line break inside a string."""
    incomplete = "the reply holds no complete JSON object; reply with one JSON object only"
    start = text.find("{")
    if start < 0:
        raise ValueError(incomplete)
    try:
        _, end = READER.raw_decode(text, start)
    except json.JSONDecodeError as error:
        if error.pos >= len(text.rstrip()):  # the text ended inside the object
            raise ValueError(incomplete) from None
        raise ValueError(f"Invalid JSON: {error}; reply with one JSON object only") from None
    return text[start:end]


def read_reply_object(reply: str) -> Any:
    """The reply's JSON object, read as a small model writes it: a raw line break or tab
    inside a string is taken as written (``strict=False``), and line breaks in the one-line
    hypothesis become spaces. Anything else malformed is a ValueError, quoted back."""
    data = READER.decode(extract_json_object(reply))
    if isinstance(data, dict) and isinstance(data.get("hypothesis"), str):
        data["hypothesis"] = LINE_BREAKS.sub(" ", data["hypothesis"])
    return data


def quote_error(exc: Exception) -> str:
    """A short, model-readable account of why a reply was invalid."""
    if not isinstance(exc, ValidationError):
        return clip(str(exc), ERROR_CHARS)
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "reply"
        given = error.get("input")
        got = "" if isinstance(given, dict) else f" (got {clip(repr(given), INPUT_CHARS)})"
        problems.append(f"{where}: {error['msg']}{got}")
    return clip("; ".join(problems), ERROR_CHARS)


# --- errors and retries ----------------------------------------------------------------------


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


def _modes_after_refusal(refused: Mode, message: str, remaining: list[Mode]) -> list[Mode]:
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


class _Endpoint:
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


# --- iterations and prefetching -----------------------------------------------------------


def iteration(history: Sequence[Observation]) -> int:
    """The index of the proposal about to be made: finished trials other than the baseline."""
    return sum(obs.status in TERMINAL_STATUSES and obs.proposer != BASELINE_PROPOSER
               for obs in history)


def next_iteration(history: Sequence[Observation]) -> int:
    """The index of the proposal after the running trial finishes.

    The history may list the running trial as pending already, or not yet; when it does
    not, the running trial is taken to be a proposal rather than the baseline.
    """
    pending = [obs for obs in history if obs.status not in TERMINAL_STATUSES]
    if not pending:
        return iteration(history) + 1
    return iteration(history) + sum(obs.proposer != BASELINE_PROPOSER for obs in pending)


@dataclass(frozen=True)
class _Prefetched:
    """A proposal being prepared for ``iteration`` from a history holding ``seen`` trials."""

    iteration: int
    seen: frozenset[str]
    future: Future[Proposal]

    def serves(self, history: Sequence[Observation]) -> bool:
        """Still current: same iteration, and no trial it saw has left the history."""
        return (self.iteration == iteration(history)
                and self.seen <= {obs.trial_id for obs in history})


# --- the proposer ------------------------------------------------------------------------------


@dataclass
class _Ask:
    """One request of an exchange: what was added to the base messages and what came back."""

    mode: Mode
    followup: list[Message]
    reply: str | None = None
    error: str | None = None


@dataclass
class _Exchange:
    """Everything said for one proposal, kept as the ``llm_exchange.json`` artifact."""

    model: str
    messages: list[Message]
    asks: list[_Ask] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({
            "model": self.model,
            "mode": self.asks[-1].mode if self.asks else None,
            "attempts": len(self.asks),
            "messages": self.messages,
            "asks": [dataclasses.asdict(ask) for ask in self.asks],
        }, indent=2, ensure_ascii=False)


class LLMProposer(Proposer):
    """Proposes one edit per call of the model, parented on the best complete trial; or,
    given a ``sampler``, steers it: the sampler draws ``candidates`` points with its state,
    the model picks one and may change up to three of its knobs.

    A steered proposal is the sampler's candidate (with the model's changes) as an edit of
    the baseline, like the sampler's own, and carries ``steer.json``: the candidates, the
    pick, each change (asked, used, and the value it replaced), the state shown and the
    model's hypothesis. Its trial, once trained, is told to the sampler on its next call
    with the values actually trained (:meth:`ClassicalProposer.trials`), so a steering turn
    is a trial the sampler learns from like its own.

    Each proposal carries ``llm_exchange.json``: the exact messages sent, every raw reply,
    the structured-output mode used and the number of requests. A reply that is not valid
    JSON for the schema, or changes nothing, is asked again with the error quoted, at most
    ``max_attempts`` times; then, like an endpoint that stays down, it raises
    :class:`LLMUnavailable`.

    :meth:`prefetch` starts the next proposal in a background thread while a trial trains;
    the pipelined proposal does not see that trial's result. One call is in flight at a time.
    """

    name = "llm"

    def __init__(self, config: LLMConfig, baseline: Recipe, baseline_id: str | None,
                 space: SearchSpace, target_description: str,
                 calibration: str | None = None, sampler: ClassicalProposer | None = None,
                 candidates: int = DEFAULT_CANDIDATES) -> None:
        space.check_fits(baseline)
        if candidates < 1:
            raise ValueError(f"candidates must be at least 1 (the sampler's points the model "
                             f"picks from), got {candidates}")
        self.sampler = sampler
        self.candidates = candidates
        self.config = config
        self.baseline = baseline
        self.baseline_id = baseline_id
        self.space = space
        self.target_description = target_description
        self.calibration = calibration
        self._reply_model = edit_model(space)
        self._schema = decoding_schema(self._reply_model.model_json_schema())
        self._endpoint = _Endpoint(config)
        self._modes: list[Mode] = (list(AUTO_MODES) if config.structured_output == "auto"
                                   else [config.structured_output])
        self._call_lock = threading.Lock()
        self._prefetch_lock = threading.Lock()
        self._pending: _Prefetched | None = None
        self._closed = False

    @property
    def mode(self) -> Mode:
        """The structured-output mode in use: ``auto`` settles on the first the server takes."""
        return self._modes[0]

    def propose(self, history: list[Observation], n: int) -> list[Proposal]:
        """Up to ``n`` proposals, the first from :meth:`prefetch` when it is still current;
        more than one more are asked for in one call (a reply with fewer gives fewer).

        Raises only :class:`LLMUnavailable`: anything unforeseen in talking to the model
        becomes one, with its cause, so a campaign falls back rather than stops."""
        try:
            return self._propose(history, n)
        except LLMUnavailable:
            raise
        except Exception as exc:
            raise self._unexpected("proposing", exc) from None

    def _unexpected(self, what: str, exc: Exception) -> LLMUnavailable:
        return self._endpoint.unavailable(
            f"{what} failed unexpectedly: {type(exc).__name__}: {clip(str(exc), CAUSE_CHARS)}")

    def _propose(self, history: list[Observation], n: int) -> list[Proposal]:
        proposals: list[Proposal] = []
        prefetched = self._take_prefetched(history) if n > 0 else None
        if prefetched is not None:
            proposals.append(prefetched.result())
        if n - len(proposals) == 1:
            proposals.append(self._propose_one(list(history)))
        elif n - len(proposals) > 1:
            proposals += self._propose_batch(list(history), n - len(proposals))
        return proposals

    def prefetch(self, history: list[Observation]) -> None:
        """Start the proposal for the iteration after the running trial, in the background.

        Never raises: a prefetch that cannot start is simply not there, and the proposal is
        asked for when it is due (where a failure becomes :class:`LLMUnavailable`)."""
        with contextlib.suppress(Exception):  # the due proposal asks again, with the cause
            self._prefetch(history)

    def _prefetch(self, history: list[Observation]) -> None:
        target, seen = next_iteration(history), frozenset(obs.trial_id for obs in history)
        with self._prefetch_lock:
            if self._closed:
                return
            if self._pending is not None:
                if (self._pending.iteration, self._pending.seen) == (target, seen):
                    return
                self._pending.future.cancel()
            future: Future[Proposal] = Future()
            snapshot = list(history)

            def work() -> None:
                if not future.set_running_or_notify_cancel():
                    return
                try:
                    future.set_result(self._propose_one(snapshot))
                except BaseException as exc:  # handed to whoever takes the proposal
                    future.set_exception(exc)

            # A daemon thread, not a pool: a prefetch stuck on a hung server must hold up
            # neither close() nor the interpreter's exit.
            threading.Thread(target=work, name="recipelab-llm-prefetch", daemon=True).start()
            self._pending = _Prefetched(target, seen, future)

    def close(self) -> None:
        """Drop any prefetch and close the HTTP client, without waiting for a call in
        flight: its daemon thread ends when the server answers or the timeout strikes."""
        with self._prefetch_lock:
            self._closed = True
            pending, self._pending = self._pending, None
        if pending is not None:
            pending.future.cancel()
        with contextlib.suppress(Exception):
            self._endpoint.close()

    def _take_prefetched(self, history: list[Observation]) -> Future[Proposal] | None:
        with self._prefetch_lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return None
        if pending.serves(history):
            return pending.future
        pending.future.cancel()  # stale; if already running, the call lock makes us wait it out
        return None

    def _propose_one(self, history: list[Observation]) -> Proposal:
        if self.sampler is not None:
            return self._steer_one(history, self.sampler)
        with self._call_lock:
            model = self._endpoint.model()
            parent_id, parent = self._parent(history)
            messages = build_messages(self.target_description, self.space, self.baseline,
                                      history, self.calibration,
                                      budget_chars=self.config.prompt_budget_chars)
            exchange = _Exchange(model, messages)
            edit, hypothesis = self._ask(parent.knobs(), exchange, validate=self._validated)
        # A server that echoes the key into its reply must not get it into the trajectory.
        hypothesis = clip(self._endpoint.redact(hypothesis), HYPOTHESIS_CHARS)
        proposal = Proposal.from_edit(parent, parent_id, edit, hypothesis, f"{LLM_PROPOSER_PREFIX}{model}")
        artifact = self._endpoint.redact(exchange.to_json())
        return dataclasses.replace(proposal, artifacts={EXCHANGE_ARTIFACT: artifact})

    def _propose_batch(self, history: list[Observation], n: int) -> list[Proposal]:
        """Up to ``n`` proposals from one call, for trials that will run side by side.

        Steering asks once per proposal, each told the earlier picks as trials in flight,
        so the sampler's constant liar spreads the next candidates away from them."""
        if self.sampler is not None:
            proposals: list[Proposal] = []
            for index in range(n):
                pending = [Observation(trial_id=f"pending-{index}-{i}", status="running",
                                       knobs=flatten(p.candidate), proposer=p.proposer)
                           for i, p in enumerate(proposals)]
                proposals.append(self._steer_one([*history, *pending], self.sampler))
            return proposals
        reply_model = batch_model(self._reply_model, n)
        schema = decoding_schema(reply_model.model_json_schema())
        with self._call_lock:
            model = self._endpoint.model()
            parent_id, parent = self._parent(history)
            *context, request = build_messages(
                self.target_description, self.space, self.baseline, history, self.calibration,
                budget_chars=self.config.prompt_budget_chars - len(batch_request(n)) - 2)
            request = {**request, "content": f"{request['content']}\n\n{batch_request(n)}"}
            exchange = _Exchange(model, [*context, request])
            edits: list[tuple[dict[str, Any], str]] = self._ask(parent.knobs(), exchange, schema=schema,
                              validate=lambda reply, knobs: self._validated_batch(
                                  reply, knobs, reply_model))
        artifact = self._endpoint.redact(exchange.to_json())
        return [dataclasses.replace(
            Proposal.from_edit(parent, parent_id, edit,
                               clip(self._endpoint.redact(hypothesis), HYPOTHESIS_CHARS),
                               f"{LLM_PROPOSER_PREFIX}{model}"),
            artifacts={EXCHANGE_ARTIFACT: artifact}) for edit, hypothesis in edits]

    def _steer_one(self, history: list[Observation], sampler: ClassicalProposer) -> Proposal:
        """One steering turn: the sampler's candidates and state, the model's pick."""
        with self._call_lock:
            model = self._endpoint.model()
            suggestion = sampler.suggest(history, self.candidates)
            if not suggestion.points:
                raise self._endpoint.unavailable(
                    "the sampler proposed no candidate to pick from (it kept repeating "
                    "points already tried); the classical proposer takes the turn")
            reply_model = steer_model(self.space, len(suggestion.points), Hypothesis)
            schema = typed_changes(decoding_schema(reply_model.model_json_schema()), self.space)
            messages = build_steer_messages(
                self.target_description, self.space, self.baseline, history,
                suggestion.sampler, [p.edit for p in suggestion.proposals], suggestion.state,
                self.calibration, max_changes=MAX_CHANGES,
                budget_chars=self.config.prompt_budget_chars)
            exchange = _Exchange(model, messages)
            base = self.baseline.knobs()
            pick, point, changes, hypothesis = self._ask(
                base, exchange, schema=schema,
                validate=lambda reply, parent: self._validated_steer(
                    reply, parent, reply_model, suggestion))
        hypothesis = clip(self._endpoint.redact(hypothesis), HYPOTHESIS_CHARS)
        edit = self.space.resolve(point, base)
        line = clip(steer_line(suggestion.sampler, pick, len(suggestion.points), changes,
                               hypothesis), HYPOTHESIS_CHARS)
        proposal = Proposal.from_edit(self.baseline, self.baseline_id, edit, line,
                                      f"{LLM_PROPOSER_PREFIX}{model}")
        record = self._endpoint.redact(json.dumps({
            "sampler": suggestion.sampler,
            "candidates": [p.edit for p in suggestion.proposals],
            "pick": pick,
            "changes": [dataclasses.asdict(change) for change in changes],
            "state": suggestion.state.data if suggestion.state else None,
            "state_shown": list(suggestion.state.lines) if suggestion.state else [],
            "hypothesis": hypothesis,
        }, indent=2, ensure_ascii=False, default=str))
        return dataclasses.replace(proposal, artifacts={
            EXCHANGE_ARTIFACT: self._endpoint.redact(exchange.to_json()), STEER_ARTIFACT: record})

    def _validated_steer(self, reply: str, parent: dict[str, Any], reply_model: type[BaseModel],
                         suggestion: Suggestion) -> tuple[int, dict[str, Any], list[Change], str]:
        """The pick, the point it makes with the changes applied, the changes as made and
        the hypothesis; ValueError (quoted back to the model) when the reply cannot be used."""
        data = reply_model.model_validate(read_reply_object(reply)).model_dump()
        pick: int = data["pick"]
        point, changes = apply_changes(self.space, suggestion.points[pick], parent,
                                       data["changes"])
        return pick, point, changes, data["hypothesis"]

    def _parent(self, history: list[Observation]) -> tuple[str | None, Recipe]:
        """The best complete trial and its recipe, else the baseline."""
        best = best_complete(history)
        if best is None:
            return self.baseline_id, self.baseline
        base = self.baseline.knobs()
        return best.trial_id, self.baseline.apply(
            {name: value for name, value in best.knobs.items() if base.get(name) != value})

    def _ask(self, parent: dict[str, Any], exchange: _Exchange, *,
             validate: Callable[[str, dict[str, Any]], T],
             schema: dict[str, Any] | None = None) -> T:
        """A reply ``validate`` accepts (and ``schema``, by default one edit's, describes),
        re-asking with the error quoted when a reply is not."""
        followup: list[Message] = []
        error = ""
        for _ in range(self.config.max_attempts):
            try:
                reply = self._complete(exchange, followup, schema or self._schema)
            except BadReply as exc:  # no text to quote back: say what arrived instead
                error = exchange.asks[-1].error = quote_error(exc)
                followup = [{"role": "user", "content": f"Your last answer could not be read: "
                             f"{error}. Reply again with one JSON object that follows the rules."}]
                continue
            try:
                return validate(reply, parent)
            except ValueError as exc:  # pydantic's ValidationError included
                error = exchange.asks[-1].error = quote_error(exc)
            followup = [
                {"role": "assistant", "content": clip(reply, QUOTED_REPLY_CHARS)},
                {"role": "user", "content": f"That reply was invalid: {error}. Reply again with "
                                            "one JSON object that follows the rules."},
            ]
        raise self._endpoint.unavailable(
            f"invalid replies: {self.config.max_attempts} in a row failed validation; "
            f"the last: {error}")

    def _complete(self, exchange: _Exchange, followup: list[Message],
                  schema: dict[str, Any]) -> str:
        """One reply, stepping down the structured-output modes the server refuses."""
        while True:
            ask = _Ask(self._modes[0], followup)
            exchange.asks.append(ask)
            try:
                ask.reply = self._endpoint.chat(exchange.messages + followup, ask.mode, schema)
                return ask.reply
            except ModeRefused as exc:
                ask.error = f"the server refused structured output mode {ask.mode}: {exc}"
                if len(self._modes) == 1:
                    raise self._endpoint.unavailable(
                        f"{ask.error}; structured_output='auto' falls back to what the "
                        "server supports") from None
                self._modes = _modes_after_refusal(ask.mode, str(exc), self._modes[1:])

    def _validated(self, reply: str, parent: dict[str, Any]) -> tuple[dict[str, Any], str]:
        data = self._reply_model.model_validate_json(extract_json_object(reply)).model_dump(
            by_alias=True, exclude_none=True)
        # An edit that changes nothing is still the model's proposal: the guardrails reject
        # it as a duplicate, the trajectory records that, and the model sees it next turn.
        return self.space.resolve(data["edit"], parent), data["hypothesis"]

    def _validated_batch(self, reply: str, parent: dict[str, Any],
                         reply_model: type[BaseModel]) -> list[tuple[dict[str, Any], str]]:
        """The edits of a batch reply; a reply holding one edit where several were asked for
        (a model that ignored the batch request) counts as a batch of one."""
        text = extract_json_object(reply)
        if '"edits"' not in text:
            return [self._validated(text, parent)]
        data = reply_model.model_validate_json(text).model_dump(by_alias=True, exclude_none=True)
        return [(self.space.resolve(item["edit"], parent), item["hypothesis"])
                for item in data["edits"]]
