"""What the width rung costs (:mod:`recipelab.agent.phases.width_cost`): its runs in proxy trials
of compute, reserved by the window planner before the campaign."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import pytest

from recipelab.agent.deadline import Deadline
from recipelab.agent.phases.width_cost import cost, planned_recipes, planned_seconds
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.setup.window import MARGIN, TrialTimes
from recipelab.trajectory.width_check import WIDTH_RATES, WIDTH_SEEDS


@pytest.fixture
def settings(tiny_settings: CampaignSettings) -> CampaignSettings:
    return tiny_settings.model_copy(update={"width_rung": True})


def test_a_runs_cost_is_its_compute_over_the_baselines(settings: CampaignSettings) -> None:
    baseline = settings.baseline()
    assert cost(baseline, baseline) == 1.0
    assert math.isclose(cost(baseline.at_tokens(3 * baseline.tokens), baseline), 3.0, rel_tol=0.02)
    planned = planned_recipes(settings)
    assert len(planned) == 4 * WIDTH_SEEDS + 2 * len(WIDTH_RATES), (
        "the two sizes and the control's at each seed, and both sizes at the family's rates")
    narrow, wide, narrow_control, control = planned[:4]
    assert (narrow, wide) == (narrow_control, control)
    assert cost(wide, baseline) > cost(narrow, baseline)
    assert planned_recipes(settings.model_copy(update={"promote": 0})) == []  # no top rung


def test_the_window_planner_reserves_the_width_rung(settings: CampaignSettings) -> None:
    """Before the campaign: the baseline on the rung's two models at the top rung's tokens,
    at the proxy's measured pace scaled by their compute (8× the parameters, a longer
    context)."""
    times = TrialTimes(fixed_s=0.0, per_step_s=1.0)
    reserved = planned_seconds(times, settings)
    baseline = settings.baseline()
    proxy_top = times.seconds(settings.ladder.stress_steps)
    assert reserved > 2 * proxy_top  # the two models cost more than two top-rung proxies
    assert planned_seconds(times, settings.model_copy(update={"width_rung": False})) == 0.0
    deadline = Deadline(settings.model_copy(update={"hours": 8}), datetime.now(timezone.utc),
                        baseline.steps, log=None)
    plan = deadline.initial_plan([])  # no proxy measured yet: nothing to plan from
    assert plan is None
    plan = deadline._plan(times)
    off = Deadline(settings.model_copy(update={"hours": 8, "width_rung": False}),
                   deadline.at, baseline.steps, log=None)._plan(times)
    assert plan.width_s == reserved and off.width_s == 0.0
    assert math.isclose(plan.phase2_s - off.phase2_s, MARGIN * reserved)
    assert "the width rung" in plan.describe() and "the width rung" not in off.describe()
