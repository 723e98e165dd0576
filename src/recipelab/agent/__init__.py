"""The campaign: the one writer of a trajectory, from the first baseline to the winner.

Entry points:

- :class:`~recipelab.agent.campaign.Campaign` runs one campaign (``recipelab run``), over a
  :class:`~recipelab.agent.settings.CampaignSettings`;
- :func:`~recipelab.agent.preflight.run_preflight` proves a night can run
  (``recipelab check``);
- :func:`~recipelab.agent.status.campaign_status` reads a campaign, running or not
  (``recipelab status``).

The names are loaded on first use, so ``status`` and ``logs``, which import this package,
never pull in torch.
"""

from __future__ import annotations

from typing import Any

from recipelab.lazy import lazy_export

EXPORTS = {"Campaign": "recipelab.agent.campaign", "CampaignSettings": "recipelab.agent.settings",
           "campaign_status": "recipelab.agent.status",
           "run_preflight": "recipelab.agent.preflight"}
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    """The entry points, imported on first use."""
    return lazy_export(__name__, EXPORTS, name)
