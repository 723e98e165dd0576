"""``status``, ``logs`` and ``db`` as a user meets them, on a finished campaign: fast (no
torch), readable, and safe on a campaign that is not there."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recipelab.agent.campaign import Campaign
from recipelab.agent.settings import CampaignSettings, LadderSettings, WindowSettings, save
from recipelab.cli import app
from recipelab.trainer.spec import CorpusSpec
from tests.cli.shell import recipelab

runner = CliRunner()


@pytest.fixture(scope="module")
def finished_campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("campaign")
    cache = tmp_path_factory.mktemp("cache")
    settings = CampaignSettings(name="done", preset="tiny", corpus=CorpusSpec(cache_dir=str(cache)),
                                window=WindowSettings(iterations=3),
                                ladder=LadderSettings(promote=1, stress_steps=20, stress_log_every=10))
    save(settings, directory)
    Campaign(settings, directory).run()
    return directory


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


def test_db_rebuild_of_a_missing_campaign_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    result = recipelab("db", "rebuild", "nothing", cwd=tmp_path)

    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "no campaign at" in result.stderr
    assert list(tmp_path.iterdir()) == []


SHOW_IMPORTS = """
import sys
from recipelab.cli import main
try:
    main()
finally:
    heavy = sorted(m for m in ("torch", "optuna", "matplotlib") if m in sys.modules)
    print("imported:" + ",".join(heavy), file=sys.stderr)
"""


@pytest.mark.parametrize("command", ["status", "logs"])
def test_status_and_logs_import_neither_torch_nor_optuna_nor_matplotlib(
        finished_campaign: Path, command: str) -> None:
    """Checking on a campaign from another terminal is instant: neither command pays for
    torch (seconds to import) nor the proposers' Optuna nor matplotlib."""
    done = subprocess.run([sys.executable, "-c", SHOW_IMPORTS, command, str(finished_campaign)],
                          text=True, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "p0000" in done.stdout
    assert done.stderr.splitlines()[-1] == "imported:", done.stderr
