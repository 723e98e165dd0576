"""The report is live: rewritten as trials end, so a person can open it mid-campaign."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.watch import live_report
from recipelab.proposer import Observation, Proposal
from recipelab.recipe import Recipe
from recipelab.report import ReportContext, write_report
from recipelab.report.context import LiveStatus, RunningCurve
from recipelab.targets import get_target, proxy_recipe
from recipelab.trainer.spec import CurvePoint
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord

from ..conftest import ScriptedProposer, fake_executor

EDITS: list[dict[str, Any]] = [{"optimizer.lr": 0.02}, {"optimizer.lr": 0.005},
                               {"schedule.kind": "linear"}]


class Snapshotting(ScriptedProposer):
    """Proposes the scripted edits and keeps the report page as it was at each turn."""

    def __init__(self, baseline: Recipe, directory: Path) -> None:
        super().__init__(baseline, EDITS)
        self.page = directory / "report" / "report.html"
        self.seen: list[str] = []

    def propose(self, history: list[Observation], n: int) -> list[Proposal]:
        if self.page.exists():
            self.seen.append(self.page.read_text())
        return super().propose(history, n)


def test_the_report_is_rewritten_as_trials_end_and_says_the_campaign_is_running(
        tmp_path: Path, tiny_settings: CampaignSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_report, "LIVE_REPORT_EVERY_S", 0.0)
    settings = tiny_settings.model_copy(update={"iterations": 4})
    proposer = Snapshotting(settings.baseline(), tmp_path)
    Campaign(settings, tmp_path, executor=fake_executor(), proposer=proposer).run()

    assert proposer.seen, "a report existed before the search ended"
    mid = proposer.seen[-1]
    assert "The campaign is running" in mid and 'http-equiv="refresh"' in mid
    assert "after 4 proxy trials (" in mid and "p0000" in mid
    assert "The console&#x27;s last lines:" in mid and "p0000 proxy" in mid
    final = (tmp_path / "report" / "report.html").read_text()
    assert "The campaign is running" not in final and "refresh" not in final


def test_the_loss_curves_of_the_trials_in_flight_are_read_from_their_logs(tmp_path: Path) -> None:
    baseline = proxy_recipe("tiny").model_dump(mode="json")
    points = [CurvePoint(step=step, loss=5.0 - step / 10, grad_norm=1.0, lr=0.01)
              for step in (10, 20)]
    for trial_id in ("p0001", "p0002"):
        trial = tmp_path / "trials" / trial_id
        trial.mkdir(parents=True)
        (trial / "trial.log").write_text(
            "trial started\n" + "\n".join(p.log_line() for p in points) + "\nstep 30 lo")
    records = [TrialRecord(campaign="c", trial_id=trial_id, status=status, recipe=baseline)
               for trial_id, status in (("p0001", "running"), ("p0002", "complete"),
                                        ("p0003", "running"))]

    [curve] = live_report.running_curves(tmp_path, records)

    assert (curve.trial_id, curve.steps, curve.losses) == ("p0001", (10, 20), (4.0, 3.0))


def test_a_live_report_shows_the_curves_in_flight_in_its_first_section(tmp_path: Path) -> None:
    live = LiveStatus(updated="02:13:05 UTC", running="p0001 (proxy)", ends="in 3 trials",
                      curves=(RunningCurve("p0001", (10, 20), (4.0, 3.0)),))
    context = ReportContext("c", get_target("toy"), "tiny", live=live)

    write_report(tmp_path, Ledger([]), context)

    page = (tmp_path / "report" / "report.html").read_text()
    first = page.index("The campaign is running")
    plot = page.index('alt="training loss of the trials in flight"')
    assert first < plot < page.index("<h2>", first + 1)
    assert (tmp_path / "report" / "running.png").exists()


def test_each_rewrite_shows_the_console_line_of_the_trial_that_just_ended(
        tmp_path: Path, tiny_settings: CampaignSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_report, "LIVE_REPORT_EVERY_S", 0.0)
    rewrites: list[tuple[list[TrialRecord], LiveStatus]] = []
    monkeypatch.setattr(live_report, "write_report",
                        lambda directory, ledger, context: rewrites.append((ledger.records,
                                                                            context.live)))
    settings = tiny_settings.model_copy(update={"iterations": 4})
    Campaign(settings, tmp_path, executor=fake_executor(),
             proposer=Snapshotting(settings.baseline(), tmp_path)).run()

    trial_rewrites = [(records, live) for records, live in rewrites
                      if max(ended(records), key=lambda r: r.finished_at or "").kind != "result"]
    assert len(trial_rewrites) >= 4
    for records, live in trial_rewrites:
        newest = max(ended(records), key=lambda r: r.finished_at or "")
        assert any(line.startswith(newest.trial_id) for line in live.last_lines), (
            newest.trial_id, live.last_lines)


def ended(records: list[TrialRecord]) -> list[TrialRecord]:
    return [r for r in records if r.is_terminal]
