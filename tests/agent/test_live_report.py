"""The report is live: rewritten as trials end, so a person can open it mid-campaign."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from recipelab.agent import live_report
from recipelab.agent.campaign import Campaign
from recipelab.agent.settings import CampaignSettings
from recipelab.proposer import Observation, Proposal
from recipelab.recipe import Recipe

from .conftest import ScriptedProposer, fake_executor

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
