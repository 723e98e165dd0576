"""Proposers suggest candidates; the agent picks one by name from :data:`PROPOSERS`.

The plug-in point (:class:`Proposer`, :class:`Proposal`, :class:`Observation`) lives in
``base``; the search space every proposer is told about lives in ``space``.
"""

from recipelab.proposer.base import Observation, Proposal, Proposer
from recipelab.proposer.classical import ClassicalProposer
from recipelab.proposer.space import Knob, SearchSpace, default_space

PROPOSERS: dict[str, type[Proposer]] = {ClassicalProposer.name: ClassicalProposer}

__all__ = [
    "PROPOSERS",
    "ClassicalProposer",
    "Knob",
    "Observation",
    "Proposal",
    "Proposer",
    "SearchSpace",
    "default_space",
]
