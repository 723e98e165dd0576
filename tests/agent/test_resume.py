"""Overnight safety: kills, restarts, a torn JSONL tail and a second orchestrator lose nothing."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import psutil
import pytest

from recipelab.agent.campaign import Campaign
from recipelab.agent.campaign_lock import CampaignLock
from recipelab.agent.setup.settings import CampaignSettings, save
from recipelab.trajectory import TrajectoryStore

from .conftest import events, fake_executor, read_jsonl, run_cli, wait_for
from .processes import kill_orchestrator, open_paths, trainer_children

TINY_RUN = ("run", "--name", "kill", "--preset", "tiny", "--iterations", "3", "--promote", "1",
            "--stress-steps", "150", "--top-seeds", "2", "--close-call-seeds", "0")


@pytest.mark.timeout(900)  # a few minutes of real training; a loaded machine stretches it
def test_sigkill_mid_trial_and_mid_stress_run_then_restart_loses_and_duplicates_nothing(
        tmp_path: Path) -> None:
    campaign = tmp_path / "campaigns" / "kill"
    first = run_cli(*TINY_RUN, cwd=tmp_path)
    wait_for(lambda: any(e.get("trial_id") == "p0001" for e in events(campaign, "trial_started")))
    kill_orchestrator(first.pid)
    first.wait()

    second = run_cli(*TINY_RUN, cwd=tmp_path)

    def stress_checkpointed() -> bool:
        return any((d / "checkpoint" / "latest").exists()
                   for d in (campaign / "trials").glob("stress-*"))

    wait_for(stress_checkpointed, timeout_s=300)
    kill_orchestrator(second.pid)
    second.wait()

    third = run_cli(*TINY_RUN, cwd=tmp_path)
    output, _ = third.communicate(timeout=300)
    assert third.returncode == 0, output

    lines = read_jsonl(campaign / "trajectory.jsonl")
    ids = [r["trial_id"] for r in lines]
    assert len(ids) == len(set(ids)), "a trial was recorded twice"
    interrupted = [r for r in lines if r["status"] == "interrupted"]
    assert {r["kind"] for r in interrupted} == {"proxy", "stress"}
    for record in interrupted:
        assert [r["trial_id"] for r in lines if r["retry_of"] == record["trial_id"]], record
    assert sum(r["status"] in ("complete", "failed") for r in lines if r["kind"] == "proxy") == 3
    stress = [r for r in lines if r["kind"] == "stress" and r["status"] == "complete"]
    # the three proxies are the baseline's noise seeds, so the top rung is it at two fresh seeds
    assert sorted(int(r["recipe"]["seed"]) for r in stress) == [1000, 1001]
    lost = {r["trial_id"] for r in interrupted if r["kind"] == "stress"}
    resumed = [r for r in stress if r["retry_of"] in lost]
    assert any((r["metrics"].get("resumed_from_step") or 0) >= 50 for r in resumed), (
        "the checkpointed top-rung run started again from step 0")
    assert all([p["step"] for p in r["curve"]] == [*range(7, 150, 7), 150]  # 150 // 20
               for r in stress)
    with TrajectoryStore(campaign, "kill", readonly=True) as store:
        assert store.check() == []
        assert not store.records(status="running")


def test_a_crashing_trainer_is_recorded_as_crash_and_the_loop_goes_on(tmp_path: Path) -> None:
    campaign = tmp_path / "campaigns" / "crash"
    process = run_cli("run", "--name", "crash", "--preset", "tiny", "--iterations", "2",
                      "--promote", "0", cwd=tmp_path)
    log = campaign / "trials" / "p0001" / "trial.log"

    def running_p0001() -> list[psutil.Process]:
        return [p for p in trainer_children(process.pid) if str(log) in open_paths(p)]

    wait_for(lambda: bool(running_p0001()))
    for worker in running_p0001():
        worker.send_signal(signal.SIGSEGV)
    output, _ = process.communicate(timeout=300)

    assert process.returncode == 0, output
    lines = read_jsonl(campaign / "trajectory.jsonl")
    crashed = next(r for r in lines if r["trial_id"] == "p0001")
    assert (crashed["status"], crashed["reason"]) == ("failed", "crash")
    assert "SIGSEGV" in crashed["message"]
    assert sum(r["status"] in ("complete", "failed") for r in lines) == 2


def test_a_torn_last_jsonl_line_is_set_aside_and_the_campaign_resumes(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 2, "promote": 0})
    Campaign(settings, tmp_path, executor=fake_executor()).run()
    jsonl = tmp_path / "trajectory.jsonl"
    complete_line = jsonl.read_text().splitlines()[-1]
    with jsonl.open("a") as handle:
        handle.write(complete_line[: len(complete_line) // 2])

    summary = Campaign(settings.model_copy(update={"iterations": 3}), tmp_path,
                       executor=fake_executor()).run()

    assert summary.proxy_trials == 3
    assert events(tmp_path, "jsonl_line_set_aside")
    side = tmp_path / "trajectory.rejected-lines.jsonl"
    assert [entry["text"] for entry in read_jsonl(side)] == [complete_line[: len(complete_line) // 2]]
    for line in jsonl.read_text().splitlines():
        json.loads(line)


def test_a_deleted_sqlite_index_is_rebuilt_from_the_jsonl_on_start(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 2, "promote": 0})
    Campaign(settings, tmp_path, executor=fake_executor()).run()
    (tmp_path / "trajectory.sqlite").unlink()

    Campaign(settings, tmp_path, executor=fake_executor()).run()

    assert events(tmp_path, "sqlite_rebuilt")
    rows = sqlite3.connect(tmp_path / "trajectory.sqlite").execute(
        "select count(*) from trials").fetchone()
    assert rows == (2,)


def test_a_second_orchestrator_on_the_same_campaign_is_refused_naming_the_first(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    campaign = tmp_path / "campaigns" / "tiny"
    campaign.mkdir(parents=True)
    save(tiny_settings, campaign)
    with CampaignLock(campaign):
        process = run_cli("run", "--name", "tiny", cwd=tmp_path)
        output, _ = process.communicate(timeout=120)

    assert process.returncode == 2
    assert f"pid {os.getpid()}" in output
    assert not (campaign / "trajectory.jsonl").exists()


def test_changing_the_target_of_an_existing_campaign_is_refused(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    campaign = tmp_path / "campaigns" / "tiny"
    campaign.mkdir(parents=True)
    save(tiny_settings, campaign)

    process = run_cli("run", "--name", "tiny", "--target", "llama2-7b", cwd=tmp_path)
    output, _ = process.communicate(timeout=120)

    assert process.returncode == 2
    assert "target" in output and "new campaign" in output


@pytest.mark.parametrize(("signals", "last_status"), [(1, "complete"), (2, "interrupted")])
def test_one_stop_signal_lets_the_trial_finish_and_a_second_cancels_it(
        tmp_path: Path, signals: int, last_status: str) -> None:
    campaign = tmp_path / "campaigns" / "term"
    process = run_cli("run", "--name", "term", "--preset", "tiny", "--iterations", "50",
                      "--parallel", "1", "--promote", "0", cwd=tmp_path)
    wait_for(lambda: any(e.get("trial_id") == "p0001" for e in events(campaign, "trial_started")))
    for _ in range(signals):
        process.send_signal(signal.SIGTERM)
        time.sleep(0.2)
    output, _ = process.communicate(timeout=300)

    assert process.returncode == 0, output
    lines = read_jsonl(campaign / "trajectory.jsonl")
    assert [r["trial_id"] for r in lines] == ["p0000", "p0001"]
    assert lines[-1]["status"] == last_status
    assert "stopped early" in output
