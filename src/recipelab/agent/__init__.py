"""The campaign: the one writer of a trajectory, from the first baseline to the winner.

Its rooms: :mod:`~recipelab.agent.setup` (what the campaign was asked to do and runs on,
before the first trial), :mod:`~recipelab.agent.phases` (the search, the ladder, attribution
and the width rung) and :mod:`~recipelab.agent.watch` (what a person reads while it runs).
The modules here are the campaign's core: it opens its context, walks its phases, keeps its
trials in flight, lock, deadline and stop signals.

Entry points:

- :class:`~recipelab.agent.campaign.Campaign` runs one campaign (``recipelab run``), over a
  :class:`~recipelab.agent.setup.settings.CampaignSettings`;
- :func:`~recipelab.agent.setup.preflight.run_preflight` proves a night can run
  (``recipelab check``);
- :func:`~recipelab.agent.watch.status.campaign_status` reads a campaign, running or not
  (``recipelab status``).

The names are loaded on first use, so ``status`` and ``logs``, which import this package,
never pull in torch.
"""

from __future__ import annotations

from typing import Any

from recipelab.lazy import lazy_export

EXPORTS = {"Campaign": "recipelab.agent.campaign",
           "CampaignSettings": "recipelab.agent.setup.settings",
           "campaign_status": "recipelab.agent.watch.status",
           "run_preflight": "recipelab.agent.setup.preflight"}
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    """The entry points, imported on first use."""
    return lazy_export(__name__, EXPORTS, name)
