"""Proposers suggest candidates; the agent picks one by name from :data:`PROPOSERS`.

The plug-in point (:class:`Proposer`, :class:`Proposal`, :class:`Observation`) lives in
``base``; the search space every proposer is told about lives in ``space``. The LLM and
hybrid proposers take different constructor arguments from the classical one, so the agent
builds them explicitly; the registry maps each name to its class.

Only ``base`` is imported with the package: the space and the proposers import Optuna and
httpx, which ``recipelab status`` and ``logs`` (readers of records that mention a
:class:`Proposal`) must not pay for. The other names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recipelab.proposer.base import Observation, Proposal, Proposer

if TYPE_CHECKING:
    from recipelab.proposer.classical import ClassicalProposer
    from recipelab.proposer.hybrid import HybridProposer
    from recipelab.proposer.llm import LLMProposer
    from recipelab.proposer.llm_endpoint import LLMConfig, LLMUnavailable
    from recipelab.proposer.space import Knob, SearchSpace, default_space

    PROPOSERS: dict[str, type[Proposer]]

_LAZY = frozenset({"PROPOSERS", "ClassicalProposer", "HybridProposer", "Knob", "LLMConfig",
                   "LLMProposer", "LLMUnavailable", "SearchSpace", "default_space"})


def __getattr__(name: str) -> Any:
    """The space and the proposers, imported on first use of any of their names."""
    if name not in _LAZY:  # submodules too: the import system asks for them here first
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from recipelab.proposer import classical, hybrid, llm, llm_endpoint, space

    proposers = (classical.ClassicalProposer, llm.LLMProposer, hybrid.HybridProposer)
    globals().update({
        "PROPOSERS": {proposer.name: proposer for proposer in proposers},
        "ClassicalProposer": classical.ClassicalProposer, "HybridProposer": hybrid.HybridProposer,
        "LLMConfig": llm_endpoint.LLMConfig, "LLMProposer": llm.LLMProposer,
        "LLMUnavailable": llm_endpoint.LLMUnavailable, "Knob": space.Knob,
        "SearchSpace": space.SearchSpace, "default_space": space.default_space})
    return globals()[name]


__all__ = [
    "PROPOSERS",
    "ClassicalProposer",
    "HybridProposer",
    "Knob",
    "LLMConfig",
    "LLMProposer",
    "LLMUnavailable",
    "Observation",
    "Proposal",
    "Proposer",
    "SearchSpace",
    "default_space",
]
