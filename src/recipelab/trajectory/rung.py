"""The middle rung's score: how a rung run ranks its candidate for the stress runs.

A 60-step proxy ranks candidates by where they are after a few dozen steps; a stress run
of 1,000 steps is too dear to give more than a few of them. The rung trains the top of the
proxy ranking for a few hundred steps, and the stress runs go to the rung's best. How a
rung run is scored is decided here, in one pure function, so it can be changed in one
place: :func:`rung_score`. :func:`curve_score` (a power-law extrapolation of the run's
losses) is a candidate replacement, measured against the last point in ``bench/`` before
it ranks anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from recipelab.trajectory.record import TrialRecord

TAIL_FRACTION = 0.1
"""The last part of a rung run whose mean loss must stay below its first logged loss."""

EXPONENT_GRID = np.linspace(0.05, 2.0, 196)
MIN_FIT_POINTS = 4


def run_losses(run: TrialRecord) -> list[float]:
    """The run's training losses, every step's when the trainer kept them (a non-finite
    step is NaN), else its logged curve's."""
    measured = run.measured.losses
    if measured:
        return [math.nan if v is None else float(v) for v in measured]
    return [float(p["loss"]) for p in run.curve if "loss" in p]


def diverged(losses: Sequence[float]) -> bool:
    """The curve ended no better than it began: the mean of its last
    :data:`TAIL_FRACTION` of steps is above its first loss, or either is not finite."""
    if not losses:
        return False
    tail = losses[-max(1, math.ceil(TAIL_FRACTION * len(losses))):]
    mean = math.fsum(tail) / len(tail)
    first = losses[0]
    return not (math.isfinite(mean) and math.isfinite(first)) or mean > first


def rung_score(run: TrialRecord) -> float | None:
    """Lower is better: the rung run's val_bpb. None (the candidate is left out of the rung's
    ranking) when the run did not complete, its val_bpb is not finite, or its curve diverged
    (see :func:`diverged`); a diverging run's val_bpb may still look good at the step it
    was measured, which is exactly what the rung is there to catch."""
    if run.status != "complete" or run.val_bpb is None or not math.isfinite(run.val_bpb):
        return None
    if diverged(run_losses(run)):
        return None
    return run.val_bpb


def curve_score(losses: Sequence[float | None], horizon: float) -> float | None:
    """The loss a run's curve predicts at step ``horizon``: ``L(t) = a + b * t**(-c)`` fitted
    by least squares to the second half of ``losses`` (``losses[i]`` is step ``i + 1``'s).

    For each exponent ``c`` on a grid over [0.05, 2] the model is linear in ``a`` and ``b``;
    the best grid point wins (numpy only, the same answer every time). None when fewer than
    :data:`MIN_FIT_POINTS` finite losses remain, or the fit predicts a non-finite loss.
    """
    half = len(losses) // 2
    points = [(float(i + 1), float(v)) for i, v in enumerate(losses)
              if i >= half and v is not None and math.isfinite(v)]
    if len(points) < MIN_FIT_POINTS or horizon <= 0:
        return None
    t = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    best: tuple[float, float] | None = None  # (residual sum of squares, prediction)
    for c in EXPONENT_GRID:
        design = np.column_stack([np.ones_like(t), t ** (-c)])
        (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
        residual = y - design @ np.array([a, b])
        sse = float(residual @ residual)
        prediction = float(a + b * horizon ** (-c))
        if math.isfinite(prediction) and (best is None or sse < best[0]):
            best = (sse, prediction)
    return best[1] if best is not None else None
