"""How the exported learning rate falls with the model's size: Step Law's exponent, updated by
the best rate the width rung measured at two sizes.

Step Law carries the rate from the proxy to the target with ``N^-0.713``
(:mod:`recipelab.transfer.steplaw`). ``bench/rate_scaling.py`` measured ``N^-0.36`` to
``N^-0.48`` on the bench's family, and Adam under the standard parametrisation, whose best rate
falls as ``1/width`` (Yang et al. 2022, arXiv 2203.03466), gives ``N^-1/3`` where the depth
grows with the width. So the law's exponent is a prior, not a constant.

The width rung trains the recommendation's export at the rate × ½, × 1 and × 2
(:data:`~recipelab.trajectory.width_check.WIDTH_RATES`) at the proxy's width and at twice it,
at the top rung's tokens. Each width's family places its best rate
(:func:`~recipelab.trajectory.horizon.best_rate`, the vertex of a quadratic in log rate, the
same rule as the horizon's), to about half the family's step inside it and to a whole step at
its edge. A family whose best lies at its edge trains one more rate beyond it, × 2 at a
time, up to × or ÷ :data:`MAX_RATE_MULTIPLE` (:func:`next_rate`). The measured exponent is
``log(best_wide / best_narrow) / log(N_wide / N_narrow)`` with the standard error those give;
the exported exponent is the prior and the measurement pooled by the inverse of their
variances, within :data:`EXPONENT_BOUNDS`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from recipelab.recipe import Recipe, non_embedding_params
from recipelab.trajectory.horizon import EDGE_SD, VERTEX_SD, HorizonFit, best_rate, pooled
from recipelab.trajectory.record import TrialRecord, has_score
from recipelab.trajectory.width_check import (
    WIDTH_KIND,
    is_control,
    rate_multiple,
    width_of,
)
from recipelab.transfer.steplaw import LR_PARAMS_EXPONENT, SOURCE

PRIOR_SD = 0.2
"""The prior's standard deviation: Adam's ``N^-1/3`` under the standard parametrisation lies
about two of them from Step Law's ``N^-0.713``."""
MAX_RATE_MULTIPLE = 8.0
"""How far beyond the export's rate, × or ÷, a width's family may reach while its best lies at
its edge (:func:`next_rate`): three steps past × 1, each one more run at that width."""
EXPONENT_BOUNDS = (-1.0, 0.0)
"""The exponents the export may use: a rate that rises with the model's size, or falls faster
than ``1/N``, is a noisy family, not a property of the recipe."""


@dataclass(frozen=True)
class BestRate:
    """One width's best learning rate, placed by its family."""

    params: int  # non-embedding
    lr: float
    edge: bool  # at or beyond the family's lowest or highest rate
    runs: int

    @property
    def sd(self) -> float:
        """The standard deviation of its log rate."""
        return EDGE_SD if self.edge else VERTEX_SD


@dataclass(frozen=True)
class MeasuredExponent:
    """The exponent through two widths' best rates, and its standard error."""

    narrow: BestRate
    wide: BestRate

    @property
    def value(self) -> float:
        return math.log(self.wide.lr / self.narrow.lr) / self.spread

    @property
    def se(self) -> float:
        return math.hypot(self.narrow.sd, self.wide.sd) / self.spread

    @property
    def spread(self) -> float:
        return math.log(self.wide.params / self.narrow.params)

    def describe(self) -> str:
        def best(at: BestRate) -> str:
            edge = ", at its family's edge" if at.edge else ""
            return f"{at.lr:.4g} at {at.params:,} parameters{edge}"
        return (f"N^{self.value:.3f} ± {self.se:.3f} between two widths' best rates "
                f"({best(self.narrow)}; {best(self.wide)})")


@dataclass(frozen=True)
class SizeExponent:
    """The exponent the export carries the rate with: the prior updated by ``measured``."""

    value: float
    sd: float
    measured: MeasuredExponent | None = None

    def describe(self) -> str:
        prior = f"{SOURCE}: N^{LR_PARAMS_EXPONENT} ± {PRIOR_SD}, the prior"
        if self.measured is None:
            return (f"N^{self.value:.3f}, {prior} alone (no rate family at two widths: the "
                    "width rung did not run, or a run of its families failed)")
        return (f"N^{self.value:.3f} ± {self.sd:.3f}, {prior}, pooled by inverse variance with "
                f"the measured {self.measured.describe()}")

    def to_json(self) -> dict[str, object]:
        measured = self.measured
        return {"exponent": self.value, "sd": self.sd,
                "prior": {"source": SOURCE, "exponent": LR_PARAMS_EXPONENT, "sd": PRIOR_SD},
                "measured": None if measured is None else {
                    "exponent": measured.value, "se": measured.se,
                    **{name: {"params": at.params, "best_lr": at.lr, "edge": at.edge,
                              "runs": at.runs}
                       for name, at in (("narrow", measured.narrow), ("wide", measured.wide))}}}


PRIOR = SizeExponent(LR_PARAMS_EXPONENT, PRIOR_SD)


def rate_families(records: Sequence[TrialRecord], parent: str | None = None
                  ) -> dict[int, list[TrialRecord]]:
    """``parent``'s trained width runs (the latest rate family's parent's when None), not the
    control's, by width (``d_model``), the narrower first; empty before a rate family trained."""
    runs = [r for r in records if r.kind == WIDTH_KIND and r.trained and not is_control(r)]
    if parent is None:
        parents = [r.parent for r in runs if rate_multiple(r) != 1.0]
        if not parents:
            return {}
        parent = parents[-1]
    found: dict[int, list[TrialRecord]] = {}
    for r in sorted((r for r in runs if r.parent == parent), key=width_of):
        found.setdefault(width_of(r), []).append(r)
    return found


def measured_exponent(records: Sequence[TrialRecord]) -> MeasuredExponent | None:
    """The exponent from the latest rate family's two widths (each run at every seed a point);
    None before both widths place a best rate."""
    bests = []
    for at in list(rate_families(records).values())[:2]:  # the proxy's width and twice it
        points = [(float(r.recipe["optimizer"]["lr"]), float(r.val_bpb))  # type: ignore[arg-type]
                  for r in at if has_score(r)]
        placed = best_rate(points)
        if placed is None:
            return None
        params = non_embedding_params(Recipe.model_validate(at[0].recipe).shape)
        bests.append(BestRate(params, placed[0], placed[1], len(points)))
    return MeasuredExponent(*bests) if len(bests) == 2 else None


def next_rate(runs: Sequence[TrialRecord]) -> float | None:
    """The multiple of the export's rate one width's family (``runs``, trained at one width)
    trains next: while its best lies at its highest or lowest scored rate, one step × 2 beyond
    it, within :data:`MAX_RATE_MULTIPLE`, unless a run there already failed (the loss's cliff:
    the best is at the edge). None when the family places its best inside it."""
    scored = [(rate_multiple(r), float(r.val_bpb)) for r in runs if has_score(r)]  # type: ignore[arg-type]
    placed = best_rate(scored)
    if placed is None or not placed[1]:
        return None
    multiples = [m for m, _ in scored]
    low, high = min(multiples), max(multiples)
    up = math.log(placed[0]) > (math.log(low) + math.log(high)) / 2  # at the upper edge
    step = high * 2 if up else low / 2
    tried = {rate_multiple(r) for r in runs if r.trained}
    within = 1 / MAX_RATE_MULTIPLE <= step <= MAX_RATE_MULTIPLE
    return step if within and step not in tried else None


def updated(measured: MeasuredExponent | None) -> SizeExponent:
    """The prior pooled with ``measured`` by inverse variance, within
    :data:`EXPONENT_BOUNDS`; the prior alone without a measurement."""
    if measured is None:
        return PRIOR
    both = pooled([HorizonFit(PRIOR.value, PRIOR.sd), HorizonFit(measured.value, measured.se)])
    low, high = EXPONENT_BOUNDS
    return SizeExponent(min(high, max(low, both.alpha)), both.se, measured)


def size_exponent(records: Sequence[TrialRecord]) -> SizeExponent:
    """The prior, updated by the campaign's :func:`measured_exponent` when it has one."""
    return updated(measured_exponent(records))
