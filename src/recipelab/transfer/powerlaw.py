"""A saturating power law L(t) = a·t^(-b) + c fitted to a loss curve, to extrapolate it.

For a fixed exponent ``b`` the model is linear in ``a`` and ``c``, so the fit scans ``b`` on
a log-spaced grid, solves the 2x2 least-squares problem for each, and keeps the best: no
iterative optimiser, no scipy, and the same answer every time.
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

    def __call__(self, step: float) -> float:
        return float(self.a * step ** (-self.b) + self.c)

    def describe(self) -> str:
        return f"L(t) = {self.a:.4g}·t^(-{self.b:.3g}) + {self.c:.4g} (rmse {self.rmse:.3g})"


def fit_power_law(steps: Sequence[float], losses: Sequence[float]) -> PowerLaw | None:
    """The best fit with ``a >= 0`` (a falling curve), or None with fewer than
    :data:`MIN_POINTS` finite positive-step points."""
    pairs = [(float(t), float(v)) for t, v in zip(steps, losses, strict=True)
             if t > 0 and math.isfinite(v)]
    if len(pairs) < MIN_POINTS:
        return None
    t = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    best: PowerLaw | None = None
    for b in EXPONENT_GRID:
        x = t ** (-b)
        design = np.column_stack([x, np.ones_like(x)])
        (a, c), *_ = np.linalg.lstsq(design, y, rcond=None)
        if a < 0:
            a, c = 0.0, float(y.mean())
        residual = y - (a * x + c)
        rmse = float(np.sqrt(np.mean(residual * residual)))
        if best is None or rmse < best.rmse:
            best = PowerLaw(a=float(a), b=float(b), c=float(c), rmse=rmse, points=len(pairs))
    return best
