"""What a long run is given and ends with: its exit codes, and the budget projection
``--dry-run-budget`` prints (here from a measured status; end to end in test_run.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from recipelab.longrun.budget import BudgetStatus
from recipelab.longrun.pretrain_config import EXIT_BUDGET, PretrainConfig, PretrainResult, dry_run_report
from recipelab.targets import proxy_recipe

STEPS = 1_000_000


def config(tmp_path: Path, **options: object) -> PretrainConfig:
    recipe = proxy_recipe("tiny").apply({"steps": STEPS})
    return PretrainConfig.model_validate({"recipe": recipe.model_dump(), "out_dir": str(tmp_path),
                                          "log_every": 10, **options})


def measured(cap: float | None, alert: float | None) -> PretrainResult:
    """Five steps timed at one second each, with no set-up, at $3,600/h ($1 a second)."""
    status = BudgetStatus(step=5, total_steps=STEPS, elapsed_s=5.0, spent_usd=5.0,
                          projected_total_usd=float(STEPS), rate_usd_per_hour=3600.0,
                          cap_usd=cap, alert_at_usd=alert, seconds_per_step=1.0)
    return PretrainResult("complete", 5, budget=status)


@pytest.mark.parametrize(("stop", "code"), [
    ("complete", 0), ("budget_projection", EXIT_BUDGET), ("budget_spent", EXIT_BUDGET),
    ("diverged", 4), ("preempted", 128 + signal.SIGTERM)])
def test_each_stop_exits_with_the_code_its_watchdog_reads(stop: str, code: int) -> None:
    assert PretrainResult(stop, 0).exit_code == code  # type: ignore[arg-type]


def test_the_projection_names_the_step_each_budget_path_fires_at(tmp_path: Path) -> None:
    settings = config(tmp_path, price_per_hour=3600.0, budget_cap_usd=50.0, alert_at_usd=20.0)
    report = dry_run_report(settings, measured(cap=50.0, alert=20.0))
    paths = report["paths"]
    assert paths["alert"]["step"] == 20  # $20 spent after 20 seconds
    assert paths["spent_over_cap"]["step"] == 51  # spending passes $50 in step 51
    assert paths["projection_over_cap"]["step"] == 10  # the first log step looks ahead
    assert report["over_cap"] and report["projected_hours"] == pytest.approx(STEPS / 3600)


def test_without_a_cap_nothing_stops_the_run(tmp_path: Path) -> None:
    report = dry_run_report(config(tmp_path, price_per_hour=3600.0), measured(None, None))
    assert not report["over_cap"]
    assert all(path["step"] is None for path in report["paths"].values())
