"""Is the cloud run on the predicted path? Its measured val_bpb against the prediction.

At each evaluation in the run's ``metrics.csv`` the measured val_bpb is compared with the
prediction (:mod:`recipelab.transfer.prediction`) at the same bytes of training text, with
its band. The verdict reads the latest evaluation:

- ``diverging``: val_bpb is not finite, or it rose by more than the band between the last
  two evaluations while above the band;
- ``worse``: above the band, by ``(measured - predicted) / predicted``;
- ``better``: below the band. The run is fine, but the prediction is not: a proxy whose
  substitution held would have put it inside the band, so the next prediction from the same
  campaign is not to be trusted either;
- ``on track``: within the band.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from recipelab.errors import RecipelabError
from recipelab.transfer.prediction import Prediction

Verdict = Literal["on track", "better", "worse", "diverging"]


@dataclass(frozen=True)
class Checkpointed:
    """One evaluation of the run against the prediction."""

    step: int
    bytes_seen: float
    measured: float
    predicted: float
    low: float
    high: float

    @property
    def relative(self) -> float:
        return (self.measured - self.predicted) / self.predicted

    @property
    def status(self) -> str:
        if not math.isfinite(self.measured):
            return "not finite"
        if self.measured > self.high:
            return f"worse by {self.relative:.1%}"
        return (f"better by {-self.relative:.1%}" if self.measured < self.low
                else "within the band")


@dataclass(frozen=True)
class Verification:
    verdict: Verdict
    by: float | None  # the latest relative distance from the prediction, when outside the band
    points: tuple[Checkpointed, ...]

    def headline(self) -> str:
        if self.verdict == "on track":
            return "on track: the latest val_bpb is within the predicted band"
        if self.verdict == "better":
            assert self.by is not None
            return (f"better than predicted by {-self.by:.1%} at step {self.points[-1].step:,}, "
                    "below the band: the run is fine, the prediction is not. The proxy did not "
                    "stand in for this target as the campaign assumed, so do not trust the next "
                    "prediction from it until the cause is known (docs/cloud-run.md, 'What "
                    "transfers')")
        if self.verdict == "worse":
            assert self.by is not None
            return (f"worse than predicted by {self.by:.1%} at step {self.points[-1].step:,}: "
                    "the recipe is not transferring as the campaign predicted; compare the first "
                    "evaluations with the fallback recipe's before spending more")
        return ("diverging: val_bpb is rising above the predicted band (or not finite); stop, and "
                "resume from an earlier checkpoint with a lower learning rate or the fallback recipe")


class MetricsError(RecipelabError, ValueError):
    """The metrics file cannot be read as a pretrain run's metrics."""


def read_evaluations(path: Path) -> list[tuple[int, float, float]]:
    """``(step, bytes_seen, val_bpb)`` of every evaluation in a pretrain ``metrics.csv``."""
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as error:
        raise MetricsError(f"cannot read metrics file {path}: {error.strerror}") from None
    if rows and ("val_bpb" not in rows[0] or "step" not in rows[0]):
        raise MetricsError(f"{path} has no step and val_bpb columns: give the metrics.csv "
                           "'recipelab pretrain' writes")
    found = []
    for row in rows:
        if not row.get("val_bpb"):
            continue
        seen = row.get("bytes_seen") or row.get("tokens")
        if not seen:
            raise MetricsError(f"{path} row at step {row['step']} has neither bytes_seen nor tokens")
        found.append((int(row["step"]), float(seen), float(row["val_bpb"])))
    if not found:
        raise MetricsError(f"{path} has no evaluation yet (no val_bpb value): wait for the "
                           "first --eval-every step")
    return found


def verify(prediction: Prediction, evaluations: Sequence[tuple[int, float, float]]) -> Verification:
    points = []
    for step, seen, measured in evaluations:
        points.append(Checkpointed(step, seen, measured, prediction.center(seen),
                                   *prediction.band(seen)))
    last = points[-1]
    previous = points[-2] if len(points) > 1 else None
    rising = (previous is not None and math.isfinite(previous.measured)
              and last.measured - previous.measured > last.high - last.predicted)
    if not math.isfinite(last.measured) or (last.measured > last.high and rising):
        return Verification("diverging", None, tuple(points))
    if last.measured > last.high:
        return Verification("worse", last.relative, tuple(points))
    if last.measured < last.low:
        return Verification("better", last.relative, tuple(points))
    return Verification("on track", None, tuple(points))
