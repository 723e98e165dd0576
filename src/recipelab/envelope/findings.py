"""What a sweep's points say: each precision's gain, where throughput plateaus, and the
memory line peak memory = a x tokens + b (see :mod:`recipelab.guardrails.memory_fit`)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from recipelab.envelope.points import EnvelopePoint, PrecisionFit
from recipelab.guardrails import DeviceInfo
from recipelab.guardrails.memory_fit import (
    MemoryModelError,
    fit_line,
    held_out_errors,
    recipe_family,
    record_peaks,
)
from recipelab.recipe import Recipe

PLATEAU_GROWTH = 0.05


def with_gains(points: Sequence[EnvelopePoint], precisions: Sequence[str]) -> list[EnvelopePoint]:
    """Each point with its throughput relative to the first precision's at the same geometry."""
    first = {(p.batch_size, p.seq_len): p.tokens_per_s for p in points
             if p.precision == precisions[0] and p.tokens_per_s}
    gained = []
    for point in points:
        reference = first.get((point.batch_size, point.seq_len))
        gain = point.tokens_per_s / reference if point.tokens_per_s and reference else None
        gained.append(point.model_copy(update={"gain": gain}))
    return gained


def plateau_tokens(points: Sequence[EnvelopePoint]) -> int | None:
    """Where one precision's throughput plateaus, or None.

    The plateau is the smallest tokens-per-step after which throughput never grows by 5% or
    more; when only the largest point qualifies, throughput was still growing and there is
    no plateau.
    """
    best: dict[int, float] = {}
    for point in points:
        if point.status == "complete" and point.tokens_per_s:
            best[point.tokens_per_step] = max(best.get(point.tokens_per_step, 0.0),
                                              point.tokens_per_s)
    tokens = sorted(best)
    for index, size in enumerate(tokens):
        later = [best[t] for t in tokens[index + 1:]]
        if later and max(later) < (1 + PLATEAU_GROWTH) * best[size]:
            return size
    return None


def fit_memory(base: Recipe, points: Sequence[EnvelopePoint], device: DeviceInfo, *,
               save: bool) -> list[PrecisionFit]:
    """Fit each precision's memory line; with ``save``, add the peaks to the memory model."""
    fits = []
    for precision in dict.fromkeys(p.precision for p in points):
        measured = [(p.tokens_per_step, p.peak_memory_bytes) for p in points
                    if p.precision == precision and p.status == "complete" and p.peak_memory_bytes]
        line = fit_line(measured)
        if line is None:
            continue
        recipe = base.apply({"precision": precision})
        errors = held_out_errors(measured)
        saved = None
        if save:
            try:
                record_peaks(recipe, device, measured)
                saved = "memory model"
            except (MemoryModelError, OSError) as error:
                saved = f"not saved: {error}"
        fits.append(PrecisionFit(
            precision=precision, family=recipe_family(recipe),
            a_bytes_per_token=line.a_bytes_per_token, b_bytes=line.b_bytes, points=line.points,
            held_out_max_error=max(errors) if errors else None,
            held_out_mean_error=statistics.mean(errors) if errors else None, saved_to=saved))
    return fits
