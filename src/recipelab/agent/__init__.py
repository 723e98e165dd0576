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

__all__ = ["Campaign", "CampaignSettings", "campaign_status", "run_preflight"]


def __getattr__(name: str) -> Any:
    """The entry points, imported on first use."""
    if name == "Campaign":
        from recipelab.agent.campaign import Campaign

        return Campaign
    if name == "CampaignSettings":
        from recipelab.agent.settings import CampaignSettings

        return CampaignSettings
    if name == "run_preflight":
        from recipelab.agent.preflight import run_preflight

        return run_preflight
    if name == "campaign_status":
        from recipelab.agent.status import campaign_status

        return campaign_status
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
