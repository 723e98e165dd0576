"""A --hours/--until window keeps time for Phase 2: the planning arithmetic (a campaign that
keeps to it: tests/agent/test_deadline.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from recipelab.agent.setup.window import (
    MARGIN,
    REPORT_RESERVE_S,
    TrialTimes,
    expected_reruns,
    measured_times,
    plan_window,
    too_short_message,
)
from recipelab.trajectory.record import TrialRecord

DEADLINE = datetime(2030, 1, 1, 8, 0, tzinfo=timezone.utc)


def proxy(trial_id: str, status: str = "complete", **metrics: Any) -> TrialRecord:
    return TrialRecord(campaign="c", trial_id=trial_id, status=status, kind="proxy",
                       metrics=metrics)


def test_measured_times_separate_the_fixed_part_from_the_per_step_part_at_the_high_end() -> None:
    records = [proxy("p0", wall_s=10.0, train_s=6.0, steps_done=60, steps=60),
               proxy("p1", wall_s=12.0, train_s=6.0, steps_done=60, steps=60),
               proxy("p2", wall_s=14.0, train_s=12.0, steps_done=60, steps=60),
               proxy("p3", status="rejected"),
               proxy("p4", status="running")]

    times = measured_times(records)

    # the slowest trial's parts: a large-batch candidate or finalist costs that much
    assert times == TrialTimes(fixed_s=6.0, per_step_s=0.2)
    assert times.seconds(1000) == pytest.approx(206.0)  # not 1000/60 of the slowest trial (233 s)


def test_one_slow_outlier_among_many_does_not_set_the_plan() -> None:
    records = [proxy(f"p{i}", wall_s=11.0, train_s=6.0, steps_done=60) for i in range(10)]
    records.append(proxy("slow", wall_s=125.0, train_s=120.0, steps_done=60))

    times = measured_times(records)

    assert times is not None and times.per_step_s < 0.5


def test_only_failed_trials_scale_their_whole_wall_time_and_nothing_measured_is_none() -> None:
    failed = [proxy("p0", status="failed", wall_s=30.0, steps=60)]
    assert measured_times(failed) == TrialTimes(fixed_s=0.0, per_step_s=0.5)
    assert measured_times([proxy("p0", status="interrupted", wall_s=3.0)]) is None


def test_phase2_is_reserved_at_the_end_of_the_window_in_waves_of_parallel() -> None:
    times = TrialTimes(fixed_s=5.0, per_step_s=0.1)  # proxy 11 s, stress (1000 steps) 105 s

    plan = plan_window(DEADLINE, times, proxy_steps=60, stress_steps=1000, promote=3,
                       fidelity=1, noise_seeds=3, parallel=2)

    assert (plan.reruns, plan.stress_runs) == (6, 4)
    expected = MARGIN * (3 * 11.0 + 2 * 105.0) + REPORT_RESERVE_S
    assert plan.phase2_s == pytest.approx(expected)
    assert plan.search_until == DEADLINE - timedelta(seconds=expected)
    assert plan.search_may_launch(plan.search_until - timedelta(seconds=11.0))
    assert not plan.search_may_launch(plan.search_until - timedelta(seconds=10.0))
    assert plan.as_event()["search_until"] == plan.search_until.isoformat()
    local = plan.search_until.astimezone().strftime("%H:%M")
    assert plan.describe().startswith(f"search until {local}, stress {local}–")


def test_seed_reruns_are_expected_only_with_a_noise_floor_and_several_finalists() -> None:
    assert expected_reruns(promote=3, noise_seeds=3) == 6
    assert expected_reruns(promote=3, noise_seeds=1) == 0
    assert expected_reruns(promote=1, noise_seeds=3) == 0


def test_without_stress_runs_the_search_keeps_the_window_but_the_report() -> None:
    plan = plan_window(DEADLINE, TrialTimes(1.0, 0.1), proxy_steps=20, stress_steps=200,
                       promote=0, fidelity=0, noise_seeds=3, parallel=1)
    assert plan.search_until == DEADLINE - timedelta(seconds=REPORT_RESERVE_S)


def test_a_window_too_short_says_how_many_stress_steps_would_fit() -> None:
    plan = plan_window(DEADLINE, TrialTimes(fixed_s=0.0, per_step_s=1.0), proxy_steps=10,
                       stress_steps=1000, promote=1, fidelity=0, noise_seeds=1, parallel=1)
    now = DEADLINE - timedelta(minutes=5)
    assert not plan.one_stress_fits(now)
    message = too_short_message(plan, now, 1000)
    assert "--hours" in message and "--stress-steps" in message and "5.0 min" in message
