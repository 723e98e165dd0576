"""Specifications of the campaign loop with several trials in flight (``--parallel``)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.trajectory import TrajectoryStore

from .conftest import ScriptedProposer, events, fake_executor, read_jsonl, run_cli, wait_for


def test_a_batch_repeating_a_candidate_in_flight_is_rejected_as_a_duplicate(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 3, "promote": 0, "parallel": 3,
                                                "noise_seeds": 1})
    same = {"optimizer.lr": 0.002}
    proposer = ScriptedProposer(settings.baseline(), [same, same, {"optimizer.lr": 0.004}])
    summary = Campaign(settings, tmp_path, proposer=proposer, executor=fake_executor()).run()

    lines = read_jsonl(tmp_path / "trajectory.jsonl")
    by_edit = [(r["edit"], r["status"]) for r in lines if r["proposer"] == "scripted"]
    assert sorted(status for _, status in by_edit) == ["complete", "complete", "rejected"]
    [rejected] = [r for r in lines if r["status"] == "rejected"]
    [first] = [r for r in lines if r["edit"] == same and r["status"] != "rejected"]
    assert "already ran" in rejected["reasons"][0]
    assert rejected["finished_at"] < first["finished_at"], "the duplicate was not in flight"
    assert summary.proxy_trials == 3
    with TrajectoryStore(tmp_path, settings.name, readonly=True) as store:
        assert store.check() == []


@pytest.mark.parametrize(("signals", "last_status"), [(1, "complete"), (2, "interrupted")])
def test_one_stop_signal_lets_every_trial_in_flight_finish_and_a_second_cancels_them_all(
        tmp_path: Path, signals: int, last_status: str) -> None:
    campaign = tmp_path / "campaigns" / "par"
    process = run_cli("run", "--name", "par", "--preset", "tiny", "--iterations", "50",
                      "--promote", "0", "--parallel", "2", "--noise-seeds", "1",
                      "--proposer", "classical", cwd=tmp_path)
    wait_for(lambda: any(e.get("trial_id") == "p0001" for e in events(campaign, "trial_started")))
    for _ in range(signals):
        process.send_signal(signal.SIGTERM)
        time.sleep(0.2)
    output, _ = process.communicate(timeout=300)

    assert process.returncode == 0, output
    lines = read_jsonl(campaign / "trajectory.jsonl")
    assert sorted(r["trial_id"] for r in lines) == ["p0000", "p0001"]
    assert {r["status"] for r in lines} == {last_status}
    assert "stopped early" in output
