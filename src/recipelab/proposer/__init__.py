"""Proposers suggest candidates; the agent picks one by name from :data:`PROPOSERS`.

The plug-in point (:class:`Proposer`, :class:`Proposal`, :class:`Observation`) lives in
``base``; the search space every proposer is told about lives in ``space``. The LLM and
hybrid proposers take different constructor arguments from the classical one, so the agent
builds them explicitly; the registry maps each name to its class.
"""

from recipelab.proposer.base import Observation, Proposal, Proposer
from recipelab.proposer.classical import ClassicalProposer
from recipelab.proposer.hybrid import HybridProposer
from recipelab.proposer.llm import LLMConfig, LLMProposer, LLMUnavailable
from recipelab.proposer.space import Knob, SearchSpace, default_space

PROPOSERS: dict[str, type[Proposer]] = {
    proposer.name: proposer for proposer in (ClassicalProposer, LLMProposer, HybridProposer)
}

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
