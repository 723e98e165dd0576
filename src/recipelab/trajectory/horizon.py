"""The horizon rule: how a learning rate found at a short horizon moves to a longer one.

Short runs favour larger learning rates than long ones: the optimal rate falls with the
tokens trained, roughly as ``steps ** -alpha`` (Bjorck et al. 2024, arXiv 2409.19913). A
campaign climbing the ladder measures recipes at several horizons, and each middle rung's
leader also trains at lr × {½, 2} (the learning-rate family), so it fits ``alpha`` from its
own trials: the best log learning rate at each horizon is the minimum of a quadratic fitted
to (log lr, val_bpb) over the scored runs of that horizon, and ``alpha`` is minus the slope of
those minima against log steps, clamped to [0, 1]. Earlier campaigns given with
``--calibrate-from`` each contribute their own fit; the rule is the mean of every fit there is.

When nothing fits, the rule is a published prior, never silently "no correction":
:data:`PRIOR_ALPHA` = 0.125, from the DeepSeek LLM hyperparameter scaling law (Bi et al.
2024, arXiv 2401.02954, eq. 1: ``lr_opt = 0.3118 · C ** -0.125``): with the model and the
batch fixed, compute C grows in proportion to the steps, so ``lr ∝ steps ** -0.125``.
:attr:`HorizonRule.source` says which was used; the campaign logs it with every rung and the
export carries it to the target.

``bench/fidelity.py`` measured it on the ``tiny`` preset (60, 245 and 1,000 steps, two
seeds): stress runs trained at the learning rate the rule gives ended with a better winner
than stress runs at the proxy's learning rate, in both seeds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from recipelab.trajectory.ledger import has_score, is_extra_seed
from recipelab.trajectory.record import TrialRecord

MIN_LEARNING_RATES = 3
"""Distinct learning rates a horizon needs before a quadratic in log lr says anything."""


PRIOR_ALPHA = 0.125
PRIOR_SOURCE = "DeepSeek LLM prior (Bi et al. 2024, arXiv 2401.02954: lr_opt ∝ C^-0.125)"
TIGHT_FITS = 2
TIGHT_RANGE = 0.1
"""The rule is *tight* with at least TIGHT_FITS fits whose alphas lie within TIGHT_RANGE of
each other: a rung then spends no runs on a learning-rate family."""


@dataclass(frozen=True)
class HorizonRule:
    """``alpha`` of ``lr ∝ steps ** -alpha``, and the fits it is the mean of (none: the
    published prior, :data:`PRIOR_ALPHA`)."""

    alpha: float
    fits: int  # campaigns whose trials gave a fit (0: the prior)
    spread: float = math.inf  # max - min of the fits' alphas

    @property
    def source(self) -> str:
        """Where ``alpha`` came from: ``fitted`` from trials, or the published prior."""
        return "fitted" if self.fits else "prior"

    @property
    def tight(self) -> bool:
        """Whether the fits agree well enough that no more learning-rate family runs pay."""
        return self.fits >= TIGHT_FITS and self.spread <= TIGHT_RANGE

    def factor(self, from_steps: int, to_steps: int) -> float:
        """What a learning rate found at ``from_steps`` is multiplied by at ``to_steps``."""
        return float((to_steps / from_steps) ** -self.alpha)

    def describe(self) -> str:
        if not self.fits:
            return (f"alpha {self.alpha:.3f}, the {PRIOR_SOURCE}: no fit yet (one needs 3 or "
                    "more learning rates with a best rate inside them at two horizons)")
        return f"alpha {self.alpha:.3f}, the mean of {self.fits} campaign fit(s)"


PRIOR_RULE = HorizonRule(alpha=PRIOR_ALPHA, fits=0)
NO_RULE = PRIOR_RULE  # the name older callers use: without a fit, the prior


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


def _by_horizon(records: Iterable[TrialRecord]) -> dict[int, list[tuple[float, float]]]:
    """The scored ``records``' (lr, val_bpb) by their steps."""
    found: dict[int, list[tuple[float, float]]] = {}
    for r in records:
        if has_score(r):
            found.setdefault(int(r.recipe.get("steps", 0)), []).append(
                (float(r.recipe["optimizer"]["lr"]), float(r.val_bpb)))  # type: ignore[arg-type]
    return found


def fit_alpha(records: Sequence[TrialRecord]) -> float | None:
    """``alpha`` from one campaign's proxies, rung runs and learning-rate family runs: minus
    the least-squares slope of each horizon's best log lr against log steps; None when fewer
    than two horizons place a best rate."""
    points = _by_horizon(r for r in records if (r.kind == "proxy" and not is_extra_seed(r))
                         or r.kind == "rung")
    placed = [(math.log(steps), best) for steps, at in sorted(points.items())
              if steps > 0 and (best := best_log_lr(at)) is not None]
    if len(placed) < 2:
        return None
    x, y = np.array([p[0] for p in placed]), np.array([p[1] for p in placed])
    slope = float(np.polyfit(x, y, 1)[0])
    return min(1.0, max(0.0, -slope))


def horizon_rule(records: Sequence[TrialRecord], prior_fits: Iterable[float] = ()) -> HorizonRule:
    """The mean of this campaign's fit and the ``prior_fits`` of its calibration campaigns,
    one vote each."""
    own = fit_alpha(records)
    fits = [*prior_fits, *([] if own is None else [own])]
    if not fits:
        return PRIOR_RULE
    return HorizonRule(alpha=statistics.fmean(fits), fits=len(fits), spread=max(fits) - min(fits))
