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
from recipelab.agent.setup.settings import CampaignSettings, LadderSettings, WindowSettings, save
from recipelab.cli import app
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import CorpusSpec
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.record import TrialRecord
from tests.cli.shell import recipelab

runner = CliRunner()


@pytest.fixture(scope="module")
def three_trials(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("campaign")
    cache = tmp_path_factory.mktemp("cache")
    settings = CampaignSettings(name="done", preset="tiny", corpus=CorpusSpec(cache_dir=str(cache)),
                                window=WindowSettings(iterations=3),
                                ladder=LadderSettings(promote=1, stress_steps=20, stress_log_every=10))
    save(settings, directory)
    Campaign(settings, directory).run()
    return directory


def test_status_shows_progress_and_the_best_trials(three_trials: Path) -> None:
    result = runner.invoke(app, ["status", str(three_trials)])
    assert result.exit_code == 0, result.output
    assert "3/3 proxy trials" in result.output and "p0000" in result.output


def test_logs_filter_by_event_and_trial(three_trials: Path) -> None:
    result = runner.invoke(app, ["logs", str(three_trials), "--event", "trial_finished",
                                 "--trial", "p0001"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "trial_finished" in lines[0] and "p0001" in lines[0]


def test_db_check_reports_agreement_and_rebuild_restores_a_deleted_row(
        three_trials: Path) -> None:
    assert runner.invoke(app, ["db", "check", str(three_trials)]).exit_code == 0
    with sqlite3.connect(three_trials / "trajectory.sqlite") as db:
        db.execute("delete from trials where trial_id = 'p0001'")
    check = runner.invoke(app, ["db", "check", str(three_trials)])
    assert check.exit_code == 1 and "p0001" in check.output

    rebuilt = runner.invoke(app, ["db", "rebuild", str(three_trials)])

    assert rebuilt.exit_code == 0, rebuilt.output
    assert runner.invoke(app, ["db", "check", str(three_trials)]).exit_code == 0


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
        three_trials: Path, command: str) -> None:
    """Checking on a campaign from another terminal is instant: neither command pays for
    torch (seconds to import) nor the proposers' Optuna nor matplotlib."""
    done = subprocess.run([sys.executable, "-c", SHOW_IMPORTS, command, str(three_trials)],
                          text=True, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "p0000" in done.stdout
    assert done.stderr.splitlines()[-1] == "imported:", done.stderr



def gain_cells(markdown: str) -> dict[str, str]:
    """The report's top-10 table: trial id -> its gain cell."""
    table = markdown.split("## Top 10 proxy trials", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ")][1:]
    return {row[1]: row[3] for row in rows}


def proxy(trial_id: str, val_bpb: float, seed: int, proposer: str = "baseline",
          lr: float | None = None, parent: str | None = None) -> TrialRecord:
    recipe = proxy_recipe("tiny").apply({"seed": seed, **({"optimizer.lr": lr} if lr else {})})
    return TrialRecord(campaign="gains", trial_id=trial_id, kind="proxy", status="complete",
                       proposer=proposer, parent=parent, recipe=recipe.model_dump(mode="json"),
                       edit={"optimizer.lr": lr} if lr else {}, val_bpb=val_bpb)


def test_status_and_the_report_print_the_same_gain_with_the_same_label(tmp_path: Path) -> None:
    """Every trial's gain over the baseline, as `recipelab status` and `recipelab report` print
    it for one stored campaign: one number (``Ledger.proxy_gain``), labelled with its seeds,
    the mean over them where a recipe has several."""
    directory = tmp_path / "gains"
    directory.mkdir()
    save(CampaignSettings(name="gains", preset="tiny"), directory)
    records = [proxy(f"p000{s}", v, s) for s, v in enumerate((2.50, 2.80, 2.20))]
    records += [proxy("p0003", 2.40, 0, "classical-tpe", lr=0.02),
                proxy("p0004", 2.77, 1, "seed-rerun", lr=0.02, parent="p0003"),
                proxy("p0005", 2.16, 2, "seed-rerun", lr=0.02, parent="p0003"),
                proxy("p0006", 2.90, 0, "classical-tpe", lr=0.001)]
    with TrajectoryStore(directory, "gains") as store:
        for record in records:
            store.append(record)
    shown = recipelab("status", str(directory), cwd=tmp_path, env={"COLUMNS": "400"})
    report = recipelab("report", str(directory), cwd=tmp_path)
    assert shown.returncode == 0 and report.returncode == 0, shown.stderr + report.stderr
    markdown = Path(report.stdout.split("wrote ", 1)[1].split(" and ", 1)[0])
    gains = {trial: cell for trial, cell in gain_cells(markdown.read_text()).items()
             if cell != "—"}
    assert gains["p0003"].endswith(", 3 seeds") and gains["p0006"].endswith(", 1 seed")
    for trial, cell in gains.items():
        row = next(line for line in shown.stdout.splitlines() if f"│ {trial} " in line)
        assert f"│ {cell} " in row, (trial, cell, row)
