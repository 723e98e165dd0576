"""The budget guard: the in-process estimate on a clock the test advances, and the sidecar's
spend file (wall time is never asserted)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from recipelab.longrun.budget import (
    BudgetGuard,
    BudgetUnknowable,
    SidecarSpend,
    budget_action,
    cost_file,
)

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sidecar_file(path: Path, spent: float, projected: float | None = None, *,
                 updated: datetime = NOW, rate: float = 1.5) -> Path:
    path.write_text(json.dumps({"spent_usd": spent, "rate_usd_per_hr": rate,
                                "hours_elapsed": spent / rate, "projected_total_usd": projected,
                                "last_update_utc": updated.isoformat().replace("+00:00", "Z")}))
    return path


def test_spending_is_price_times_wall_time_and_the_projection_adds_the_steps_to_go() -> None:
    clock = Clock()
    guard = BudgetGuard(36.0, cap_usd=1.0, alert_at_usd=None, total_steps=100, clock=clock)
    clock.now += 10  # setup: billed too
    guard.start_timing(0)
    assert guard.status(0).projected_total_usd is None  # nothing timed yet
    clock.now += 20  # 10 steps of 2 s
    status = guard.status(10)
    assert status.source == "estimate"
    assert status.spent_usd == pytest.approx(36.0 * 30 / 3600)
    assert status.seconds_per_step == pytest.approx(2.0)
    assert status.projected_total_usd == pytest.approx(36.0 * (30 + 90 * 2) / 3600)
    assert budget_action(status) == "stop_after_checkpoint"
    clock.now += 80
    assert budget_action(guard.status(50)) == "stop_at_once"


def test_the_alert_fires_once_and_not_again_after_a_resume_past_it() -> None:
    clock = Clock()
    guard = BudgetGuard(3600.0, cap_usd=None, alert_at_usd=5.0, total_steps=10, clock=clock)
    clock.now += 4
    assert not guard.alert_due(guard.status(1))
    clock.now += 2
    assert guard.alert_due(guard.status(2)) and not guard.alert_due(guard.status(3))
    resumed = BudgetGuard(3600.0, cap_usd=None, alert_at_usd=5.0, total_steps=10,
                          elapsed_before_s=6.0, clock=clock)
    assert resumed.status(3).spent_usd >= 6.0 and not resumed.alert_due(resumed.status(3))


def test_a_cap_of_zero_or_a_negative_price_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="--budget-cap-usd"):
        BudgetGuard(1.0, cap_usd=0.0, alert_at_usd=None, total_steps=1)
    with pytest.raises(ValueError, match="--price-per-hour"):
        BudgetGuard(-1.0, cap_usd=None, alert_at_usd=None, total_steps=1)


def test_a_cap_or_alert_with_no_way_to_know_the_spend_is_refused_naming_both_ways() -> None:
    for cap, alert in ((35.0, None), (None, 30.0)):
        with pytest.raises(BudgetUnknowable, match=r"--budget-curr-cost-uri.*--price-per-hour"):
            BudgetGuard(None, cap_usd=cap, alert_at_usd=alert, total_steps=10)
    assert BudgetGuard(None, None, None, 10).status(5).source == "none"


def test_the_sidecars_figures_decide_spent_over_the_cap_stops_at_once(tmp_path: Path) -> None:
    path = sidecar_file(tmp_path / "cost.json", spent=36.0, projected=40.0)
    guard = BudgetGuard(None, cap_usd=35.0, alert_at_usd=None, total_steps=10,
                        sidecar=SidecarSpend(path, period_s=0, utc_now=lambda: NOW))
    status = guard.status(1)
    assert (status.source, status.spent_usd, status.rate_usd_per_hour) == ("sidecar", 36.0, 1.5)
    assert status.elapsed_s == pytest.approx(24 * 3600)
    assert budget_action(status) == "stop_at_once"


def test_a_sidecar_projection_over_the_cap_stops_after_a_checkpoint(tmp_path: Path) -> None:
    path = sidecar_file(tmp_path / "cost.json", spent=20.0, projected=36.0)
    guard = BudgetGuard(None, 35.0, 30.0, 10, sidecar=SidecarSpend(path, period_s=0,
                                                                  utc_now=lambda: NOW))
    status = guard.status(1)
    assert budget_action(status) == "stop_after_checkpoint" and not guard.alert_due(status)
    sidecar_file(path, spent=31.0, projected=34.0)
    status = guard.status(2)
    assert budget_action(status) == "continue" and guard.alert_due(status)


def test_without_a_projection_the_sidecars_rate_projects_the_measured_steps(tmp_path: Path) -> None:
    clock = Clock()
    path = sidecar_file(tmp_path / "cost.json", spent=10.0, projected=None, rate=3600.0)
    guard = BudgetGuard(None, 100.0, None, 110, clock=clock,
                        sidecar=SidecarSpend(path, period_s=0, clock=clock, utc_now=lambda: NOW))
    guard.start_timing(0)
    clock.now += 10  # 10 steps of 1 s: 100 more steps cost 100 s at $1/s
    assert guard.status(10).projected_total_usd == pytest.approx(110.0)


def test_the_file_is_read_on_its_period_and_a_bad_read_keeps_the_last_figures(tmp_path: Path) -> None:
    clock = Clock()
    path = sidecar_file(tmp_path / "cost.json", spent=1.0)
    sidecar = SidecarSpend(path, period_s=30, clock=clock, utc_now=lambda: NOW)
    assert sidecar.read() is not None and sidecar.problem is None
    sidecar_file(path, spent=2.0)
    assert sidecar.read().spent_usd == 1.0  # type: ignore[union-attr]  # within the period
    clock.now += 30
    assert sidecar.read().spent_usd == 2.0  # type: ignore[union-attr]
    path.write_text('{"spent_usd": 3.0')  # a half-written file
    clock.now += 30
    assert sidecar.read().spent_usd == 2.0  # type: ignore[union-attr]
    assert sidecar.problem is not None and "cost.json" in sidecar.problem
    path.write_text('{"spent_usd": 3.0}')
    clock.now += 30
    sidecar.read()
    assert sidecar.problem is not None and "rate_usd_per_hr" in sidecar.problem


def test_a_file_not_updated_for_longer_than_the_limit_is_stale(tmp_path: Path) -> None:
    path = sidecar_file(tmp_path / "cost.json", spent=1.0, updated=NOW - timedelta(minutes=11))
    guard = BudgetGuard(None, 35.0, None, 10, sidecar=SidecarSpend(
        path, period_s=0, stale_after_s=600, utc_now=lambda: NOW))
    assert guard.status(1).stale_s == pytest.approx(660)
    sidecar_file(path, spent=1.0, updated=NOW - timedelta(minutes=9))
    assert guard.status(2).stale_s is None


def test_the_cost_uri_is_a_path_or_a_file_uri_and_nothing_else(tmp_path: Path) -> None:
    assert cost_file(str(tmp_path / "c.json")) == tmp_path / "c.json"
    assert cost_file(f"file://{tmp_path}/c%20d.json") == tmp_path / "c d.json"
    with pytest.raises(ValueError, match="only a local file"):
        cost_file("s3://bucket/cost.json")
