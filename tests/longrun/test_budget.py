"""The budget guard's arithmetic, on a clock the test advances (wall time is never asserted)."""

from __future__ import annotations

import pytest

from recipelab.longrun.budget import BudgetGuard


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_spending_is_price_times_wall_time_and_the_projection_adds_the_steps_to_go() -> None:
    clock = Clock()
    guard = BudgetGuard(36.0, cap_usd=1.0, alert_at_usd=None, total_steps=100, clock=clock)
    clock.now += 10  # setup: billed too
    guard.start_timing(0)
    assert guard.status(0).projected_total_usd is None  # nothing timed yet
    clock.now += 20  # 10 steps of 2 s
    status = guard.status(10)
    assert status.spent_usd == pytest.approx(36.0 * 30 / 3600)
    assert status.seconds_per_step == pytest.approx(2.0)
    assert status.projected_total_usd == pytest.approx(36.0 * (30 + 90 * 2) / 3600)
    assert guard.projected_over_cap(status) and not guard.spent_over_cap(status)
    clock.now += 80
    assert guard.spent_over_cap(guard.status(50))


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
