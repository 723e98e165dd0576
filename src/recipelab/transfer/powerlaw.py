"""A saturating power law L(t) = a·t^(-b) + c fitted to a loss curve, to extrapolate it.

For a fixed exponent ``b`` the model is linear in ``a`` and ``c``, so the fit scans ``b`` on
a log-spaced grid, solves the 2x2 least-squares problem for each, and keeps the best: no
iterative optimiser, no scipy, and the same answer every time.

The fit is held to what a loss curve can be: falling (``a >= 0``) toward a floor at or above
0 (``c >= 0``). A short curve that has not yet bent toward its floor fits best with a
negative ``c``, and extrapolated that way it falls without limit: such a fit keeps ``c = 0``
and says so (``bounded``), so that a prediction from it can widen its band and warn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_POINTS = 4
EXPONENT_GRID = np.geomspace(0.01, 3.0, 400)


@dataclass(frozen=True)
class PowerLaw:
    a: float
    b: float
    c: float
    rmse: float
    points: int
    bounded: bool = False  # the best fit wanted a floor below 0 and was held at 0

    def __call__(self, step: float) -> float:
        return float(self.a * step ** (-self.b) + self.c)

    def describe(self) -> str:
        held = "; its floor held at 0, where the best fit put it below" if self.bounded else ""
        return f"L(t) = {self.a:.4g}·t^(-{self.b:.3g}) + {self.c:.4g} (rmse {self.rmse:.3g}{held})"


def fit_power_law(steps: Sequence[float], losses: Sequence[float], min_points: int = MIN_POINTS
                  ) -> PowerLaw | None:
    """The best fit with ``a >= 0`` (a falling curve) and ``c >= 0`` (a floor no loss goes
    below), or None with fewer than ``min_points`` finite positive-step points (three place
    the law exactly; a noisy curve needs more)."""
    pairs = [(float(t), float(v)) for t, v in zip(steps, losses, strict=True)
             if t > 0 and math.isfinite(v)]
    if len(pairs) < min_points:
        return None
    t = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    best: PowerLaw | None = None
    for b in EXPONENT_GRID:
        x = t ** (-b)
        design = np.column_stack([x, np.ones_like(x)])
        (a, c), *_ = np.linalg.lstsq(design, y, rcond=None)
        bounded = False
        if a < 0:
            a, c = 0.0, float(y.mean())
        elif c < 0:  # the least-squares a with c held at its bound
            a, c, bounded = float(x @ y / (x @ x)), 0.0, True
        residual = y - (a * x + c)
        rmse = float(np.sqrt(np.mean(residual * residual)))
        if best is None or rmse < best.rmse:
            best = PowerLaw(a=float(a), b=float(b), c=float(c), rmse=rmse, points=len(pairs),
                            bounded=bounded)
    return best
