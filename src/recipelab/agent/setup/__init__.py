"""Before the first trial: what a campaign was asked to do and what it runs on.

- :mod:`~recipelab.agent.setup.settings`, :mod:`~recipelab.agent.setup.settings_components`:
  the settings tree, saved in the campaign directory;
- :mod:`~recipelab.agent.setup.build`: the one step from saved and given settings to the
  resolved ones (merge, refusals, budget rule, every ``auto``), with
  :mod:`~recipelab.agent.setup.machine` and :mod:`~recipelab.agent.setup.input_check`;
- :mod:`~recipelab.agent.setup.preflight`: the checks that prove tonight's campaign can run,
  and :mod:`~recipelab.agent.setup.window`, the plan of a time window;
- :mod:`~recipelab.agent.setup.proposer_choice`, :mod:`~recipelab.agent.setup.priors`: the
  proposer and its calibration from earlier campaigns.

Entry points: :class:`CampaignSettings`, :func:`build` and :func:`run_preflight`.
"""

from __future__ import annotations

from typing import Any

from recipelab.lazy import lazy_export

EXPORTS = {"CampaignSettings": "recipelab.agent.setup.settings",
           "build": "recipelab.agent.setup.build",
           "run_preflight": "recipelab.agent.setup.preflight"}
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    """The entry points, imported on first use."""
    return lazy_export(__name__, EXPORTS, name)
