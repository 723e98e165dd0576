"""The ``recipelab`` command as a user meets it: readable output, clear errors, exit codes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recipelab.agent.campaign import Campaign
from recipelab.agent.settings import CampaignSettings, save
from recipelab.cli import app
from recipelab.trainer.spec import CorpusSpec

runner = CliRunner()


@pytest.fixture(scope="module")
def finished_campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("campaign")
    cache = tmp_path_factory.mktemp("cache")
    settings = CampaignSettings(name="done", preset="tiny", iterations=3, promote=1,
                                stress_steps=20, stress_log_every=10,
                                corpus=CorpusSpec(cache_dir=str(cache)))
    save(settings, directory)
    Campaign(settings, directory).run()
    return directory


def test_train_prints_val_bpb_throughput_and_peak_memory(tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", "--preset", "tiny", "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    for label in ("val_bpb", "tokens/s", "peak memory", "wall time"):
        assert label in result.output
    assert (tmp_path / "t" / "result.json").exists()


def test_train_with_a_target_too_large_for_the_budget_names_the_smallest_budget() -> None:
    result = runner.invoke(app, ["train", "--preset", "tiny", "--target", "llama3-70b"])
    assert result.exit_code == 2
    assert "27,268,096" in result.output and "--budget" in result.output


def test_train_with_an_invalid_recipe_file_names_the_bad_knob(tmp_path: Path) -> None:
    bad = tmp_path / "recipe.json"
    bad.write_text('{"shape": {"n_layer": 2}, "optimizr": {}}')
    result = runner.invoke(app, ["train", "--recipe", str(bad)])
    assert result.exit_code == 2
    assert "optimizr" in result.output and "d_model" in result.output


def test_run_without_a_budget_asks_for_one(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--dir", str(tmp_path / "c"), "--preset", "tiny"])
    assert result.exit_code == 2
    assert "--iterations" in result.output


def test_status_shows_progress_and_the_best_trials(finished_campaign: Path) -> None:
    result = runner.invoke(app, ["status", str(finished_campaign)])
    assert result.exit_code == 0, result.output
    assert "3/3 proxy trials" in result.output and "p0000" in result.output


def test_logs_filter_by_event_and_trial(finished_campaign: Path) -> None:
    result = runner.invoke(app, ["logs", str(finished_campaign), "--event", "trial_finished",
                                 "--trial", "p0001"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "trial_finished" in lines[0] and "p0001" in lines[0]


def test_db_check_reports_agreement_and_rebuild_restores_a_deleted_row(
        finished_campaign: Path) -> None:
    assert runner.invoke(app, ["db", "check", str(finished_campaign)]).exit_code == 0
    with sqlite3.connect(finished_campaign / "trajectory.sqlite") as db:
        db.execute("delete from trials where trial_id = 'p0001'")
    check = runner.invoke(app, ["db", "check", str(finished_campaign)])
    assert check.exit_code == 1 and "p0001" in check.output

    rebuilt = runner.invoke(app, ["db", "rebuild", str(finished_campaign)])

    assert rebuilt.exit_code == 0, rebuilt.output
    assert runner.invoke(app, ["db", "check", str(finished_campaign)]).exit_code == 0


def test_status_of_a_missing_campaign_says_how_to_start_one(tmp_path: Path) -> None:
    result = runner.invoke(app, ["status", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "recipelab run" in result.output
