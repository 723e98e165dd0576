"""The window's deadline in a running campaign (:mod:`recipelab.agent.deadline`): the search
stops launching in time for the top rung to run before the deadline, and a window too short
for one top-rung run is said at the start, with the fix. On the fake executor, whose trials
take a set time: the window is about time, not about training."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.watch.status import campaign_status, latest_window

from .conftest import events, fake_executor, read_jsonl


def test_a_campaign_bounded_only_by_its_window_still_runs_a_stress_run_before_its_deadline(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    # Proxy trials of 1 s and top-rung runs of 2 s (the finalist and the baseline at two
    # seeds, and the baseline's family at each) in a window of 50 s, of which the report
    # keeps 15: the search has about 15 s.
    settings = tiny_settings.model_copy(update={
        "iterations": None, "hours": 50 / 3600, "promote": 1, "stress_steps": 40,
        "stress_log_every": 10, "stress_checkpoint_every": 25, "top_seeds": 2})
    executor = fake_executor(duration=lambda spec: spec.recipe.steps * 0.05)

    summary = Campaign(settings, tmp_path, executor=executor).run()
    ended = datetime.now(timezone.utc)

    started = events(tmp_path, "campaign_started")[0]
    assert ended <= datetime.fromisoformat(started["deadline"])
    assert not events(tmp_path, "stress_skipped")
    stress = [r for r in read_jsonl(tmp_path / "trajectory.jsonl") if r["kind"] == "stress"]
    assert summary.stress_runs == 4 and all(s["status"] == "complete" for s in stress)
    assert summary.proxy_trials >= 2  # the window was not all given to Phase 2
    planned = events(tmp_path, "window_planned")
    # the top rung's four, and each one's learning-rate family (× ½, × 2) at each of its seeds
    assert planned and planned[0]["stress_runs"] == 4 + 2 * 2 * 2
    window = latest_window(tmp_path)
    assert window is not None and window.startswith("search until ")
    assert campaign_status(settings, [], window).window == window


def test_a_window_too_short_for_one_stress_run_is_said_at_the_start(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={
        "iterations": None, "hours": 3 / 3600, "stress_steps": 100_000})

    Campaign(settings, tmp_path, executor=fake_executor()).run()

    warning = events(tmp_path, "window_too_short")[0]
    assert warning["estimated"] is True and "--stress-steps" in warning["fix"]
