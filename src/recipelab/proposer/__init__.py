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

import importlib
from typing import TYPE_CHECKING, Any

from recipelab.proposer.base import Observation, Proposal, Proposer

if TYPE_CHECKING:
    from recipelab.proposer.classical import ClassicalProposer
    from recipelab.proposer.hybrid import HybridProposer
    from recipelab.proposer.llm import LLMConfig, LLMProposer, LLMUnavailable
    from recipelab.proposer.space import Knob, SearchSpace, default_space

    PROPOSERS: dict[str, type[Proposer]]

_LAZY = {"ClassicalProposer": "classical", "HybridProposer": "hybrid", "LLMConfig": "llm",
         "LLMProposer": "llm", "LLMUnavailable": "llm", "Knob": "space",
         "SearchSpace": "space", "default_space": "space"}


def __getattr__(name: str) -> Any:
    """The lazily loaded names, imported from their module on first use and kept."""
    if name == "PROPOSERS":
        value: Any = {proposer.name: proposer for proposer in (
            __getattr__("ClassicalProposer"), __getattr__("LLMProposer"),
            __getattr__("HybridProposer"))}
    elif name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


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
