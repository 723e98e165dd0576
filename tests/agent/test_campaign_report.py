"""The campaign regenerates its report when it ends; a report it cannot write is a warning."""

from __future__ import annotations

from pathlib import Path

from recipelab.agent.campaign import Campaign
from recipelab.agent.settings import CampaignSettings

from .conftest import events


def test_a_report_that_cannot_be_written_is_a_warning_not_a_failed_campaign(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 1, "promote": 0, "noise_seeds": 1})
    (tmp_path / "report").write_text("a file where the report folder should go")

    summary = Campaign(settings, tmp_path).run()

    assert summary.proxy_trials == 1 and summary.best is not None
    (warning,) = events(tmp_path, "report_failed")
    assert warning["level"] == "warning" and "report" in warning["error"]
    assert (tmp_path / "report").read_text().startswith("a file")


def test_the_campaign_report_is_written_in_the_campaign_directory(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 1, "promote": 0, "noise_seeds": 1})
    Campaign(settings, tmp_path).run()
    text = (tmp_path / "report" / "report.md").read_text()
    assert text.startswith("# recipelab report: campaign tiny")
    assert "No stress runs yet" in text and (tmp_path / "report" / "val_bpb.png").exists()
    assert events(tmp_path, "report_failed") == []
