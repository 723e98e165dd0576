"""What no campaign may die of, and what should stop one: a proposer that raises is replaced
for the turn; a run of trials failing alike stops launching, with the fix, and exit code 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings, save
from recipelab.cli import app
from recipelab.proposer import Observation, Proposal, Proposer

from .conftest import events, fake_executor, read_jsonl

SECRET = "sk-test-0123456789abcdef"  # noqa: S105 - a fake key the test hunts for


class RaisingProposer(Proposer):
    """A real plug-in whose every call fails, with the API key in its message (as a careless
    HTTP client's error text can)."""

    name = "raising"

    def __init__(self) -> None:
        self.closed = 0

    def propose(self, history: list[Observation], n: int) -> list[Proposal]:
        raise RuntimeError(f"endpoint said no (Authorization: Bearer {SECRET})")

    def prefetch(self, history: list[Observation]) -> None:
        raise KeyError("prefetch broke")

    def close(self) -> None:
        self.closed += 1


def test_a_proposer_that_raises_is_replaced_by_the_classical_one_for_the_turn(
        tmp_path: Path, tiny_settings: CampaignSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECIPELAB_LLM_API_KEY", SECRET)
    settings = tiny_settings.model_copy(update={"iterations": 3, "promote": 0})
    proposer = RaisingProposer()

    summary = Campaign(settings, tmp_path, proposer=proposer, executor=fake_executor()).run()

    assert summary.proxy_trials == 3
    lines = read_jsonl(tmp_path / "trajectory.jsonl")
    assert [r["proposer"] for r in lines][1:] == ["classical-tpe", "classical-tpe"]
    failures = events(tmp_path, "proposer_failed")
    assert {(e["call"], e["error_type"]) for e in failures} >= {
        ("propose", "RuntimeError"), ("prefetch", "KeyError")}
    assert all(e["proposer"] == "raising" for e in failures)
    assert "endpoint said no" in next(e["error"] for e in failures if e["call"] == "propose")
    assert SECRET not in (tmp_path / "events.jsonl").read_text()
    assert proposer.closed == 1


def test_a_run_of_trials_failing_alike_stops_launching_and_names_the_fix(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    # A timeout no trainer can meet: every trial fails for real, the same way.
    settings = tiny_settings.model_copy(update={
        "iterations": 10, "trial_timeout_s": 0.05, "max_consecutive_failures": 3})

    summary = Campaign(settings, tmp_path).run()

    lines = read_jsonl(tmp_path / "trajectory.jsonl")
    assert [(r["status"], r["reason"]) for r in lines] == [("failed", "timeout")] * 3
    assert summary.failing == "timeout" and summary.proxy_trials == 3
    stop = events(tmp_path, "too_many_failures")[0]
    assert stop["reason"] == "timeout" and stop["count"] == 3 and stop["message"]
    assert "--trial-timeout" in stop["hint"]
    assert not events(tmp_path, "promoted")
    assert (tmp_path / "report" / "report.md").exists()
    assert events(tmp_path, "campaign_finished")[0]["failing"] == "timeout"


def test_recipelab_run_exits_3_when_failures_stopped_the_campaign(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={
        "name": "failing", "iterations": 10, "trial_timeout_s": 0.05,
        "max_consecutive_failures": 2})
    save(settings, tmp_path)

    # The preflight would refuse this night at once (its 2-step trial times out too, exit 2);
    # skipped here to reach the failures the campaign itself must stop.
    result = CliRunner().invoke(app, ["run", "--name", "failing", "--dir", str(tmp_path),
                                      "--skip-preflight"])

    assert result.exit_code == 3, result.output
    trained = [r for r in read_jsonl(tmp_path / "trajectory.jsonl") if r["status"] == "failed"]
    assert len(trained) == 2
    assert json.loads((tmp_path / "settings.json").read_text())["window"]["max_consecutive_failures"] == 2
    assert "exits with code 3" in CliRunner().invoke(app, ["run", "--help"],
                                                     env={"COLUMNS": "300"}).output
