"""What an attribution costs (:mod:`recipelab.agent.phases.attribution_cost`): the fidelities it
may be measured at, the runs it takes, and the highest rung the window leaves room for."""

from __future__ import annotations

import math
from datetime import datetime, timezone

from recipelab.agent.phases.attribution_cost import attribution_rungs, choose_rung, expected_runs
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.setup.window import TrialTimes, plan_window


def test_the_rung_is_the_highest_the_window_allows() -> None:
    rungs = [("stress", 1000), ("rung", 245), ("proxy", 60)]
    times = TrialTimes(fixed_s=1.0, per_step_s=0.1)
    # 21 runs, 3 at a time: 7 waves of (1 + 0.1 × steps) seconds
    assert choose_rung(rungs, 21, 3, lambda s: s <= 7 * 101, times) == ("stress", 1000)
    assert choose_rung(rungs, 21, 3, lambda s: s <= 7 * 30, times) == ("rung", 245)
    assert choose_rung(rungs, 21, 3, lambda s: s <= 7 * 7, times) == ("proxy", 60)
    assert choose_rung(rungs, 21, 3, lambda s: s <= 1, times) is None
    assert choose_rung(rungs, 21, 3, lambda s: False, None) == ("stress", 1000)


def test_rungs_follow_the_campaign(tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings
    assert attribution_rungs(settings, 20) == [("stress", 30), ("proxy", 20)]
    ladder = settings.model_copy(update={"rung_size": 10, "rung_steps": None,
                                          "stress_steps": 1000, "eta": 3})  # 180, 540, 1000
    assert attribution_rungs(ladder, 60) == [("stress", 1000), ("rung", 540), ("rung", 180),
                                             ("proxy", 60)]
    assert attribution_rungs(settings.model_copy(update={"promote": 0}), 20) == [("proxy", 20)]


def test_the_window_planner_reserves_the_attribution() -> None:
    deadline = datetime(2026, 1, 1, 8, tzinfo=timezone.utc)
    times = TrialTimes(fixed_s=0.0, per_step_s=1.0)
    without = plan_window(deadline, times, proxy_steps=10, stress_steps=100, promote=1,
                          fidelity=0, noise_seeds=1, parallel=1)
    runs = expected_runs(4, 3)
    with_it = plan_window(deadline, times, proxy_steps=10, stress_steps=100, promote=1,
                          fidelity=0, noise_seeds=1, parallel=1, attribution_steps=100,
                          attribution_runs=runs)
    assert runs == 3 * (2 + 4 + 1)
    assert math.isclose(with_it.phase2_s - without.phase2_s, 1.25 * runs * 100)
    assert "attribution: up to 21 runs" in with_it.describe()
