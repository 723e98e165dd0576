"""The hybrid proposer: a classical sampler for most trials, the LLM for a share of them.

Optuna's samplers are cheap and steady; an LLM is slow but can make the jump a sampler
would not (read a rejection reason, try a different schedule). The hybrid gives the LLM a
fixed share of the iterations, spread evenly: iteration ``k`` (the number of non-baseline
trials so far) is the LLM's when ``floor((k+1)·share) > floor(k·share)``. Being a function
of the history alone, the schedule survives a restart. Both proposers receive the same
full history, so the LLM sees every trial the sampler ran.

When the LLM is unavailable (or fails in any other way) the classical proposer takes the
turn, the proposal says why in its ``fallback`` field and its ``fallback.txt`` artifact (the
agent logs an ``llm_fallback`` event), and the LLM sits out the next ``retry_after``
iterations before it is tried again: a circuit breaker, not a verdict. Each failure in a row
doubles the pause, up to :data:`MAX_RETRY_PAUSE` iterations; its first valid reply gives the
LLM its seat back and resets the pause. A server still loading its model, or busy with
another client for a while, so loses a few turns, not the night. The pause lives in memory
only: a restarted campaign simply tries the LLM again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from fractions import Fraction

from recipelab.proposer.base import Observation, Proposal, Proposer
from recipelab.proposer.llm import TERMINAL_STATUSES, iteration, next_iteration
from recipelab.proposer.llm_endpoint import LLMUnavailable
from recipelab.recipe import FALLBACK_ARTIFACT

SHARE_DENOMINATOR = 10_000  # the share is exact to 1/10,000, so 0.3 is 30 turns in 100
MAX_RETRY_PAUSE = 24  # iterations: the longest the backed-off LLM sits out


def first_free_iteration(history: list[Observation]) -> int:
    """The iteration of the next proposal: the trials finished, plus those in flight."""
    in_flight = any(obs.status not in TERMINAL_STATUSES for obs in history)
    return next_iteration(history) if in_flight else iteration(history)


class HybridProposer(Proposer):
    """Alternates ``classical`` and ``llm`` deterministically, ``llm_share`` of the time."""

    name = "hybrid"

    def __init__(self, classical: Proposer, llm: Proposer, llm_share: float = 0.3,
                 retry_after: int = 3) -> None:
        if not 0.0 <= llm_share <= 1.0:
            raise ValueError(f"llm_share must be within [0, 1], got {llm_share}")
        if retry_after < 0:
            raise ValueError(f"retry_after must be >= 0 iterations, got {retry_after}")
        self.classical = classical
        self.llm = llm
        self.llm_share = llm_share
        self.retry_after = retry_after
        self._share = Fraction(llm_share).limit_denominator(SHARE_DENOMINATOR)
        self._llm_paused_until = 0  # the first iteration the LLM may take after a fallback
        self.failures = 0  # the LLM's failed calls in a row; 0 while it is up

    @property
    def llm_up(self) -> bool:
        """Whether the LLM's last call gave valid proposals (or none has failed yet)."""
        return self.failures == 0

    def pause(self) -> int:
        """Iterations the LLM sits out after its latest failure: ``retry_after``, doubled for
        each failure before it in a row, at most :data:`MAX_RETRY_PAUSE`."""
        return min(MAX_RETRY_PAUSE, self.retry_after << max(0, self.failures - 1))

    def scheduled_for_llm(self, k: int) -> bool:
        """Whether iteration ``k`` belongs to the LLM in the even spread of its share."""
        return math.floor((k + 1) * self._share) > math.floor(k * self._share)

    def is_llm_turn(self, k: int) -> bool:
        """Whether iteration ``k`` asks the LLM: its turn, and not paused by a fallback."""
        return k >= self._llm_paused_until and self.scheduled_for_llm(k)

    def propose(self, history: list[Observation], n: int) -> list[Proposal]:
        """Proposals for the next ``n`` iterations (after those in flight): the LLM's turns
        among them from one LLM call, the others from the classical proposer."""
        k = first_free_iteration(history)
        turns = [self.is_llm_turn(k + i) for i in range(n)]
        if not any(turns):
            return self.classical.propose(history, n)
        try:
            llm = self.llm.propose(history, sum(turns))
        except Exception as exc:  # LLMUnavailable above all; anything else must not stop us
            self.failures += 1
            self._llm_paused_until = k + turns.index(True) + self.pause() + 1
            cause = str(exc) if isinstance(exc, LLMUnavailable) else f"{type(exc).__name__}: {exc}"
            return [dataclasses.replace(p, fallback=cause,
                                        artifacts={**p.artifacts, FALLBACK_ARTIFACT: cause})
                    for p in self.classical.propose(history, n)]
        self.failures = 0
        classical = self.classical.propose(history, n - sum(turns)) if not all(turns) else []
        llm_left, classical_left = iter(llm), iter(classical)
        merged = [next(llm_left if turn else classical_left, None) for turn in turns]
        return [p for p in merged if p is not None]

    def prefetch(self, history: list[Observation]) -> None:
        """Let the LLM start early when the iteration after the running trial is its turn."""
        if self.is_llm_turn(next_iteration(history)):
            with contextlib.suppress(Exception):  # its turn asks again and reports the cause
                self.llm.prefetch(history)

    def close(self) -> None:
        """Close both proposers (the LLM's HTTP client and prefetch thread)."""
        try:
            self.llm.close()
        finally:
            self.classical.close()
