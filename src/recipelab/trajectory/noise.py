"""The noise floor: how far a recipe's gain over the baseline moves when only the seed changes.

A 60-step proxy trial is noisy, and most of that noise is the seed's: which batches, in which
order, from which initialisation. Every candidate of a campaign trains with the campaign's
seed, so it sees the same batches in the same order from the same initialisation as the
baseline (common random numbers, see :func:`recipelab.trainer.batches.sample_batch`), and the
difference between the two is mostly the recipe's. What is left is the noise that matters:
how much that *paired* difference moves from one seed to another.

It is measured where the records allow it. The baseline is trained with several seeds
(``noise_seeds``), and finalists in a close call are trained again with the baseline's other
seeds (proposer ``seed-rerun``); so for every recipe with two or more seeds the baseline
shares, there are paired differences ``candidate(seed s) - baseline(seed s)``. Their
deviations from the recipe's own mean difference are pooled (scaled by ``sqrt(n / (n-1))``,
since a deviation from a mean of ``n`` is that much smaller than one from the truth), and the
interval of a gain is bootstrapped from them: the mean of ``k`` deviations drawn with
replacement is the noise of a gain averaged over ``k`` seeds, and its 5th and 95th
percentiles bound a 90% interval. The generator has a fixed seed, so a report is
reproducible. A gain whose interval contains 0 is noise, and no winner is named inside it.

Before any recipe but the baseline has two seeds, the floor falls back to the unpaired one:
the range (max - min) of the baseline seeds' val_bpb, a gain no larger than it being noise.
``kind`` says which is in use. The unpaired range is far wider: on the ``cpu`` preset it swamps
gains that the paired comparison resolves. A bare val_bpb, given without its seed, can only be
judged unpaired, against the baseline mean, as it always was; pairing needs the seed.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from recipelab.recipe import BASELINE_PROPOSER
from recipelab.trajectory.record import TrialRecord

SEED_RERUN_PROPOSER = "seed-rerun"  # a finalist trained again with another seed

NoiseKind = Literal["paired", "unpaired"]
CONFIDENCE = 0.90
BOOTSTRAP_DRAWS = 10_000
BOOTSTRAP_SEED = 0  # fixed, so the same records always give the same intervals


@dataclass(frozen=True)
class Gain:
    """A gain over the baseline (positive is better) with its interval ``[low, high]``."""

    value: float
    low: float
    high: float
    seeds: int = 1

    @property
    def is_noise(self) -> bool:
        """True when the interval contains 0: the seeds alone could explain the difference."""
        return self.low <= 0.0 <= self.high

    def interval_text(self) -> str:
        return f"{self.value:+.4f} [{self.low:+.4f}, {self.high:+.4f}]"

    def describe(self) -> str:
        """``"within noise: +0.0100 [-0.0200, +0.0400], 1 seed"`` or ``"+0.1300 [+0.1000,
        +0.1600], 3 seeds"``: the one label of a gain over the baseline, wherever it is shown
        (status, the report); the word comes first, so a gain inside the noise never reads
        as a win, and the seeds say how much evidence it rests on."""
        text = f"{self.interval_text()}, {self.seeds} seed{'s' if self.seeds != 1 else ''}"
        return f"within noise: {text}" if self.is_noise else text


@dataclass(frozen=True)
class NoiseFloor:
    """The baseline's val_bpb over ``seeds`` (``values``, aligned) and the noise of a gain.

    ``spread`` is the range of the baseline seeds' val_bpb, the unpaired floor: what a bare
    val_bpb is judged by when no seed is given (``is_noise(val_bpb)``), as before pairing.
    When ``kind`` is ``"paired"``, a result given with its seed (``is_noise(val_bpb,
    seed=...)``, or :func:`paired_gain` for a record and its seed re-runs) is compared with
    the baseline at that seed, and its interval is bootstrapped from ``deviations`` (the
    pooled deviations of ``pairs`` paired differences over ``recipes`` recipes);
    ``paired_spread`` is then the largest single-seed gain the seeds alone produce (90%).
    """

    mean: float
    spread: float
    seeds: tuple[int, ...]
    values: tuple[float, ...] = ()
    kind: NoiseKind = "unpaired"
    deviations: tuple[float, ...] = ()
    pairs: int = 0
    recipes: int = 0

    @property
    def paired_spread(self) -> float | None:
        """The larger end (in size) of a single-seed paired gain's noise interval; None
        before any recipe but the baseline has paired seeds."""
        if self.kind != "paired" or not self.deviations:
            return None
        low, high = self.noise_quantiles(paired=True)
        return max(abs(low), abs(high))

    @property
    def floor(self) -> float:
        """The noise floor in use: the paired spread when there is one, else the unpaired."""
        paired = self.paired_spread
        return self.spread if paired is None else paired

    def _pairs_with(self, seed: int | None) -> bool:
        return (seed is not None and self.kind == "paired" and bool(self.deviations)
                and seed in self.seeds[:len(self.values)])

    def reference(self, seed: int | None = None) -> float:
        """What a result is compared with: in a paired floor, the baseline's val_bpb at the
        same ``seed``; without a seed (or one the baseline lacks), the baseline mean."""
        if seed is not None and self._pairs_with(seed):
            return dict(zip(self.seeds, self.values, strict=False))[seed]
        return self.mean

    def gain(self, val_bpb: float, seed: int | None = None) -> float:
        """How much lower than the baseline ``val_bpb`` is (positive is better)."""
        return self.reference(seed) - val_bpb

    def noise_quantiles(self, seeds: int = 1, paired: bool = True) -> tuple[float, float]:
        """The 5th and 95th percentiles of the noise of a gain averaged over ``seeds`` seeds
        (paired when the floor is and ``paired``; else minus and plus the unpaired spread)."""
        if not paired or self.kind == "unpaired" or not self.deviations:
            return -self.spread, self.spread
        tail = (1.0 - CONFIDENCE) / 2
        return bootstrap_quantiles(self.deviations, max(1, seeds), tail)

    def interval(self, val_bpb: float, seed: int | None = None, seeds: int = 1) -> Gain:
        """The gain of ``val_bpb`` with its 90% interval: paired when the floor is paired and
        ``seed`` is one of the baseline's, else unpaired. ``seeds`` is how many seeds a paired
        value is the mean over; more seeds, a narrower interval."""
        value = self.gain(val_bpb, seed)
        low, high = self.noise_quantiles(seeds, paired=self._pairs_with(seed))
        return Gain(value=value, low=value - high, high=value - low, seeds=seeds)

    def is_noise(self, val_bpb: float, seed: int | None = None) -> bool:
        """True when the interval of the gain contains 0: a lucky seed could explain it,
        and so could an unlucky one a loss of that size."""
        return self.interval(val_bpb, seed).is_noise

    def summary(self) -> str:
        """One line naming the floor in use, for status and the report."""
        seeds = ", ".join(map(str, self.seeds))
        if self.kind == "paired":
            low, high = self.noise_quantiles()
            return (f"paired noise floor: a single-seed gain within [{low:+.4f}, {high:+.4f}] "
                    f"(90%, bootstrapped from {self.pairs} paired differences over "
                    f"{self.recipes} recipe(s)) is noise; baseline val_bpb {self.mean:.4f} over "
                    f"seeds {seeds}, unpaired seed spread {self.spread:.4f}")
        return (f"unpaired noise floor: baseline val_bpb {self.mean:.4f} ± {self.spread:.4f} "
                f"over seeds {seeds}; a gain within it is marked as noise (no recipe has "
                "paired seeds yet)")


def bootstrap_quantiles(deviations: Sequence[float], seeds: int,
                         tail: float) -> tuple[float, float]:
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    draws = rng.choice(np.asarray(deviations, dtype=float), size=(BOOTSTRAP_DRAWS, seeds))
    means = draws.mean(axis=1)
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def baseline_seed_trials(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """The complete proxy trials of the unedited baseline, one per seed, in record order."""
    found: dict[int, TrialRecord] = {}
    for record in records:
        if (record.kind == "proxy" and record.proposer == BASELINE_PROPOSER
                and record.status == "complete" and record.val_bpb is not None):
            found.setdefault(int(record.recipe.get("seed", 0)), record)
    return list(found.values())


def _recipe_key(recipe: dict[str, object]) -> str:
    return json.dumps(_without_seed(recipe), sort_keys=True, default=str)


def paired_differences(records: Sequence[TrialRecord]) -> dict[str, dict[int, float]]:
    """For every recipe (keyed by its recipe without the seed) other than the baseline's,
    ``candidate - baseline`` val_bpb at each seed both have completed."""
    baseline = baseline_seed_trials(records)
    if not baseline:
        return {}
    at = {int(r.recipe.get("seed", 0)): float(r.val_bpb) for r in baseline
          if r.val_bpb is not None}
    base_key = _recipe_key(baseline[0].recipe)
    found: dict[str, dict[int, float]] = {}
    for record in records:
        if record.kind != "proxy" or record.status != "complete" or record.val_bpb is None:
            continue
        key, seed = _recipe_key(record.recipe), int(record.recipe.get("seed", 0))
        if key == base_key or seed not in at:
            continue
        found.setdefault(key, {}).setdefault(seed, float(record.val_bpb) - at[seed])
    return found


def pooled_deviations(differences: dict[str, dict[int, float]]) -> tuple[list[float], int, int]:
    """The deviations of each recipe's paired differences from their mean, scaled to
    estimate the noise of one difference; also how many differences and recipes gave them."""
    deviations: list[float] = []
    pairs = recipes = 0
    for by_seed in differences.values():
        values = list(by_seed.values())
        if len(values) < 2:
            continue
        centre = statistics.fmean(values)
        scale = math.sqrt(len(values) / (len(values) - 1))
        deviations += [(v - centre) * scale for v in values]
        pairs += len(values)
        recipes += 1
    return deviations, pairs, recipes


def noise_floor(records: Iterable[TrialRecord]) -> NoiseFloor | None:
    """The noise floor from the records: paired when any recipe but the baseline has two
    seeds the baseline shares, else unpaired; None with fewer than two baseline seeds."""
    records = list(records)
    trials = baseline_seed_trials(records)
    if len(trials) < 2:
        return None
    values = tuple(float(r.val_bpb) for r in trials if r.val_bpb is not None)
    seeds = tuple(int(r.recipe.get("seed", 0)) for r in trials)
    mean, unpaired = statistics.fmean(values), max(values) - min(values)
    deviations, pairs, recipes = pooled_deviations(paired_differences(records))
    if not recipes:
        return NoiseFloor(mean=mean, spread=unpaired, seeds=seeds, values=values)
    return NoiseFloor(mean=mean, spread=unpaired, seeds=seeds, values=values, kind="paired",
                      deviations=tuple(deviations), pairs=pairs, recipes=recipes)


def paired_gain(record: TrialRecord, records: Sequence[TrialRecord],
                floor: NoiseFloor) -> Gain | None:
    """``record``'s gain over the baseline with its interval, over every seed of its recipe.

    With a paired floor, the gain is the mean of ``baseline(s) - candidate(s)`` over the
    seeds both have, and the interval narrows with their number; otherwise it is the gain of
    the seed mean over the baseline mean. None when the record has no val_bpb.
    """
    family = seed_family(record, records)
    if floor.kind == "paired":
        at = dict(zip(floor.seeds, floor.values, strict=False))
        shared = [at[s] - float(r.val_bpb) for r in family
                  if r.val_bpb is not None and (s := int(r.recipe.get("seed", 0))) in at]
        if shared:
            value = statistics.fmean(shared)
            low, high = floor.noise_quantiles(len(shared))
            return Gain(value=value, low=value - high, high=value - low, seeds=len(shared))
    mean = seed_mean(record, records)
    if mean is None:
        return None
    return floor.interval(mean, seeds=len(family))


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
