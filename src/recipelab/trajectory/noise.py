"""The noise floor: how far val_bpb moves when only the seed changes.

A 60-step proxy trial is noisy. Before any edit is credited with a gain, the campaign trains
the unedited baseline with several seeds; the spread of those val_bpb values is the smallest
difference a single trial can be trusted to show. A candidate whose gain over the baseline
mean is no larger than that spread is marked as noise, however good it looks.

``spread`` is the range (max - min) of the baseline seeds' val_bpb: with the default three
seeds it reads as "the same recipe with another seed landed anywhere in this interval".
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from recipelab.recipe import BASELINE_PROPOSER
from recipelab.trajectory.record import TrialRecord

SEED_RERUN_PROPOSER = "seed-rerun"  # a finalist trained again with another seed


@dataclass(frozen=True)
class NoiseFloor:
    """Mean and spread (max - min) of the baseline's val_bpb over ``seeds``."""

    mean: float
    spread: float
    seeds: tuple[int, ...]

    def gain(self, val_bpb: float) -> float:
        """How much lower than the baseline mean ``val_bpb`` is (positive is better)."""
        return self.mean - val_bpb

    def is_noise(self, val_bpb: float) -> bool:
        """True when the difference from the baseline mean is within the seed spread.

        A gain no larger than ``spread`` could be a lucky seed; so could a loss of that size.
        """
        return abs(self.gain(val_bpb)) <= self.spread

    def describe(self, val_bpb: float) -> str:
        """A short label for a result: ``"noise"`` or its gain over the baseline mean."""
        if self.is_noise(val_bpb):
            return "noise"
        return f"{self.gain(val_bpb):+.4f} vs baseline"


def baseline_seed_trials(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """The complete proxy trials of the unedited baseline, one per seed, in record order."""
    found: dict[int, TrialRecord] = {}
    for record in records:
        if (record.kind == "proxy" and record.proposer == BASELINE_PROPOSER
                and record.status == "complete" and record.val_bpb is not None):
            found.setdefault(int(record.recipe.get("seed", 0)), record)
    return list(found.values())


def noise_floor(records: Iterable[TrialRecord]) -> NoiseFloor | None:
    """The noise floor measured from the baseline's seeds; None with fewer than two."""
    trials = baseline_seed_trials(records)
    if len(trials) < 2:
        return None
    values = [float(r.val_bpb) for r in trials if r.val_bpb is not None]
    return NoiseFloor(mean=statistics.fmean(values), spread=max(values) - min(values),
                      seeds=tuple(int(r.recipe.get("seed", 0)) for r in trials))


def _without_seed(recipe: dict[str, object]) -> dict[str, object]:
    return {key: value for key, value in recipe.items() if key != "seed"}


def seed_family(record: TrialRecord, records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """``record`` and every complete proxy trial of the same recipe with another seed (its
    seed re-runs; for the baseline, its noise-floor seeds), one per seed, ``record`` first."""
    recipe = _without_seed(record.recipe)
    family = {int(record.recipe.get("seed", 0)): record}
    for other in records:
        if (other.kind == "proxy" and other.status == "complete" and other.val_bpb is not None
                and _without_seed(other.recipe) == recipe):
            family.setdefault(int(other.recipe.get("seed", 0)), other)
    return list(family.values())


def seed_mean(record: TrialRecord, records: Sequence[TrialRecord]) -> float | None:
    """The mean val_bpb of ``record`` over its seeds (see :func:`seed_family`)."""
    values = [r.val_bpb for r in seed_family(record, records) if r.val_bpb is not None]
    return statistics.fmean(values) if values else None
