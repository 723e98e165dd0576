"""The Proposer plug-in point: given the campaign so far, suggest the next candidates.

A proposer never runs anything and never sees the trainer or the store: the agent hands
it :class:`Observation` views of past trials and receives :class:`Proposal` objects back.
Proposals are unchecked by design; the guardrails judge them before any training.

Lifecycle: the agent constructs a proposer once per campaign (``baseline`` and ``space``
fixed), then calls :meth:`Proposer.propose` with the full history whenever it needs work.
Implementations must be restart-safe: the same history gives an equivalent proposer state,
so a resumed campaign continues where it left off.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from recipelab.recipe import Recipe


@dataclass(frozen=True)
class Observation:
    """One past trial as a proposer sees it."""

    trial_id: str
    status: str  # rejected | complete | failed | interrupted
    knobs: dict[str, Any]  # the candidate flattened to dotted names (Recipe.knobs())
    val_bpb: float | None = None
    reason: str | None = None  # failure reason
    reasons: tuple[str, ...] = ()  # guardrail rejection reasons
    proposer: str = ""
    hypothesis: str = ""


@dataclass(frozen=True)
class Proposal:
    """A candidate for one trial: ``parent`` with ``edit`` applied, and why.

    ``candidate`` is plain data, not a :class:`Recipe`, because an edit may be invalid; the
    guardrails' schema check is what turns it into a recipe or a rejection with reasons.
    """

    candidate: dict[str, Any]  # the full recipe as nested plain data
    edit: dict[str, Any]  # dotted knob -> new value
    parent_id: str | None
    hypothesis: str
    proposer: str
    artifacts: dict[str, str] = field(default_factory=dict)  # e.g. prompt/reply text
    fallback: str | None = None  # why another proposer made this one (e.g. the LLM was down)

    @classmethod
    def from_edit(cls, parent: Recipe, parent_id: str | None, edit: dict[str, Any],
                  hypothesis: str, proposer: str) -> Proposal:
        """Apply ``edit`` to ``parent`` as plain data, without validating the result."""
        data = parent.model_dump(mode="json")
        for key, value in edit.items():
            *path, leaf = key.split(".")
            node = data
            for part in path:
                child = node.get(part)
                if not isinstance(child, dict):
                    child = node[part] = {}
                node = child
            node[leaf] = value
        return cls(candidate=data, edit=dict(edit), parent_id=parent_id,
                   hypothesis=hypothesis, proposer=proposer)


class Proposer(abc.ABC):
    """Base class of every proposer; subclasses register a name in ``proposer.PROPOSERS``."""

    name: str = "proposer"

    @abc.abstractmethod
    def propose(self, history: list[Observation], n: int) -> list[Proposal]:
        """Return up to ``n`` proposals for the next trials, given every trial so far."""

    def prefetch(self, history: list[Observation]) -> None:  # noqa: B027 - optional hook
        """Start preparing the next proposal in the background while a trial trains.

        The default does nothing; a proposer with slow calls (an LLM) overrides it so its
        latency overlaps training instead of adding to every iteration.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the proposer holds (an HTTP client, a background thread).

        The campaign calls it once at its end; the default does nothing. It must return
        promptly, never waiting on a slow call in flight.
        """
