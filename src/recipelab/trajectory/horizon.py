"""The horizon rule: how a learning rate found at a short horizon moves to a longer one.

Short runs favour larger learning rates than long ones: the optimal rate falls with the
tokens trained, roughly as ``steps ** -alpha`` (Bjorck et al. 2024, arXiv 2409.19913). A
campaign with a middle rung measures recipes at two horizons, so it fits ``alpha`` from its
own trials: the best log learning rate at each horizon is the minimum of a quadratic fitted
to (log lr, val_bpb) over the scored proxies and over the scored rung runs, and ``alpha`` is
how far it moved per unit of log steps, clamped to [0, 1]. Earlier campaigns given with
``--calibrate-from`` each contribute their own fit; the rule is the mean of every fit there is.

``bench/fidelity.py`` measured it on the ``tiny`` preset (60, 245 and 1,000 steps, two
seeds): stress runs trained at the learning rate the rule gives ended with a better winner
than stress runs at the proxy's learning rate, in both seeds.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from recipelab.trajectory.ledger import has_score, is_extra_seed
from recipelab.trajectory.record import TrialRecord

MIN_LEARNING_RATES = 3
"""Distinct learning rates a horizon needs before a quadratic in log lr says anything."""


@dataclass(frozen=True)
class HorizonRule:
    """``alpha`` of ``lr ∝ steps ** -alpha``, and the fits it is the mean of."""

    alpha: float
    fits: int  # campaigns whose trials gave a fit (0: no correction)

    def factor(self, from_steps: int, to_steps: int) -> float:
        """What a learning rate found at ``from_steps`` is multiplied by at ``to_steps``."""
        return float((to_steps / from_steps) ** -self.alpha)

    def describe(self) -> str:
        if not self.fits:
            return ("no horizon rule: it needs 3 or more learning rates among both the proxies "
                    "and the rung runs, with a best rate inside each")
        return f"alpha {self.alpha:.3f}, the mean of {self.fits} campaign fit(s)"


NO_RULE = HorizonRule(alpha=0.0, fits=0)


def best_log_lr(points: Sequence[tuple[float, float]]) -> float | None:
    """The log learning rate at the minimum of a quadratic fitted to (log lr, val_bpb), kept
    within the measured range; None with fewer than 3 distinct rates or no minimum."""
    finite = [(math.log(lr), value) for lr, value in points if lr > 0 and math.isfinite(value)]
    if len({x for x, _ in finite}) < MIN_LEARNING_RATES:
        return None
    x, y = np.array([p[0] for p in finite]), np.array([p[1] for p in finite])
    curvature, slope, _ = np.polyfit(x, y, 2)
    if curvature <= 0:
        return None
    return float(np.clip(-slope / (2 * curvature), x.min(), x.max()))


def _at_one_horizon(records: Iterable[TrialRecord]) -> tuple[int, list[tuple[float, float]]]:
    """The most common step count of ``records`` and their (lr, val_bpb) at it."""
    scored = [r for r in records if has_score(r)]
    if not scored:
        return 0, []
    steps = Counter(int(r.recipe.get("steps", 0)) for r in scored).most_common(1)[0][0]
    return steps, [(float(r.recipe["optimizer"]["lr"]), float(r.val_bpb))  # type: ignore[arg-type]
                   for r in scored if int(r.recipe.get("steps", 0)) == steps]


def fit_alpha(records: Sequence[TrialRecord]) -> float | None:
    """``alpha`` from one campaign's proxies and rung runs; None when either horizon has too
    few learning rates or no minimum."""
    short_steps, short = _at_one_horizon(
        r for r in records if r.kind == "proxy" and not is_extra_seed(r))
    rung_steps, rung = _at_one_horizon(r for r in records if r.kind == "rung")
    if not short_steps or rung_steps <= short_steps:
        return None
    at_short, at_rung = best_log_lr(short), best_log_lr(rung)
    if at_short is None or at_rung is None:
        return None
    return min(1.0, max(0.0, (at_short - at_rung) / math.log(rung_steps / short_steps)))


def horizon_rule(records: Sequence[TrialRecord], prior_fits: Iterable[float] = ()) -> HorizonRule:
    """The mean of this campaign's fit and the ``prior_fits`` of its calibration campaigns,
    one vote each."""
    own = fit_alpha(records)
    fits = [*prior_fits, *([] if own is None else [own])]
    return HorizonRule(alpha=statistics.fmean(fits), fits=len(fits)) if fits else NO_RULE
