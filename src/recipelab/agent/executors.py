"""Choosing where the campaign's trials run from its settings: this machine, or Ray."""

from __future__ import annotations

from recipelab.agent.executor import Executor, LocalExecutor
from recipelab.agent.settings import CampaignSettings


def build_executor(settings: CampaignSettings) -> Executor:
    if settings.executor == "ray":
        # Imported here: Ray is an optional extra, and only this choice needs it.
        from recipelab.agent.executor_ray import RayExecutor

        return RayExecutor(address=settings.ray_address)
    return LocalExecutor()
