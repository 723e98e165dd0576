"""The fault suite: whatever breaks during a night, the campaign's books stay whole.

Faults are produced for real: SIGKILL of the orchestrator at random moments, trainers that
abort, raise, hang, blow up, run out of memory or out of disk, a campaign directory on a
full disk. After each, every trial is recorded exactly once, JSONL and SQLite agree, nothing
is left ``running``, and the loop goes on. (Store-level faults, such as a kill in the middle
of a record's write, torn and corrupt lines and a corrupt SQLite file, are specified in
``tests/trajectory/test_store.py``; hostile proposals in ``test_hostile_input.py``.)
"""

from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.runner import LocalExecutor
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import CorpusSpec, TrialSpec

from .audit import audit
from .conftest import events, run_cli, wait_for
from .processes import kill_orchestrator

KILL_RUN = ("run", "--name", "faults", "--preset", "tiny", "--iterations", "6", "--promote", "2",
            "--stress-steps", "150", "--noise-seeds", "1", "--rung-size", "0", "--no-attribution",
            "--top-seeds", "2", "--close-call-seeds", "0")


def stress_checkpoints(campaign: Path) -> set[tuple[str, str]]:
    found = set()
    for latest in (campaign / "trials").glob("stress-*/checkpoint/latest"):
        try:
            found.add((latest.parent.parent.name, latest.read_text()))
        except OSError:  # being replaced right now
            continue
    return found


def phase_reached(campaign: Path, phase: str) -> Callable[[], bool]:
    """A condition that turns true the next time the campaign reaches ``phase``."""
    if phase == "stress_checkpoint":
        before = stress_checkpoints(campaign)
        return lambda: bool(stress_checkpoints(campaign) - before)
    count = len(events(campaign, phase))
    return lambda: len(events(campaign, phase)) > count


@pytest.mark.timeout(900)  # about a minute on a quiet machine; a loaded one stretches it
def test_random_kills_in_every_phase_then_a_restart_lose_and_duplicate_nothing(
        tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("RECIPELAB_FAULT_SEED", "5")))
    campaign = tmp_path / "campaigns" / "faults"
    phases = ("proposal", "trial_started", "trial_finished", "trial_started", "promoted",
              "stress_checkpoint", "stress_checkpoint")
    kills = 0
    for phase in phases:
        reached = phase_reached(campaign, phase)
        process = run_cli(*KILL_RUN, cwd=tmp_path)
        wait_for(lambda: reached() or process.poll() is not None, timeout_s=240)  # noqa: B023
        time.sleep(rng.uniform(0.0, 0.4))  # somewhere inside the phase, not at its first line
        if process.poll() is not None:  # the campaign finished before this phase came round
            output, _ = process.communicate()
            assert process.returncode == 0, output
            break
        kill_orchestrator(process.pid)
        process.wait()
        kills += 1

    final = run_cli(*KILL_RUN, cwd=tmp_path)
    output, _ = final.communicate(timeout=600)

    assert final.returncode == 0, output
    assert kills >= 5, f"only {kills} kills landed"
    books = audit(campaign, "faults")
    assert books.clean, books
    assert len(books.trained("proxy")) == 6
    stress = books.trained("stress")
    # the top rung: the two finalists and the baseline, each at two seeds
    assert len(stress) == 6 and all(r["status"] == "complete" for r in stress)
    # at least 20 points per top-rung run: every 150 // 20 = 7 steps, and the last (a finalist
    # with another batch trains the rung's tokens in its own number of steps)
    assert all(r["budget"] == 150 for r in stress)
    assert all([p["step"] for p in r["curve"]] == [*range(7, n, 7), n]
               for r in stress for n in [r["recipe"]["steps"]])
    interrupted_stress = {r["trial_id"] for r in books.records
                          if r["kind"] == "stress" and r["status"] == "interrupted"}
    resumed = [r for r in stress if r["retry_of"] in interrupted_stress]
    starts = [r["metrics"].get("resumed_from_step") for r in resumed]
    assert resumed and all(start is None or start >= 50 for start in starts)
    assert any(start is not None for start in starts), "no top-rung run resumed a checkpoint"


def test_a_trainer_that_raises_is_a_crash_with_its_traceback_kept(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    # A regular file where the stress run's checkpoint directory should be: saving raises.
    spec = TrialSpec(trial_id="s0000", kind="stress", recipe=proxy_recipe("tiny"), corpus=corpus,
                     out_dir=str(tmp_path / "s0000"), checkpoint_every=5)
    spec.checkpoint_path.parent.mkdir(parents=True)
    spec.checkpoint_path.write_text("")
    executor = LocalExecutor(warm=False)

    result = executor.wait(executor.submit(spec))

    assert (result.status, result.reason) == ("failed", "crash")
    assert result.message is not None and "exited with code 1" in result.message
    log = (tmp_path / "s0000" / "trial.log").read_text()
    assert "Traceback" in log and "checkpoint" in log


def test_a_corpus_cache_that_cannot_be_written_costs_time_not_the_trial(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    spec = TrialSpec(trial_id="t", recipe=proxy_recipe("tiny"), out_dir=str(tmp_path / "t"),
                     corpus=corpus.model_copy(update={"cache_dir": str(blocker)}))
    executor = LocalExecutor(warm=False)

    result = executor.wait(executor.submit(spec))

    assert result.status == "complete", result.message
    assert "not cached" in (tmp_path / "t" / "trial.log").read_text()


@pytest.mark.parametrize("limit", [1, 700], ids=["no-room-at-all", "room-for-a-short-result"])
def test_a_trial_out_of_disk_fails_as_disk_full_and_the_loop_goes_on(
        tmp_path: Path, tiny_settings: CampaignSettings, limit: int) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 2, "promote": 0})
    executor = LocalExecutor(file_size_limit_bytes=limit)

    summary = Campaign(settings, tmp_path, executor=executor).run()

    books = audit(tmp_path, "tiny")
    assert books.clean, books
    assert summary.proxy_trials == 2
    for record in books.trained("proxy"):
        assert (record["status"], record["reason"]) == ("failed", "disk_full"), record["message"]
        assert (tmp_path / record["artifacts"]["dir"] / "trial.log").exists()
    assert {e["reason"] for e in events(tmp_path, "trial_finished")} == {"disk_full"}


FULL_DISK = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
from recipelab.cli import main
sys.argv = ["recipelab", *sys.argv[1:]]
main()
"""


def test_a_campaign_directory_on_a_full_disk_is_refused_before_any_trial(tmp_path: Path) -> None:
    # RLIMIT_FSIZE=0 makes every write of a byte fail as on a full disk, for root as well.
    child = subprocess.run(
        [sys.executable, "-c", FULL_DISK, "run", "--name", "full", "--preset", "tiny",
         "--iterations", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0)))

    assert child.returncode == 2, child.stderr
    assert "cannot write in campaign directory campaigns/full" in child.stderr
    assert "free some space on the disk holding campaigns/full" in child.stderr
    assert "(disk" in child.stderr  # the preflight's summary line names the failed check
    assert not (tmp_path / "campaigns").exists()
