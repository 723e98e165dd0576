"""The time model: predict a trial's wall time from trials already measured on this device.

A trial that will hit its timeout wastes the whole timeout and teaches nothing, so it is
rejected up front. Wall time is split into training, which scales with training FLOPs at
the device's measured FLOP rate, and a fixed overhead (process start, model build, data
loading, evaluation) that does not. Medians keep one odd trial from steering the estimate.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from recipelab.guardrails.base import GuardContext, Measurement
from recipelab.recipe import Recipe


def predict_trial_seconds(recipe: Recipe, measurements: Sequence[Measurement]) -> float | None:
    """Predicted wall seconds of one trial of ``recipe``, or None without a usable measurement.

    ``steps * tokens_per_step * flops_per_token`` training FLOPs over the median measured
    FLOP/s, plus the median measured overhead ``wall_s - steps * tokens_per_step / tokens_per_s``.
    """
    usable = [m for m in measurements if m.tokens_per_s > 0 and m.flops_per_token > 0]
    if not usable:
        return None
    flop_rate = statistics.median(m.flops_per_token * m.tokens_per_s for m in usable)
    overhead = statistics.median(
        max(0.0, m.wall_s - m.steps * m.tokens_per_step / m.tokens_per_s) for m in usable)
    flops = recipe.steps * recipe.tokens_per_step * recipe.flops_per_token()
    return flops / flop_rate + overhead


def check_time(recipe: Recipe, ctx: GuardContext) -> list[str]:
    """Reject a candidate predicted to run past the per-trial timeout."""
    if ctx.timeout_s is None:
        return []
    predicted = predict_trial_seconds(recipe, ctx.measurements)
    if predicted is None or predicted <= ctx.timeout_s:
        return []
    return [
        f"predicted trial time {predicted:,.1f} s for {recipe.steps:,} steps of "
        f"{recipe.tokens_per_step:,} tokens (batch_size x seq_len x grad_accum) through "
        f"{recipe.param_count():,} parameters exceeds the per-trial timeout of "
        f"{ctx.timeout_s:,.1f} s; lower batch_size, seq_len or grad_accum, or shrink the model."
    ]
