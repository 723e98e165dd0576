"""Planning a time window (``--hours``/``--until``): how long to search so Phase 2 still fits.

A campaign bounded by a deadline has two phases: the proxy search, then Phase 2 (seed
re-runs of close finalists, then the ladder: the middle rungs' runs, then the top rung's). If the search
filled the window, every stress run would be skipped for lack of time, and an overnight
campaign would end without the one check that catches late divergence. So the search stops
launching at ``search_until``: the deadline minus what Phase 2 is expected to take.

Phase 2's time comes from the proxy trials already measured: a trial's wall time is split
into a fixed part (process start, data, evaluation) and a per-step part (``train_s`` over
the steps done), so a 1,000-step stress run is not priced as 1,000/60 whole proxy trials.
Everything here is a pure function of the records and settings, so ``status`` and a resumed
campaign compute the same plan.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from recipelab.agent.phases.seeds import RERUN_SEEDS
from recipelab.trajectory.ladder import RungPlan
from recipelab.trajectory.record import TrialRecord

MARGIN = 1.25
"""Phase 2 is reserved this many times its estimate: stress runs also write checkpoints and
log more often than proxy trials, and wall times vary with the machine's load."""

REPORT_RESERVE_S = 15.0
"""Kept at the very end of the window for the campaign's report (plots and HTML)."""

PRESET_TRIAL_S_FLOOR: dict[str, float] = {"tiny": 1.0, "cpu": 8.0, "spark": 20.0}
"""A lower bound on one proxy trial's wall seconds per preset, used only before any trial of
the campaign is measured, to say up front that a window is obviously too short."""


@dataclass(frozen=True)
class TrialTimes:
    """What a trial costs: a fixed part plus a part proportional to its steps."""

    fixed_s: float
    per_step_s: float

    def seconds(self, steps: int) -> float:
        return self.fixed_s + self.per_step_s * steps


def upper(values: Sequence[float]) -> float:
    """A high but robust value: the 90th percentile of ten or more, else the largest.

    A window is planned on what trials may cost, not on what they usually cost: a candidate
    with four times the baseline's batch takes four times as long per step, and a stress run
    of a large-batch finalist likewise. One slow outlier among many does not inflate it.
    """
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) >= 10 else max(values)


def measured_times(records: Sequence[TrialRecord]) -> TrialTimes | None:
    """What the trained proxy trials cost, at the high end (see :func:`upper`), or None
    before any is measured.

    Complete trials report ``train_s`` and ``steps_done``, which separate the per-step time
    from the rest; failed ones (a timeout) only a wall time, which then scales as a whole.
    """
    trained = [m for r in records if r.kind == "proxy" and r.trained
               and (m := r.measured).wall_s is not None]
    split = [(m.wall_s, m.train_s, m.steps_done) for m in trained
             if m.wall_s is not None and m.train_s is not None and m.steps_done]
    if split:
        return TrialTimes(fixed_s=upper([max(0.0, w - t) for w, t, _ in split]),
                          per_step_s=upper([t / n for _, t, n in split]))
    if trained:
        per_trial = upper([m.wall_s for m in trained if m.wall_s is not None])
        steps = statistics.median(m.steps or 1 for m in trained)
        return TrialTimes(fixed_s=0.0, per_step_s=per_trial / max(1.0, steps))
    return None


def preset_floor(preset: str, proxy_steps: int) -> TrialTimes:
    """A lower bound on trial costs before anything is measured (see PRESET_TRIAL_S_FLOOR)."""
    per_trial = PRESET_TRIAL_S_FLOOR.get(preset, 1.0)
    return TrialTimes(fixed_s=0.0, per_step_s=per_trial / max(1, proxy_steps))


def expected_reruns(promote: int, noise_seeds: int) -> int:
    """At most how many seed re-runs Phase 2 may owe: every finalist in a close call gets
    ``RERUN_SEEDS`` more seeds, and there are close calls only with a measured noise floor
    (more than one baseline seed) and more than one finalist."""
    if noise_seeds <= 1 or promote <= 1:
        return 0
    return promote * RERUN_SEEDS


@dataclass(frozen=True)
class WindowPlan:
    """The split of a window between the search and Phase 2."""

    deadline: datetime
    search_until: datetime  # the search's trials are done by then; Phase 2 starts
    proxy_s: float  # one proxy trial
    stress_s: float  # one stress run
    phase2_s: float  # reserved for Phase 2 (with MARGIN) and the report
    reruns: int
    stress_runs: int
    parallel: int
    rung_s: float = 0.0  # one middle-rung run, on average over the rungs
    rung_runs: int = 0
    attribution_s: float = 0.0  # one attribution run (at the highest rung)
    attribution_runs: int = 0
    width_s: float = 0.0  # the width rung's runs

    def search_may_launch(self, now: datetime) -> bool:
        """Whether a proxy trial started now ends before Phase 2 must start."""
        return now + timedelta(seconds=self.proxy_s) <= self.search_until

    def fits(self, now: datetime, seconds: float) -> bool:
        """Whether work of ``seconds`` started now (and the report) ends before the deadline."""
        return now + timedelta(seconds=seconds + REPORT_RESERVE_S) <= self.deadline

    def one_stress_fits(self, now: datetime) -> bool:
        return self.fits(now, self.stress_s)

    def describe(self) -> str:
        """The split in local clock times, e.g. ``search until 05:40, stress 05:40–08:00``."""
        return (f"{split_text(self.search_until, self.deadline)} ("
                + (f"{self.rung_runs} middle-rung run{'s' if self.rung_runs != 1 else ''} of "
                   f"~{self.rung_s / 60:.1f} min on average, " if self.rung_runs else "")
                + f"{self.stress_runs} top-rung run{'s' if self.stress_runs != 1 else ''} of "
                f"~{self.stress_s / 60:.1f} min"
                + (f", up to {self.reruns} seed re-runs" if self.reruns else "")
                + (f", attribution: up to {self.attribution_runs} runs of "
                   f"~{self.attribution_s / 60:.1f} min" if self.attribution_runs else "")
                + (f", the width rung ~{self.width_s / 60:.1f} min" if self.width_s else "")
                + (f", {self.parallel} at a time" if self.parallel > 1 else "") + ")")

    def as_event(self) -> dict[str, Any]:
        return {"deadline": self.deadline.isoformat(),
                "search_until": self.search_until.isoformat(),
                "proxy_s": round(self.proxy_s, 2), "stress_s": round(self.stress_s, 2),
                "phase2_s": round(self.phase2_s, 2), "reruns": self.reruns,
                "stress_runs": self.stress_runs, "parallel": self.parallel,
                "rung_s": round(self.rung_s, 2), "rung_runs": self.rung_runs,
                "attribution_s": round(self.attribution_s, 2),
                "attribution_runs": self.attribution_runs, "width_s": round(self.width_s, 2),
                "plan": self.describe()}


def split_text(search_until: datetime, deadline: datetime) -> str:
    """``search until 05:40, stress 05:40–08:00`` in this machine's local time."""
    start, end = (t.astimezone().strftime("%H:%M") for t in (search_until, deadline))
    return f"search until {start}, stress {start}–{end}"


def plan_window(deadline: datetime, times: TrialTimes, *, proxy_steps: int, stress_steps: int,
                promote: int, fidelity: int, noise_seeds: int, parallel: int,
                rungs: Sequence[RungPlan] = (), attribution_steps: int = 0,
                attribution_runs: int = 0, width_s: float = 0.0) -> WindowPlan:
    """Reserve Phase 2's time at the end of the window, from the measured trial costs.

    Phase 2 is the seed re-runs (in waves of ``parallel``), then the ladder rung by rung:
    each middle rung of ``rungs`` (its probes at the proxy's steps, then its runs, in waves
    of ``parallel``; a rung ends before the next starts, since it chooses the next one's
    climbers), then the top rung (its runs, and
    the ``fidelity`` mid-ranked trials, in waves of ``parallel``). Without ``rungs`` the top
    rung is the ``promote`` finalists at one seed each. Then the attribution's runs, and the
    width rung's ``width_s``.
    """
    proxy_s = times.seconds(proxy_steps)
    stress_s = times.seconds(stress_steps)
    attribution_s = times.seconds(attribution_steps) if attribution_runs else 0.0
    reruns = expected_reruns(promote, noise_seeds) if promote else 0
    middle = list(rungs[:-1])
    stress_runs = (rungs[-1].runs if rungs else promote) + fidelity
    rung_runs = sum(r.runs + r.probes for r in middle)
    probes_s = sum(math.ceil(r.probes / parallel) for r in middle) * proxy_s
    rung_total = sum(math.ceil(r.runs / parallel) * times.seconds(r.steps) for r in middle)
    rung_s = rung_total / max(1, sum(math.ceil(r.runs / parallel) for r in middle))
    rung_total += probes_s
    phase2_s = MARGIN * (math.ceil(reruns / parallel) * proxy_s + rung_total
                         + math.ceil(stress_runs / parallel) * stress_s
                         + math.ceil(attribution_runs / parallel) * attribution_s + width_s
                         ) + REPORT_RESERVE_S
    return WindowPlan(deadline=deadline, search_until=deadline - timedelta(seconds=phase2_s),
                      proxy_s=proxy_s, stress_s=stress_s, phase2_s=phase2_s, reruns=reruns,
                      stress_runs=stress_runs, parallel=parallel, rung_s=rung_s,
                      rung_runs=rung_runs, attribution_s=attribution_s,
                      attribution_runs=attribution_runs, width_s=width_s)


def too_short_message(plan: WindowPlan, now: datetime, stress_steps: int) -> str:
    """Why not even one stress run fits, and what to change."""
    left = max(0.0, (plan.deadline - now).total_seconds())
    fitting = int(max(0.0, left / MARGIN - plan.proxy_s) / max(plan.stress_s / stress_steps, 1e-9))
    return (f"one stress run of {stress_steps} steps takes ~{plan.stress_s / 60:.1f} min but "
            f"only {left / 60:.1f} min of the window are left: give the campaign a longer "
            f"--hours/--until, or fewer --stress-steps (about {max(0, fitting)} would fit)")
