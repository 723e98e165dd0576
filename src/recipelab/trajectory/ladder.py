"""The ladder of fidelities: successive halving from the proxy's steps to the stress horizon.

A 60-step lead is a weak guide to a 1,000-step one (``bench/fidelity.py``), and a 1,000-step
run is too dear for every candidate. So the night climbs: every candidate trains at the
proxy's steps, the best ``1/eta`` of them at ``eta`` times as many, the best ``1/eta`` of
those at ``eta**2`` times, and so on up to the stress horizon (successive halving, the
synchronous form of ASHA; Jamieson & Talwalkar 2016, Li et al. 2020). The baseline climbs
every rung as the control, so a rung ranks its candidates by their paired gain over the
baseline at the same steps and seed, not by a val_bpb that means something different at each
horizon.

The **top rung** is the stress horizon. It trains every finalist and the baseline at
:data:`TOP_SEEDS` seeds (or more), so the winner's gain there has a paired interval of its own
(:func:`top_interval`): the winner is named only when that interval excludes 0. A close call
(the best finalist's mean gain is positive, its interval includes 0) buys that finalist and the
baseline :data:`CLOSE_CALL_SEEDS` more seeds there before the campaign keeps the baseline; from
:data:`OWN_SEEDS` paired seeds a gain's interval is its own (Student's t over its per-seed
gains), since noise is per recipe and one noisy finalist must not widen a steady one's.

Everything here is a pure function of numbers, shared by the campaign, the window planner,
``status`` and ``bench/fidelity.py``, so the ladder they describe is the same ladder.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from recipelab.trajectory.noise import CONFIDENCE, bootstrap_quantiles
from recipelab.trajectory.student_t import t_quantile

DEFAULT_ETA = 3
TOP_SEEDS = 2
"""Seeds of every finalist and of the baseline at the top rung by default: the fewest that
pair. More (``--top-seeds``) narrow the interval the winner is named by."""
CLOSE_CALL_SEEDS = 2
"""Seeds a close call at the top rung buys the best finalist and the baseline by default
(``--close-call-seeds``): with the rung's two, enough for an interval of the finalist's own."""
OWN_SEEDS = 3
"""Paired seeds from which a gain's interval comes from its own per-seed gains (Student's t)
rather than from the deviations pooled over every finalist."""


def rung_steps(proxy_steps: int, stress_steps: int, eta: int,
               first: int | None = None) -> list[int]:
    """The steps of the rungs above the proxy, the top rung (``stress_steps``) last.

    Rung ``k`` trains ``first * eta**(k-1)`` steps (``first`` defaults to ``proxy_steps *
    eta``); an intermediate rung is kept only while it is at most ``stress_steps /
    sqrt(eta)``, so the top rung is always a real step up from the one below it.

    >>> rung_steps(60, 1000, 3)
    [180, 540, 1000]
    >>> rung_steps(60, 200, 3)
    [200]
    """
    if eta < 2:
        raise ValueError(f"eta must be at least 2 (got {eta}): each rung keeps 1/eta of the one below")
    steps = first if first is not None else proxy_steps * eta
    rungs: list[int] = []
    while proxy_steps < steps <= stress_steps / math.sqrt(eta):
        rungs.append(steps)
        steps *= eta
    return [*rungs, stress_steps]


def climbers(entrants: int, eta: int, promote: int, cap: int | None = None) -> int:
    """How many of ``entrants`` candidates (the baseline not counted) climb to the next rung:
    the best ``ceil(entrants / eta)``, never fewer than the ``promote`` finalists the top rung
    needs, never more than ``entrants`` (nor ``cap``)."""
    n = min(entrants, max(promote, math.ceil(entrants / eta)))
    return min(n, cap) if cap is not None else n


def probed(entrants: int, eta: int, promote: int, cap: int | None = None) -> int:
    """How many of ``entrants`` proxy candidates also train a probe at a higher rate (see
    :func:`~recipelab.trajectory.horizon.probe_multiple`) before the first rung chooses its
    climbers: the best ``eta`` times as many as climb, none when all of them climb anyway."""
    climbing = climbers(entrants, eta, promote, cap)
    return 0 if climbing >= entrants else min(entrants, eta * climbing)


LR_FAMILY = (0.5, 2.0)
"""The baseline's learning-rate family at every budget (times the rule's rate): with its own
run, three rates, what a quadratic in log lr needs to place the best one."""


@dataclass(frozen=True)
class RungPlan:
    """One rung of a planned ladder: its steps and how many runs it holds."""

    steps: int
    candidates: int  # climbing candidates, the baseline not counted
    seeds: int = 1
    family: int = 0  # the baseline's learning-rate family runs at this rung
    probes: int = 0  # runs at the proxy's steps that choose this rung's candidates

    @property
    def runs(self) -> int:
        """Runs at this rung: every candidate and the baseline at each seed, and the family
        (the probes, shorter, are not counted)."""
        return (self.candidates + 1) * self.seeds + self.family


def plan_ladder(candidates: int, *, proxy_steps: int, stress_steps: int, eta: int,
                promote: int, first_size: int | None = None,
                first_steps: int | None = None, top_seeds: int = TOP_SEEDS,
                family: bool = False) -> list[RungPlan]:
    """The rungs above the proxy for ``candidates`` proxy candidates (the baseline not
    counted): each takes the best :func:`climbers` of the one below (the first at most
    ``first_size``, chosen with :func:`probed` probes); the top rung takes ``promote``
    finalists at ``top_seeds`` seeds. With ``family`` (the horizon rule on), every rung also
    trains the baseline's learning-rate family, and the first rung's climbers are probed."""
    if promote == 0:
        return []
    steps = rung_steps(proxy_steps, stress_steps, eta, first_steps)
    extra = len(LR_FAMILY) if family else 0
    plan: list[RungPlan] = []
    entrants = candidates
    for i, at in enumerate(steps[:-1]):
        cap = first_size if i == 0 else None
        probes = probed(entrants, eta, promote, cap) if family and i == 0 else 0
        entrants = climbers(entrants, eta, promote, cap)
        plan.append(RungPlan(at, entrants, family=extra, probes=probes))
    plan.append(RungPlan(steps[-1], min(promote, entrants), top_seeds, family=extra))
    return plan


def describe_ladder(plan: Sequence[RungPlan], proxy_steps: int, candidates: int) -> str:
    """``60 steps ×12 → 180 ×4 → 1000 ×3 at 2 seeds (+ the baseline at every rung)``."""
    probes = plan[0].probes if plan else 0
    parts = [f"{proxy_steps} steps ×{candidates}"
             + (f" (the best {probes} again at a higher rate)" if probes else "")]
    parts += [f"{r.steps} ×{r.candidates}" + (f" at {r.seeds} seeds" if r.seeds > 1 else "")
              for r in plan]
    family = " and its learning-rate family" if any(r.family for r in plan) else ""
    return " → ".join(parts) + f" (+ the baseline{family} at every rung)"


@dataclass(frozen=True)
class PairedGain:
    """A gain over the baseline at one rung (positive is better) with its interval."""

    value: float
    low: float
    high: float
    seeds: int

    @property
    def is_noise(self) -> bool:
        """True when the interval contains 0 (or the gain is not positive)."""
        return self.low <= 0.0 or self.value <= 0.0

    def text(self) -> str:
        return (f"{self.value:+.4f} [{self.low:+.4f}, {self.high:+.4f}] val_bpb "
                f"({round(100 * CONFIDENCE)}% paired, {self.seeds} seeds)")


def pooled_deviations(gains: Mapping[str, Mapping[int, float]]) -> list[float]:
    """Each recipe's per-seed gains' deviations from its own mean, scaled by
    ``sqrt(n / (n - 1))`` to estimate one gain's noise, pooled over recipes with 2+ seeds."""
    deviations: list[float] = []
    for by_seed in gains.values():
        values = list(by_seed.values())
        if len(values) >= 2:
            centre = statistics.fmean(values)
            scale = math.sqrt(len(values) / (len(values) - 1))
            deviations += [(v - centre) * scale for v in values]
    return deviations


def top_interval(values: Sequence[float], deviations: Sequence[float]) -> PairedGain:
    """The mean of ``values`` (per-seed paired differences) with its interval: from
    :data:`OWN_SEEDS` values on, Student's t over their own spread; below it, bootstrapped
    from the pooled ``deviations`` (see :mod:`recipelab.trajectory.noise`)."""
    mean = statistics.fmean(values)
    if len(values) >= OWN_SEEDS:
        half = (t_quantile(CONFIDENCE, len(values) - 1) * statistics.stdev(values)
                / math.sqrt(len(values)))
        return PairedGain(mean, mean - half, mean + half, len(values))
    if not deviations:
        return PairedGain(mean, -math.inf, math.inf, len(values))
    tail = (1.0 - CONFIDENCE) / 2
    low, high = bootstrap_quantiles(deviations, len(values), tail)
    return PairedGain(mean, mean - high, mean - low, len(values))
