"""The campaign regenerates its report when it ends; a report it cannot write is a warning."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings, save
from recipelab.cli import app

from .conftest import ScriptedProposer, events, fake_executor


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


def test_status_the_report_and_export_read_the_campaign_with_its_own_ladder(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    """A campaign run with ``--promote 0`` climbs no ladder, so it names no winner. Every
    hand-off reads it so: a reading with the default ``--promote`` would name the best proxy
    trial, and ``export`` would hand off a recipe the night never chose."""
    settings = tiny_settings.model_copy(update={"iterations": 3, "promote": 0})
    save(settings, tmp_path)
    proposer = ScriptedProposer(settings.baseline(), [{"optimizer.lr": 3e-3}])
    Campaign(settings, tmp_path, proposer=proposer, executor=fake_executor()).run()
    why = "--promote is 0, so no finalist climbed the ladder that names a winner"

    status = CliRunner().invoke(app, ["status", str(tmp_path)])
    assert status.exit_code == 0 and why in " ".join(status.output.split()), status.output
    export = CliRunner().invoke(app, ["export", str(tmp_path), "--out", str(tmp_path / "out")])
    assert export.exit_code == 2 and why in " ".join(export.output.split()), export.output
    assert not (tmp_path / "out").exists()
    report = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert report.exit_code == 0, report.output
    assert f"Nothing to recommend: {why}" in (tmp_path / "report" / "report.md").read_text()
    chosen = CliRunner().invoke(app, ["export", str(tmp_path), "--out", str(tmp_path / "out"),
                                      "--trial", "p0001"])
    assert chosen.exit_code == 0, chosen.output
