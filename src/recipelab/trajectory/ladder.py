"""The ladder of fidelities: successive halving from the proxy's steps to the stress horizon.

A 60-step lead is a weak guide to a 1,000-step one (``bench/fidelity.py``), and a 1,000-step
run is too dear for every candidate. So the night climbs: every candidate trains at the
proxy's steps, the best ``1/eta`` of them at ``eta`` times as many, the best ``1/eta`` of
those at ``eta**2`` times, and so on up to the stress horizon (successive halving, the
synchronous form of ASHA; Jamieson & Talwalkar 2016, Li et al. 2020). The baseline climbs
every rung as the control, so a rung ranks its candidates by their paired gain over the
baseline at the same steps and seed, not by a val_bpb that means something different at each
horizon.

The **top rung** is the stress horizon. It trains every finalist, the baseline and the
baseline's learning-rate family at :data:`TOP_SEEDS` fresh seeds (:func:`top_rung_seeds`: none
the lower rungs ranked on, so a lucky draw there does not carry into the verdict). The control
is the **tuned baseline**, the baseline at its best rate there. Each finalist's gain over it has
an interval of its own (:func:`top_interval`, Student's t over its per-seed gains) at the
Bonferroni level :func:`verdict_confidence`: the verdict chose among ``promote`` finalists and
may look twice (a close call buys the best finalist and the control
:data:`CLOSE_CALL_SEEDS` more seeds), so each look spends its share of the 5% one-sided error
of a 90% interval, and the chance of naming a false winner stays within it however the looks
fall (``bench/null_campaigns.py`` measures it).

Everything here is a pure function of numbers, shared by the campaign, the window planner,
``status`` and ``bench/fidelity.py``, so the ladder they describe is the same ladder.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from recipelab.trajectory.noise import CONFIDENCE
from recipelab.trajectory.student_t import t_quantile

DEFAULT_ETA = 3
PROMOTE = 2
"""Finalists at the top rung by default (``--promote``). Each one more splits the verdict's
error once more and trains its rate family at every top seed: at the same 36 top-rung runs,
2 finalists at 4 seeds name a 2σ-better recipe 94% of the time, 3 at 3 seeds 68%
(``bench/null_campaigns.py``)."""
TOP_SEEDS = 4
"""Seeds of every finalist and of the baseline at the top rung by default (``--top-seeds``).
A finalist's interval is Student's t on its own seeds at the Bonferroni level
(:func:`verdict_confidence`): with the default finalists and close call it is ±2.7 times one
seed's spread of the gain at 4 seeds, ±5.1 at 3 (2 degrees of freedom), and two seeds cannot
name a winner at all."""
CLOSE_CALL_SEEDS = 2
"""Seeds a close call at the top rung buys the best finalist and the control by default
(``--close-call-seeds``; 0: no second look, and the first keeps all the error)."""
FRESH_SEEDS_FROM = 1000
"""The top rung's seeds start this far above the campaign's seed: clear of every seed a
proxy trial, a noise seed or a seed re-run trains at."""


def top_rung_seeds(campaign_seed: int, used: Iterable[int], count: int) -> list[int]:
    """The top rung's ``count`` seeds: fresh ones, from ``campaign_seed +``
    :data:`FRESH_SEEDS_FROM` on, skipping any in ``used``. A finalist climbed because it did
    well at the campaign's seed; measured there again it keeps that luck (a null simulation
    named a false winner up to 36% of the time where half of it carried over).

    >>> top_rung_seeds(0, [], 3)
    [1000, 1001, 1002]
    """
    taken = set(used)
    seeds: list[int] = []
    seed = campaign_seed + FRESH_SEEDS_FROM
    while len(seeds) < count:
        if seed not in taken:
            seeds.append(seed)
        seed += 1
    return seeds


def verdict_confidence(finalists: int, looks: int) -> float:
    """The two-sided level of each finalist's interval at the top rung so that, over
    ``finalists`` compared and ``looks`` at the seeds (2 with a close call), the chance that
    any interval excludes 0 by luck stays within the one-sided ``(1 - CONFIDENCE) / 2`` of
    one 90% interval (Bonferroni: the union bound holds whatever the looks share).

    >>> round(verdict_confidence(3, 2), 4)
    0.9833
    """
    return 1.0 - (1.0 - CONFIDENCE) / max(1, finalists * looks)


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


PROBES_PER_CANDIDATE = 2
"""A probed candidate's probes: one below its rate and one above
(:func:`~recipelab.trajectory.horizon.probe_multiples`)."""


def probed(entrants: int, eta: int, promote: int, cap: int | None = None) -> int:
    """How many of ``entrants`` proxy candidates also train probes at a lower and a higher
    rate (see :func:`~recipelab.trajectory.horizon.probe_multiples`) before the first rung
    chooses its climbers: the best ``eta`` times as many as climb, none when all of them
    climb anyway."""
    climbing = climbers(entrants, eta, promote, cap)
    return 0 if climbing >= entrants else min(entrants, eta * climbing)


LR_FAMILY = (0.5, 2.0)
"""The learning-rate family (times the rule's rate): the baseline's at every budget, each
finalist's at the top rung. With its own run, three rates, what a quadratic in log lr needs to
place the best one."""
FAMILY_REACH = 4.0
"""How far a top-rung family follows its best rate: from × ¼ to × 4 the rule's rate, one step
beyond × ½ and × 2 (each step costs ``--top-seeds`` runs of the recipe)."""


def next_family_rate(best: float, tried: Collection[float]) -> float | None:
    """The rate (a multiple of the rule's) a top-rung family trains next: one step beyond
    ``best`` (× ½ or × 2) when ``best`` is the lowest or highest of the rates ``tried``
    (the rule's own, 1, counts as tried); None when it lies inside them, when fewer than three
    were tried, or beyond :data:`FAMILY_REACH`. A control whose best rate is the edge of its
    family is tuned only as far as the family reaches: on ``python-docs`` the rule's rate at
    the top rung was 3× the best, and × ½ did not reach it (``bench/rate_by_rung.py``).

    >>> next_family_rate(0.5, [0.5, 2.0]), next_family_rate(1.0, [0.5, 2.0])
    (0.25, None)
    """
    rates = sorted({1.0, *tried})
    if len(rates) < 3 or best not in (rates[0], rates[-1]):
        return None
    step = best / 2 if best == rates[0] else best * 2
    return step if 1 / FAMILY_REACH <= step <= FAMILY_REACH else None


@dataclass(frozen=True)
class RungPlan:
    """One rung of a planned ladder: its steps and how many runs it holds."""

    steps: int
    candidates: int  # climbing candidates, the baseline not counted
    seeds: int = 1
    family: int = 0  # learning-rate family runs here: the baseline's (the top: every one's)
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
    finalists at ``top_seeds`` seeds, each with its learning-rate family at each of them, as
    the baseline (the tuned control). With ``family`` (the horizon rule on), every rung below it also
    trains the family, and the first rung's climbers are probed."""
    if promote == 0:
        return []
    steps = rung_steps(proxy_steps, stress_steps, eta, first_steps)
    extra = len(LR_FAMILY) if family else 0
    plan: list[RungPlan] = []
    entrants = candidates
    for i, at in enumerate(steps[:-1]):
        cap = first_size if i == 0 else None
        probes = (PROBES_PER_CANDIDATE * probed(entrants, eta, promote, cap)
                  if family and i == 0 else 0)
        entrants = climbers(entrants, eta, promote, cap)
        plan.append(RungPlan(at, entrants, family=extra, probes=probes))
    finalists = min(promote, entrants)
    plan.append(RungPlan(steps[-1], finalists, top_seeds,
                         family=len(LR_FAMILY) * top_seeds * (finalists + 1)))
    return plan


def describe_ladder(plan: Sequence[RungPlan], proxy_steps: int, candidates: int) -> str:
    """``60 steps ×12 → 180 ×4 → 1000 ×3 at 3 seeds and 3 rates (+ the baseline and its
    learning-rate family at every rung)``."""
    probes = plan[0].probes if plan else 0
    parts = [f"{proxy_steps} steps ×{candidates}"
             + (f" (the best {probes // PROBES_PER_CANDIDATE} again at a lower and a higher "
                "rate)" if probes else "")]
    rates = len(LR_FAMILY) + 1
    parts += [f"{r.steps} ×{r.candidates}" + (f" at {r.seeds} seeds" if r.seeds > 1 else "")
              + (f" and {rates} rates" if r is plan[-1] and r.family else "") for r in plan]
    family = " and its learning-rate family" if any(r.family for r in plan) else ""
    return " → ".join(parts) + f" (+ the baseline{family} at every rung)"


@dataclass(frozen=True)
class PairedGain:
    """A gain over the control at one rung (positive is better) with its interval, drawn at
    ``confidence`` (two-sided) so that ``tests`` of them hold the family's 90%."""

    value: float
    low: float
    high: float
    seeds: int
    confidence: float = CONFIDENCE
    tests: int = 1

    @property
    def is_noise(self) -> bool:
        """True when the interval contains 0 (or the gain is not positive)."""
        return self.low <= 0.0 or self.value <= 0.0

    def text(self) -> str:
        level = f"{round(100 * CONFIDENCE)}% paired"
        if self.tests > 1:
            level += (f", Bonferroni over {self.tests} tests: each at "
                      f"{100 * self.confidence:.3g}%")
        return (f"{self.value:+.4f} [{self.low:+.4f}, {self.high:+.4f}] val_bpb ({level}, "
                f"{self.seeds} seeds)")


def top_interval(values: Sequence[float], confidence: float = CONFIDENCE,
                 tests: int = 1) -> PairedGain:
    """The mean of ``values`` (one recipe's per-seed paired gains) with its own two-sided
    interval at ``confidence``: Student's t over their spread. Its own, not pooled over the
    finalists: noise is per recipe, and a pooled two-seed interval was mean ± |g1 − g2|/√2,
    which named a false winner one time in five. Below two values there is no interval."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return PairedGain(mean, -math.inf, math.inf, len(values), confidence, tests)
    half = (t_quantile(confidence, len(values) - 1) * statistics.stdev(values)
            / math.sqrt(len(values)))
    return PairedGain(mean, mean - half, mean + half, len(values), confidence, tests)
