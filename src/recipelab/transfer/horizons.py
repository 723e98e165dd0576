"""The data term of the prediction: how much lower a recipe ends when it trains on more text,
fitted through the ladder's horizons.

Each rung of the ladder trains the recipe to the end of its own schedule at another budget,
and its learning-rate family finds the recipe's best rate there. Those ends are what a longer
run's end is: a loss after its rate has decayed, at the rate that suits the budget. So they,
not the stress run's training curve (one run, mid-schedule at every point but its last, one
batch per point), set Chinchilla's data term ``B·D^-β`` (Hoffmann et al. 2022, arXiv
2203.15556): a saturating power law through the best val_bpb of each budget, in bytes of text.
``bench/transfer.py``, from 102k to 512k tokens: the stress run's curve fell 0.00-0.28 val_bpb,
the horizons' fit 0.48-0.55; trained there by the export's rules, the proxy's width fell
0.36-0.40 and twice it 0.54-0.62 (more text helps a larger model more).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from recipelab.trajectory.horizon import families
from recipelab.trajectory.record import TrialRecord
from recipelab.transfer.powerlaw import PowerLaw, fit_power_law

MIN_HORIZONS = 3
"""A saturating power law has three constants: fewer budgets do not place it."""


@dataclass(frozen=True)
class Horizons:
    """The recipe's best val_bpb at each budget it trained (``points``: bytes, val_bpb) and
    the data term fitted through them."""

    points: tuple[tuple[float, float], ...]
    fit: PowerLaw

    def change(self, start: float, end: float) -> float:
        """How much the data term moves val_bpb from ``start`` to ``end`` bytes of text
        (negative when ``end`` is later)."""
        return self.fit(end) - self.fit(start)

    def describe(self) -> str:
        ends = ", ".join(f"{value:.4f} at {seen:,.0f}" for seen, value in self.points)
        held = "; its floor held at 0, where the best fit put it below" if self.fit.bounded else ""
        return (f"data: the recipe's best at each horizon of the ladder ({ends} bytes), "
                f"L(D) = {self.fit.a:.4g}·D^(-{self.fit.b:.3g}) + {self.fit.c:.4g}{held}")

    def to_json(self) -> dict[str, Any]:
        return {"points": [list(point) for point in self.points],
                "fit": {"a": self.fit.a, "b": self.fit.b, "c": self.fit.c,
                        "rmse": self.fit.rmse, "points": self.fit.points,
                        "bounded": self.fit.bounded}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Horizons:
        fit = data["fit"]
        return cls(tuple((float(seen), float(value)) for seen, value in data["points"]),
                   PowerLaw(a=float(fit["a"]), b=float(fit["b"]), c=float(fit["c"]),
                            rmse=float(fit["rmse"]), points=int(fit["points"]),
                            bounded=bool(fit.get("bounded", False))))


def scores_by_rate(scored: Sequence[tuple[float, float]]) -> dict[float, list[float]]:
    """One family's ``(lr, val_bpb)`` runs grouped by rate: each rate's scores over seeds."""
    by_rate: dict[float, list[float]] = {}
    for lr, value in scored:
        by_rate.setdefault(lr, []).append(value)
    return by_rate


def best_by_budget(records: Sequence[TrialRecord], trial_id: str) -> dict[int, float]:
    """``trial_id``'s lowest mean val_bpb over the rates it trained at each budget (in the
    baseline's steps), its seeds averaged per rate."""
    return {budget: min(statistics.mean(values) for values in scores_by_rate(scored).values())
            for budget, scored in families(records).get(trial_id, {}).items()}


def horizons(records: Sequence[TrialRecord], trial_id: str, bytes_per_step: float
             ) -> Horizons | None:
    """The data term of ``trial_id`` through its best at every budget, or None with fewer
    than :data:`MIN_HORIZONS` budgets or a fit that does not fall."""
    best = sorted(best_by_budget(records, trial_id).items())
    if len(best) < MIN_HORIZONS:
        return None
    points = tuple((budget * bytes_per_step, value) for budget, value in best)
    fit = fit_power_law([seen for seen, _ in points], [value for _, value in points],
                        min_points=MIN_HORIZONS)
    if fit is None or fit.a <= 0:
        return None
    return Horizons(points, fit)
