"""The band of the prediction from the wider model: the seed's noise in every measurement it
rests on, carried through the law to the target.

The prediction (:attr:`~recipelab.transfer.prediction.Prediction.from_wide`) rests on a few
runs, and each moves with the seed: the recipe's best at each horizon of the ladder, through
which the data term is fitted; the wider model's level; and the two widths whose gap sets the
size term. A parametric bootstrap redraws each of them with that noise (the baseline's
seed-to-seed standard deviation, over the square root of the seeds a value averages; a
horizon by the data term's residual where that is larger), refits the data term and
recomputes the prediction. The 5th and 95th percentiles of the draws bound the 90% band.

Three horizons place the data term exactly, so a little noise in them moves its exponent,
and far beyond them the refitted terms fan out: the band widens with the distance by what
the measurements leave unknown, not by a rule per decade. The wider model's level and the
gap's wider run are often the same runs, and then they share their draw. The generator has a
fixed seed, so the same campaign always gives the same band.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recipelab.transfer.horizons import Horizons
from recipelab.transfer.powerlaw import PowerLaws, fit_many
from recipelab.transfer.width import SizeGap, WideLevel

CONFIDENCE = 0.90
DRAWS = 2_000
SEED = 0  # fixed, so the same prediction always gives the same band


@dataclass(frozen=True)
class LawBand:
    """The bootstrap's draws of the prediction's parts: the data term's refits, the wider
    model's level, and the size term's lowering from its size to the target's."""

    data: PowerLaws
    level: np.ndarray
    lowering: np.ndarray
    level_bytes: float  # where the wider model's level was measured

    def draws(self, bytes_seen: float) -> np.ndarray:
        """The predicted val_bpb at ``bytes_seen`` in every draw."""
        return np.asarray(self.level + self.data(bytes_seen) - self.data(self.level_bytes)
                          - self.lowering)

    def interval(self, bytes_seen: float) -> tuple[float, float]:
        """The central :data:`CONFIDENCE` of the draws at ``bytes_seen``."""
        tail = (1.0 - CONFIDENCE) / 2
        low, high = np.quantile(self.draws(bytes_seen), [tail, 1.0 - tail])
        return float(low), float(high)


def law_band(horizons: Horizons, wide: WideLevel, gap: SizeGap, target_params: int,
             seed_sd: float, draws: int = DRAWS) -> LawBand:
    """``draws`` of a prediction from ``wide``, ``horizons`` and ``gap`` to a target of
    ``target_params`` non-embedding parameters, each measurement redrawn with ``seed_sd``
    val_bpb of noise per seed."""
    rng = np.random.default_rng(SEED)
    seen = np.array([point[0] for point in horizons.points])
    best = np.array([point[1] for point in horizons.points])
    point_sd = max(seed_sd, horizons.fit.rmse)
    data = fit_many(seen, best + rng.normal(0.0, point_sd, (draws, len(best))))
    wide_sd = seed_sd / np.sqrt(len(wide.runs.split("+")))
    gap_sd = seed_sd / np.sqrt(gap.seeds)
    level = wide.val_bpb + rng.normal(0.0, wide_sd, draws)
    shared = wide.runs == gap.runs[1]
    gap_wide = (level if shared else gap.wide_val_bpb + rng.normal(0.0, gap_sd, draws))
    narrow = gap.narrow_val_bpb + rng.normal(0.0, gap_sd, draws)
    # a larger model does not score worse at equal text: a draw whose wider run lost has no gap
    lowering = np.maximum(narrow - gap_wide, 0.0) * gap.lever(wide.params, target_params)
    return LawBand(data=data, level=level, lowering=lowering, level_bytes=wide.bytes_seen)
