"""Campaigns on the Ray executor, on a real local Ray instance (2 CPUs, loopback)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.runner.ray import WORKER_FILE
from recipelab.trajectory import TrajectoryStore

from .conftest import events, read_jsonl, wait_for

pytestmark = pytest.mark.usefixtures("ray_cluster")


@pytest.fixture
def ray_settings(tiny_settings: CampaignSettings) -> CampaignSettings:
    return tiny_settings.model_copy(update={"executor": "ray", "parallel": 2})


def overlapping(records: list[dict[str, object]]) -> bool:
    spans = sorted((str(r["started_at"]), str(r["finished_at"])) for r in records)
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans))


def test_a_parallel_campaign_records_every_trial_once_with_distinct_candidates(
        tmp_path: Path, ray_settings: CampaignSettings) -> None:
    settings = ray_settings.model_copy(update={"iterations": 5, "promote": 2, "top_seeds": 2,
                                               "close_call_seeds": 0})
    summary = Campaign(settings, tmp_path).run()

    lines = read_jsonl(tmp_path / "trajectory.jsonl")
    assert len({r["trial_id"] for r in lines}) == len(lines), "a trial recorded twice"
    trained = [r for r in lines if r["kind"] == "proxy" and r["status"] in ("complete", "failed")]
    assert summary.proxy_trials == len(trained) == 5
    assert len({r["fingerprint"] for r in trained}) == 5, "two trained proxies were the same"
    assert overlapping(trained), "no two proxy trials ever ran at the same time"
    stress = [r for r in lines if r["kind"] == "stress"]
    # the top rung: the two finalists and the baseline, each at two seeds
    assert len(stress) == 6 and all(r["verdict"] for r in stress)
    assert overlapping(stress), "the top rung's runs did not run side by side"
    with TrajectoryStore(tmp_path, settings.name, readonly=True) as store:
        assert store.check() == []
        assert {r.trial_id for r in store.records()} == {r["trial_id"] for r in lines}
    for record in lines:
        out_dir = tmp_path / record["artifacts"]["dir"]
        assert (out_dir / "trial.log").exists() and (out_dir / "result.json").exists()


def test_a_worker_killed_mid_trial_is_interrupted_and_its_candidate_runs_again(
        tmp_path: Path, ray_settings: CampaignSettings) -> None:
    settings = ray_settings.model_copy(update={"iterations": 3, "promote": 0})
    victim = tmp_path / "trials" / "p0001"
    killed: dict[str, int] = {}

    def kill_the_worker() -> None:
        wait_for(lambda: (victim / WORKER_FILE).exists() and (victim / "trial.log").exists())
        pids = json.loads((victim / WORKER_FILE).read_text())
        killed.update(pids)
        os.kill(pids["worker_pid"], signal.SIGKILL)

    killer = threading.Thread(target=kill_the_worker, daemon=True)
    killer.start()
    summary = Campaign(settings, tmp_path).run()  # in the main thread: it installs signal handlers
    killer.join(timeout=10)

    assert killed, "the worker of p0001 was never seen"
    lines = read_jsonl(tmp_path / "trajectory.jsonl")
    by_id = {r["trial_id"]: r for r in lines}
    assert by_id["p0001"]["status"] == "interrupted"
    assert "WorkerCrashedError" in by_id["p0001"]["message"]
    reruns = [r for r in lines if r["retry_of"] == "p0001"]
    assert len(reruns) == 1 and reruns[0]["status"] in ("complete", "failed")
    assert reruns[0]["fingerprint"] == by_id["p0001"]["fingerprint"]
    assert summary.proxy_trials == 3
    assert [e["trial_id"] for e in events(tmp_path, "requeued")] == ["p0001"]
    wait_for(lambda: not psutil.pid_exists(killed["trainer_pid"])
             or psutil.Process(killed["trainer_pid"]).status() == psutil.STATUS_ZOMBIE,
             timeout_s=30)


def test_without_ray_the_ray_executor_names_the_extra_to_install(tmp_path: Path) -> None:
    # Ray is installed here; making its import fail is the only way to see the message.
    script = ("import sys; sys.modules['ray'] = None\n"
              "from recipelab.cli import main\n"
              "sys.argv = ['recipelab', 'run', '--name', 'x', '--preset', 'tiny', "
              "'--iterations', '1', '--executor', 'ray']\n"
              "main()\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 2
    assert "pip install 'recipelab[ray]'" in done.stderr
    campaign = tmp_path / "campaigns" / "x"
    written = {p.name for p in campaign.iterdir()} if campaign.exists() else set()
    assert written <= {"settings.json"}, "no trial may have run"
