"""Campaigns stored by hand for the CLI's tests: nothing trains."""

from __future__ import annotations

from pathlib import Path

from recipelab.agent.setup.settings import CampaignSettings, save
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.record import TrialRecord


def stored_baseline_campaign(directory: Path, settings: CampaignSettings,
                             curve: list[dict[str, float]] | None = None) -> Path:
    """``settings`` saved in ``directory`` with its baseline stored as one complete proxy
    trial (val_bpb 2.5, training loss ``curve``): what a campaign of one trial leaves behind."""
    directory.mkdir(parents=True)
    save(settings, directory)
    recipe = settings.baseline()
    with TrajectoryStore(directory, settings.name) as store:
        store.append(TrialRecord(campaign=settings.name, trial_id="p0000", kind="proxy",
                                 status="complete", proposer="baseline", val_bpb=2.5,
                                 recipe=recipe.model_dump(mode="json"),
                                 fingerprint=recipe.fingerprint(), curve=curve or []))
    return directory
