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
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
)

from recipelab.proposer.base import Observation, Proposal, Proposer
from recipelab.proposer.classical import ClassicalProposer, Suggestion
from recipelab.proposer.llm_endpoint import (
    AUTO_MODES,
    CAUSE_CHARS,
    BadReply,
    Endpoint,
    LLMConfig,
    LLMUnavailable,
    Mode,
    ModeRefused,
    decoding_schema,
    modes_after_refusal,
)
from recipelab.proposer.llm_reply import (
    Hypothesis,
    batch_model,
    batch_request,
    edit_model,
    extract_json_object,
    quote_error,
    read_reply_object,
)
from recipelab.proposer.prompt import (
    HYPOTHESIS_CHARS,
    Message,
    best_complete,
    build_messages,
    build_steer_messages,
)
from recipelab.proposer.space import SearchSpace
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
from recipelab.text import clip

EXCHANGE_ARTIFACT = "llm_exchange.json"
TERMINAL_STATUSES = frozenset({"rejected", "complete", "failed", "interrupted"})
QUOTED_REPLY_CHARS = 2_000
T = TypeVar("T")


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
        self._endpoint = Endpoint(config)
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
                self._modes = modes_after_refusal(ask.mode, str(exc), self._modes[1:])

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
