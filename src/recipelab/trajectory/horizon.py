"""The horizon rule: how a learning rate found at a short horizon moves to a longer one.

Short runs favour larger learning rates than long ones: at a fixed batch the optimal rate
falls with the tokens trained, roughly as ``tokens ** -alpha`` (Bjorck et al. 2024, arXiv
2409.19913, about 0.32). The rule is the one knob the horizon moves, so it is fitted only
from controlled runs: a **family** is one recipe trained at several learning rates at one
budget and seed (the baseline at lr × {½, 1, 2} at every rung of the ladder). A family
places the best log learning rate at its budget (the minimum of a quadratic in log lr), and
one recipe's families at two or more budgets give ``alpha`` as minus the slope of those
minima against log tokens. Runs of different recipes are never compared: their differences
are not a learning-rate optimum.

A three-point family places its minimum only to about half its step
(:data:`VERTEX_SD`), so a fit over a short ladder is loose. The rule is the published prior
(:data:`PRIOR_ALPHA` ± :data:`PRIOR_SD`) updated by every fit, this campaign's and its
calibration campaigns', each weighted by the inverse of its variance, and bounded to
:data:`ALPHA_BOUNDS`. :class:`HorizonRule` carries its interval and says where it came from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from recipelab.trajectory.ledger import LR_FAMILY_PROPOSER
from recipelab.trajectory.noise import CONFIDENCE
from recipelab.trajectory.record import TrialRecord, has_score

MIN_LEARNING_RATES = 3
"""Distinct learning rates a family needs before a quadratic in log lr says anything."""

PRIOR_ALPHA = 0.32
PRIOR_SD = 0.1
PRIOR_SOURCE = "the published prior at fixed batch (Bjorck et al. 2024, arXiv 2409.19913)"
ALPHA_BOUNDS = (0.1, 0.6)
"""The exponents the rule may take: from DeepSeek LLM's 0.125 (arXiv 2401.02954, where the
batch grows with compute) to about twice the fixed-batch prior. A fit beyond them is noise
in a three-point family, not a property of the recipe."""

VERTEX_SD = math.log(2) / 2
"""The standard deviation of a family's best log lr when its minimum lies inside the family:
half the family's step (× 2 in lr)."""
EDGE_SD = math.log(2)
"""The same when the minimum lies at the family's edge: the best rate is beyond it, by an
unknown amount, so the point counts for a quarter as much."""

TIGHT_SD = 0.06
"""The rule is *tight* when its standard deviation is at most this: a rung then spends no
runs on a learning-rate family."""


@dataclass(frozen=True)
class HorizonFit:
    """One recipe's ``alpha`` from its families at two or more budgets, and its standard
    error."""

    alpha: float
    se: float


@dataclass(frozen=True)
class HorizonRule:
    """``alpha`` of ``lr ∝ tokens ** -alpha``: the prior updated by ``fits`` (none: the
    prior alone), with its standard deviation."""

    alpha: float
    sd: float = PRIOR_SD
    fits: int = 0  # fits from controlled families (0: the published prior alone)

    @property
    def source(self) -> str:
        """``fitted`` when controlled families moved the prior, else ``prior``."""
        return "fitted" if self.fits else "prior"

    @property
    def interval(self) -> tuple[float, float]:
        """The rule's central interval at :data:`CONFIDENCE`, within :data:`ALPHA_BOUNDS`."""
        half = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2) * self.sd
        low, high = ALPHA_BOUNDS
        return max(low, self.alpha - half), min(high, self.alpha + half)

    @property
    def tight(self) -> bool:
        """Whether the rule is known well enough that more family runs do not pay."""
        return self.sd <= TIGHT_SD

    def factor(self, from_steps: int, to_steps: int) -> float:
        """What a learning rate found at a budget of ``from_steps`` of the baseline's steps
        is multiplied by at ``to_steps`` (budgets are tokens, so the ratio is theirs)."""
        return float((to_steps / from_steps) ** -self.alpha)

    def describe(self) -> str:
        low, high = self.interval
        text = f"alpha {self.alpha:.3f} [{low:.3f}, {high:.3f}] ({round(100 * CONFIDENCE)}%)"
        if not self.fits:
            return (f"{text}, {PRIOR_SOURCE}: no controlled learning-rate family at two "
                    "budgets yet")
        return (f"{text}: the prior {PRIOR_ALPHA} ± {PRIOR_SD} updated by {self.fits} fit(s) "
                "of one recipe's learning-rate families at several budgets")


PRIOR_RULE = HorizonRule(alpha=PRIOR_ALPHA)


def probe_multiple(proxy_steps: int, stress_steps: int) -> float:
    """The rate, as a multiple of a candidate's, at which its *probe* trains at the proxy's
    steps: the rate the published rule would choose at the proxy were the candidate's own
    the right one at the top rung, ``(stress / proxy) ** PRIOR_ALPHA`` (2.6 from 20 to 400
    steps), to two decimals.

    A candidate's rate may be meant for the long run, and such a recipe starts slowly: at
    20 steps its best rate is higher. Ranking the first rung by the better of a candidate's
    proxy and its probe lets it climb (in ``bench/search_quality.py``'s campaigns the long
    run's best survived the first rung in 6 of 10 on its proxy rate alone, 8 of 10 by the
    better of × 1 and × 3). The prior, not the campaign's fit, sets it: a probe is
    launched before the rung that fits the rule, and a resumed campaign must ask for the
    same one.
    """
    return round(1 / PRIOR_RULE.factor(proxy_steps, stress_steps), 2)


def probe_multiples(proxy_steps: int, stress_steps: int) -> tuple[float, float]:
    """The rates, as multiples of a candidate's, its two probes train at: below it by
    :func:`probe_multiple` and above it by as much. A candidate whose rate is too hot already
    at the proxy's steps ranks by the lower, one meant for the long run by the higher."""
    multiple = probe_multiple(proxy_steps, stress_steps)
    return round(1 / multiple, 2), multiple


def best_log_lr(points: Sequence[tuple[float, float]]) -> float | None:
    """The log learning rate at the minimum of a quadratic fitted to (log lr, val_bpb), kept
    within the measured range; None with fewer than 3 distinct rates or no minimum."""
    placed = _vertex(points)
    return placed.log_lr if placed is not None and placed.minimum else None


def best_rate(points: Sequence[tuple[float, float]]) -> tuple[float, bool] | None:
    """A family's best learning rate and whether it is at the family's edge (the lowest or
    highest rate, or the quadratic's minimum beyond them); None with fewer than 3 rates."""
    placed = _vertex(points)
    return None if placed is None else (math.exp(placed.log_lr), bool(placed.edge))


@dataclass(frozen=True)
class _Placed:
    """Where a family places its best log lr: ``edge`` when the best rate lies at or beyond
    the family's edge, ``minimum`` when the quadratic has one."""

    log_lr: float
    edge: bool
    minimum: bool


def _vertex(points: Sequence[tuple[float, float]]) -> _Placed | None:
    """The best log lr of a family: the quadratic's minimum kept within the rates measured,
    or, without a minimum, the best measured rate (at an edge: three rates without a minimum
    fall toward one side)."""
    finite = [(math.log(lr), value) for lr, value in points if lr > 0 and math.isfinite(value)]
    if len({x for x, _ in finite}) < MIN_LEARNING_RATES:
        return None
    x, y = np.array([p[0] for p in finite]), np.array([p[1] for p in finite])
    curvature, slope, _ = np.polyfit(x, y, 2)
    if curvature <= 0:
        best = float(x[int(np.argmin(y))])
        return _Placed(best, best in (float(x.min()), float(x.max())), minimum=False)
    vertex = -slope / (2 * curvature)
    clipped = float(np.clip(vertex, x.min(), x.max()))
    return _Placed(clipped, clipped != vertex, minimum=True)


def families(records: Iterable[TrialRecord]) -> dict[str, dict[int, list[tuple[float, float]]]]:
    """Each recipe's learning-rate families: by the recipe's trial id, then by budget (in
    the baseline's steps), the (lr, val_bpb) of its scored runs: the trial itself and its
    ladder runs (rung and stress runs train the recipe, and family runs only its rate,
    differently), at every seed they trained (the top rung trains its family at each of its
    seeds, so a rate's points weigh alike). Proxies parented on it are other recipes. A
    recipe with no family run has none."""
    records = list(records)
    heads = {r.parent for r in records if r.proposer == LR_FAMILY_PROPOSER and r.parent}
    found: dict[str, dict[int, list[tuple[float, float]]]] = {}
    for r in records:
        head = r.trial_id if r.trial_id in heads else r.parent
        ladder_run = r.trial_id == head or r.kind in ("rung", "stress")
        if head in heads and ladder_run and has_score(r):
            found.setdefault(head, {}).setdefault(r.budget_steps, []).append(
                (float(r.recipe["optimizer"]["lr"]), float(r.val_bpb)))  # type: ignore[arg-type]
    return found


def fit_family(at: dict[int, list[tuple[float, float]]]) -> HorizonFit | None:
    """``alpha`` from one recipe's families: minus the weighted least-squares slope of each
    budget's best log lr against log budget; None when fewer than two budgets place one."""
    placed = [(math.log(budget), vertex) for budget, points in sorted(at.items())
              if budget > 0 and (vertex := _vertex(points)) is not None]
    if len(placed) < 2:
        return None
    x = np.array([budget for budget, _ in placed])
    y = np.array([vertex.log_lr for _, vertex in placed])
    w = np.array([1 / (EDGE_SD if vertex.edge else VERTEX_SD) ** 2 for _, vertex in placed])
    centre = float(np.average(x, weights=w))
    spread = float(np.sum(w * (x - centre) ** 2))
    slope = float(np.sum(w * (x - centre) * (y - np.average(y, weights=w)))) / spread
    return HorizonFit(alpha=-slope, se=math.sqrt(1 / spread))


def fit_alpha(records: Sequence[TrialRecord]) -> HorizonFit | None:
    """One campaign's fit: its recipes' family fits pooled by inverse variance; None when
    no recipe has families at two budgets."""
    fits = [f for at in families(records).values() if (f := fit_family(at)) is not None]
    return pooled(fits) if fits else None


def pooled(fits: Sequence[HorizonFit]) -> HorizonFit:
    """The inverse-variance weighted mean of independent ``fits``, and its standard error."""
    precision = sum(1 / f.se ** 2 for f in fits)
    return HorizonFit(sum(f.alpha / f.se ** 2 for f in fits) / precision, math.sqrt(1 / precision))


def horizon_rule(records: Sequence[TrialRecord],
                 prior_fits: Iterable[HorizonFit] = ()) -> HorizonRule:
    """The prior updated by this campaign's fit and its calibration campaigns'
    ``prior_fits``, each by the inverse of its variance, within :data:`ALPHA_BOUNDS`."""
    own = fit_alpha(records)
    fits = [*prior_fits, *([] if own is None else [own])]
    if not fits:
        return PRIOR_RULE
    rule = pooled([HorizonFit(PRIOR_ALPHA, PRIOR_SD), *fits])
    low, high = ALPHA_BOUNDS
    return HorizonRule(alpha=min(high, max(low, rule.alpha)), sd=rule.se, fits=len(fits))
