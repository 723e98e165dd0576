"""Stress-run verdicts: does a finalist stay healthy over a long run?

A 60-step proxy trial cannot show late divergence, a loss that stops improving, or a
gradient norm that spikes once the learning rate has been high for a while. Each finalist is
re-run for ``stress_steps`` and its loss/grad-norm curve judged here.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["stable", "diverged", "flat", "grad-spike"]

BLOWUP_FACTOR = 1.5  # a loss this many times its best so far has blown up
SPIKE_FACTOR = 10.0  # a grad norm this many times its running median is a spike
MIN_SPIKE_HISTORY = 3
FLAT_TAIL_FRACTION = 0.25  # the last part of the run judged for progress
FLAT_MIN_GAIN = 0.005  # relative loss improvement below which the tail is flat


@dataclass(frozen=True)
class StressVerdict:
    verdict: Verdict
    explanation: str


def judge_stress(curve: Sequence[Mapping[str, Any]], failure: str | None = None) -> StressVerdict:
    """Judge a stress run from its curve (points with ``step``, ``loss``, ``grad_norm``)."""
    if failure in ("nan", "diverged"):
        return StressVerdict("diverged", f"the run failed with {failure}")
    losses = [float(p["loss"]) for p in curve]
    grads = [float(p["grad_norm"]) for p in curve]
    steps = [int(p["step"]) for p in curve]
    if not losses:
        return StressVerdict("diverged", "the run recorded no loss at all")
    for i, loss in enumerate(losses):
        if not math.isfinite(loss):
            return StressVerdict("diverged", f"loss became {loss} at step {steps[i]}")
        best = min(losses[: i + 1])
        if loss > BLOWUP_FACTOR * best:
            return StressVerdict(
                "diverged", f"loss {loss:.3f} at step {steps[i]} is over {BLOWUP_FACTOR}x its "
                f"best so far ({best:.3f})")
    for i in range(MIN_SPIKE_HISTORY, len(grads)):
        median = statistics.median(grads[:i])
        if median > 0 and grads[i] > SPIKE_FACTOR * median:
            return StressVerdict(
                "grad-spike", f"grad norm {grads[i]:.3g} at step {steps[i]} is over "
                f"{SPIKE_FACTOR:.0f}x its running median ({median:.3g})")
    tail = max(2, math.ceil(FLAT_TAIL_FRACTION * len(losses)))
    if len(losses) >= 2 * tail:
        before, after = losses[-tail - 1], losses[-1]
        gain = (before - after) / before if before > 0 else 0.0
        if gain < FLAT_MIN_GAIN:
            return StressVerdict(
                "flat", f"loss moved from {before:.4f} to {after:.4f} over the last "
                f"{steps[-1] - steps[-tail - 1]} steps ({100 * gain:.2f}% gain)")
    return StressVerdict("stable", f"final loss {losses[-1]:.4f}, no blow-up or spike")
