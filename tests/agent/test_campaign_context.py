"""The phase contract (:class:`recipelab.agent.campaign_context.Phase`), checked on every
phase the campaign walks, as optuna checks each sampler against ``BaseSampler``.

A phase decides from the records alone: run again on a campaign whose records hold its
work, it trains nothing and writes nothing. Asked to stop, it launches nothing.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from rich.console import Console

from recipelab.agent.campaign import Campaign
from recipelab.agent.campaign_context import CampaignContext, Phase, open_context
from recipelab.agent.campaign_lock import CampaignLock
from recipelab.agent.setup.proposer_choice import GuardedProposer
from recipelab.agent.setup.settings import CampaignSettings, save
from recipelab.runner.fake import FakeExecutor

from .conftest import ScriptedProposer, fake_executor

WINNING_EDIT = {"optimizer.lr": 3e-3, "optimizer.eps": 1e-10}  # two groups: attribution has work
PHASES = ("search", "ladder", "attribution", "width")


@pytest.fixture
def settings(tiny_settings: CampaignSettings) -> CampaignSettings:
    """Every phase on: the search, a ladder with a middle rung and a close call, the
    attribution and the width rung."""
    return tiny_settings.model_copy(update={"iterations": 4, "noise_seeds": 3, "rung_size": 2,
                                            "close_call_seeds": 2, "attribution": True,
                                            "width_rung": True})


def campaign(settings: CampaignSettings, directory: Path, executor: FakeExecutor) -> Campaign:
    return Campaign(settings, directory, executor=executor,
                    proposer=ScriptedProposer(settings.baseline(), [WINNING_EDIT]))


@contextmanager
def opened(night: Campaign) -> Iterator[tuple[CampaignContext, list[Phase]]]:
    """The campaign open as ``Campaign.run`` opens it, with its phases, none run yet."""
    with CampaignLock(night.directory):
        ctx = open_context(night.settings, night.directory, baseline=night.baseline,
                           device=night.device, executor=night.executor, memory=night.memory,
                           stops=night.stops, console=Console(file=io.StringIO()),
                           log_format="events", on_change=lambda: None,
                           on_record=lambda *records: None)
        guarded = GuardedProposer(night.proposer, night.settings, night.baseline, night.space,
                                  [], ctx.log)
        try:
            yield ctx, night.phases(guarded)
        finally:
            guarded.close()
            ctx.store.close()
            ctx.close()


@pytest.fixture
def finished_campaign(settings: CampaignSettings, tmp_path: Path) -> Path:
    save(settings, tmp_path)
    summary = campaign(settings, tmp_path, fake_executor(recipe_noise=0.002)).run()
    assert summary.winner is not None, "the contract needs every phase to have had work"
    return tmp_path


@pytest.mark.parametrize("index", range(len(PHASES)), ids=PHASES)
def test_on_a_finished_campaign_a_phase_trains_nothing_and_writes_nothing(
        settings: CampaignSettings, finished_campaign: Path, index: int) -> None:
    trajectory = finished_campaign / "trajectory.jsonl"
    before = trajectory.read_bytes()
    executor = fake_executor(recipe_noise=0.002)
    with opened(campaign(settings, finished_campaign, executor)) as (ctx, phases):
        assert len(phases) == len(PHASES)
        phases[index].run(ctx)
    assert executor.submitted == []
    assert trajectory.read_bytes() == before


@pytest.mark.parametrize("index", range(len(PHASES)), ids=PHASES)
def test_asked_to_stop_a_phase_launches_nothing(
        settings: CampaignSettings, tmp_path: Path, index: int) -> None:
    save(settings, tmp_path)
    executor = fake_executor()
    if index > 0:  # the phases before it ran: it has work to refuse
        night = campaign(settings, tmp_path, executor)
        with opened(night) as (ctx, phases):
            for phase in phases[:index]:
                phase.run(ctx)
    executor = fake_executor()
    night = campaign(settings, tmp_path, executor)
    night.stops.count = 1  # one SIGINT: finish what runs, launch nothing more
    with opened(night) as (ctx, phases):
        phases[index].run(ctx)
    assert executor.submitted == []
