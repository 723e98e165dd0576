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
    fits = fit_many(np.array([p[0] for p in pairs]), np.array([[p[1] for p in pairs]]))
    return PowerLaw(a=float(fits.a[0]), b=float(fits.b[0]), c=float(fits.c[0]),
                    rmse=float(fits.rmse[0]), points=len(pairs), bounded=bool(fits.bounded[0]))


@dataclass(frozen=True)
class PowerLaws:
    """One fit per row of :func:`fit_many`'s losses, as arrays."""

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    rmse: np.ndarray
    bounded: np.ndarray

    def __call__(self, step: float) -> np.ndarray:
        return np.asarray(self.a * step ** (-self.b) + self.c)


def fit_many(steps: np.ndarray, losses: np.ndarray) -> PowerLaws:
    """:func:`fit_power_law` of every row of ``losses`` (shape: fits × points) at the same
    positive ``steps``, in one pass over the exponent grid: a bootstrap refits thousands."""
    x = steps[None, :] ** -EXPONENT_GRID[:, None]  # grid × points
    x_mean = x.mean(axis=1)
    centred = x - x_mean[:, None]
    spread = (centred * centred).sum(axis=1)
    y_mean = losses.mean(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(spread > 0, (losses @ centred.T) / spread, 0.0)  # fits × grid
        through_zero = (losses @ x.T) / (x * x).sum(axis=1)
    c = y_mean - a * x_mean
    falling = a >= 0
    bounded = falling & (c < 0)  # the least-squares a with c held at its bound
    a = np.where(falling, np.where(bounded, through_zero, a), 0.0)
    c = np.where(falling, np.where(bounded, 0.0, c), y_mean)
    residual = losses[:, None, :] - (a[..., None] * x[None] + c[..., None])
    rmse = np.sqrt(np.mean(residual * residual, axis=2))
    best = np.argmin(rmse, axis=1)
    rows = np.arange(losses.shape[0])
    return PowerLaws(a=a[rows, best], b=EXPONENT_GRID[best], c=c[rows, best],
                     rmse=rmse[rows, best], bounded=bounded[rows, best])
