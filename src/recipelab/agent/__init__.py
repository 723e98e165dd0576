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

from importlib import import_module
from typing import Any

_EXPORTS = {"Campaign": "campaign", "CampaignSettings": "settings",
            "run_preflight": "preflight", "campaign_status": "status"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
