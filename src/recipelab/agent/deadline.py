"""The campaign's deadline, kept: when the search must stop so Phase 2 still fits.

:mod:`recipelab.agent.setup.window` plans a window from measured trial times (pure functions);
:class:`Deadline` holds the campaign's current plan, re-plans it as trials are measured, and
says so in the log: ``window_planned`` when the split moves by a minute or more,
``window_too_short`` once when not even one stress run fits, ``search_window_spent`` when
the search hands the rest of the window to Phase 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from recipelab.agent.phases.attribution_cost import EXPECTED_GROUPS, attribution_rungs, expected_runs
from recipelab.agent.phases.width_cost import planned_seconds as width_rung_seconds
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.setup.window import (
    TrialTimes,
    WindowPlan,
    measured_times,
    plan_window,
    preset_floor,
    too_short_message,
)
from recipelab.trajectory.record import TrialRecord

REPLAN_NOTICE_S = 60


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Deadline:
    """A campaign's window, or no window at all (``at`` is None: only ``--iterations``)."""

    def __init__(self, settings: CampaignSettings, at: datetime | None, proxy_steps: int,
                 log: Any) -> None:
        self.settings = settings
        self.at = at
        self.proxy_steps = proxy_steps
        self.log = log
        self.plan: WindowPlan | None = None
        self.hopeless = False  # not even one stress run fits: the search fills the window
        self.search_spent = False
        # the proxy candidates the ladder is planned for: --iterations', else what ran so far
        self.candidates = max(1, (settings.window.iterations - settings.search.noise_seeds)
                              if settings.window.iterations else 1)

    def _plan(self, times: TrialTimes) -> WindowPlan:
        assert self.at is not None
        s = self.settings
        attribution = attribution_rungs(s, self.proxy_steps)[0][1] if s.ladder.attribution else 0
        return plan_window(self.at, times, proxy_steps=self.proxy_steps,
                           stress_steps=s.ladder.stress_steps, promote=s.ladder.promote,
                           fidelity=s.ladder.fidelity,
                           noise_seeds=s.search.noise_seeds, parallel=s.executor.resolved_parallel,
                           rungs=s.ladder.planned_ladder(self.proxy_steps, self.candidates),
                           attribution_steps=attribution,
                           attribution_runs=expected_runs(EXPECTED_GROUPS, s.search.noise_seeds)
                           if s.ladder.attribution else 0,
                           width_s=width_rung_seconds(times, s))

    def initial_plan(self, proxies: Sequence[TrialRecord]) -> WindowPlan | None:
        """The plan from trials a resumed campaign already measured (for its start event)."""
        times = measured_times(proxies)
        return self._plan(times) if self.at is not None and times is not None else None

    def warn_if_obviously_short(self, proxies: Sequence[TrialRecord]) -> None:
        """Before anything is measured: warn when the window cannot hold the baseline's seeds
        and one stress run even at the preset's lower-bound trial time."""
        s = self.settings
        if self.at is None or s.ladder.promote == 0 or measured_times(proxies) is not None:
            return
        plan = self._plan(preset_floor(s.preset, self.proxy_steps))
        now = _now()
        baseline_s = s.search.noise_seeds * plan.proxy_s / s.executor.resolved_parallel
        if not plan.fits(now, baseline_s + plan.stress_s):
            self._too_short(plan, now, estimated=True)

    def update(self, proxies: Sequence[TrialRecord]) -> WindowPlan | None:
        """Re-plan from the trials measured so far."""
        times = measured_times(proxies) if self.at is not None else None
        if self.settings.window.iterations is None:  # a window-only campaign: plan for what ran
            self.candidates = max(self.candidates, len(proxies) - self.settings.search.noise_seeds)
        if self.at is None or times is None:
            return self.plan
        plan = self._plan(times)
        previous, self.plan = self.plan, plan
        if (previous is None
                or abs((plan.search_until - previous.search_until).total_seconds()) >= REPLAN_NOTICE_S):
            self.log.info("window_planned", **plan.as_event())
        now = _now()
        if (previous is None and self.settings.ladder.promote > 0
                and not plan.one_stress_fits(now + timedelta(seconds=plan.proxy_s))):
            self.hopeless = True
            self._too_short(plan, now, estimated=False)
        return plan

    def _too_short(self, plan: WindowPlan, now: datetime, *, estimated: bool) -> None:
        assert self.at is not None
        self.log.warning("window_too_short", stress_s=round(plan.stress_s, 1),
                         left_s=round((self.at - now).total_seconds(), 1),
                         stress_steps=self.settings.ladder.stress_steps, estimated=estimated,
                         fix=too_short_message(plan, now, self.settings.ladder.stress_steps))

    def fits(self, proxies: Sequence[TrialRecord], steps: int | None = None) -> bool:
        """Whether a trial of ``steps`` (default: a proxy trial's) can end before the
        deadline, at the measured trial costs."""
        if self.at is None:
            return True
        times = measured_times(proxies)
        seconds = times.seconds(steps or self.proxy_steps) if times else 0.0
        if self.plan is not None and times is not None:
            return self.plan.fits(_now(), seconds)
        return (self.at - _now()).total_seconds() > seconds

    def fits_seconds(self, seconds: float) -> bool:
        """Whether work of ``seconds`` started now (and the report) ends before the deadline."""
        if self.at is None:
            return True
        if self.plan is not None:
            return self.plan.fits(_now(), seconds)
        return (self.at - _now()).total_seconds() > seconds

    def search_may_launch(self, proxies: Sequence[TrialRecord]) -> bool:
        """Whether the search may start another proxy trial; the first time it may not,
        ``search_window_spent`` is logged."""
        plan = self.update(proxies)
        if plan is None or self.hopeless:
            return self.fits(proxies)
        if plan.search_may_launch(_now()):
            return True
        if not self.search_spent:
            self.search_spent = True
            self.log.info("search_window_spent", search_until=plan.search_until.isoformat(),
                          reason="the rest of the window is kept for Phase 2 (seed re-runs, "
                          "rung runs, stress runs)")
        return False
