"""The phases a campaign walks, in order, each deciding from the records alone.

- :mod:`~recipelab.agent.phases.search_phase`: proxy trials until ``--iterations`` or the
  window's deadline, a person's own edits (``--edit``,
  :mod:`~recipelab.agent.phases.person_edits`) first, each through
  :mod:`~recipelab.agent.phases.proxy_trials` (the guardrails, then the executor);
- :mod:`~recipelab.agent.phases.ladder_phase`: seed re-runs
  (:mod:`~recipelab.agent.phases.seeds`), the rungs, the top rung and its close call;
  :mod:`~recipelab.agent.phases.stress` judges a long run's health;
- :mod:`~recipelab.agent.phases.attribution_phase`: which parts of the winner's edit carry
  the gain (its price: :mod:`~recipelab.agent.phases.attribution_cost`);
- :mod:`~recipelab.agent.phases.width_phase`: the recommendation at two widths, for the
  export's size term (its price: :mod:`~recipelab.agent.phases.width_cost`).

The contract every phase keeps is :class:`~recipelab.agent.campaign_context.Phase`'s.
Entry points: the phases themselves.
"""

from __future__ import annotations

from typing import Any

from recipelab.lazy import lazy_export

EXPORTS = {"SearchPhase": "recipelab.agent.phases.search_phase",
           "LadderPhase": "recipelab.agent.phases.ladder_phase",
           "AttributionPhase": "recipelab.agent.phases.attribution_phase",
           "WidthPhase": "recipelab.agent.phases.width_phase"}
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    """The entry points, imported on first use."""
    return lazy_export(__name__, EXPORTS, name)
