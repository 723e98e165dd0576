"""What an attribution costs, and the highest rung at which it fits the window.

Asked by the attribution phase once the winner is known, and by the window planner before
(:mod:`recipelab.agent.deadline`), which reserves time for :data:`EXPECTED_GROUPS` groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.setup.window import TrialTimes
from recipelab.trajectory.attribution import LEAVE_ONE_OUT_MAX_GROUPS

EXPECTED_GROUPS = 4
"""Groups the window planner reserves time for before a winner (and so its edit) is known."""

Rung = tuple[str, int]
"""A fidelity: its kind (``stress``, ``rung``, ``proxy``) and its steps."""


def attribution_rungs(settings: CampaignSettings, proxy_steps: int) -> list[Rung]:
    """The fidelities the variants may be measured at, highest first: the ladder's top rung
    (when there are finalists), its middle rungs from the highest down, the proxy's."""
    ladder = settings.ladder.ladder_steps(proxy_steps)
    rungs: list[Rung] = [("stress", ladder[-1])] if settings.ladder.promote > 0 else []
    rungs += [("rung", steps) for steps in reversed(ladder[:-1])]
    rungs.append(("proxy", proxy_steps))
    return rungs


def expected_runs(groups: int, seeds: int) -> int:
    """At most how many runs an attribution of ``groups`` groups takes: the baseline, the
    winner and each group left out, plus the minimal edit (or, greedily, one per group),
    each at every seed."""
    extra = 1 if groups <= LEAVE_ONE_OUT_MAX_GROUPS else groups
    return seeds * (2 + groups + extra)


def choose_rung(rungs: Sequence[Rung], runs: int, parallel: int,
                fits: Callable[[float], bool], times: TrialTimes | None) -> Rung | None:
    """The highest rung at which ``runs`` runs (``parallel`` at a time) fit the window, or
    None when none does. Without measured trial times (or a window) the highest rung."""
    if times is None:
        return rungs[0] if rungs else None
    waves = math.ceil(runs / max(1, parallel))
    return next((rung for rung in rungs if fits(waves * times.seconds(rung[1]))), None)
