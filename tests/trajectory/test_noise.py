"""noise: the paired noise floor (or the baseline's unpaired spread), and which gains it swallows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from recipelab.trajectory.noise import (
    NoiseFloor,
    noise_floor,
    paired_differences,
    paired_gain,
    seed_mean,
)
from recipelab.trajectory.record import TrialRecord


def record(trial_id: str, val_bpb: float | None, *, proposer: str = "baseline", seed: int = 0,
           status: str = "complete", kind: str = "proxy", batch_size: int | None = None,
           **fields: Any) -> TrialRecord:
    recipe: dict[str, Any] = {"seed": seed}
    if batch_size is not None:  # another recipe than the baseline's
        recipe["batch_size"] = batch_size
    return TrialRecord(campaign="c", trial_id=trial_id, status=status, kind=kind,
                       proposer=proposer, val_bpb=val_bpb, recipe=recipe, **fields)


BASELINE = {0: 2.50, 1: 2.80, 2: 2.20}  # the seed moves val_bpb by 0.6


def campaign(gain: float = 0.05, wobble: tuple[float, ...] = (0.004, -0.006, 0.002)
             ) -> list[TrialRecord]:
    """Baseline seeds far apart, and a finalist (batch_size 8) trained at the same seeds that
    is ``gain`` better than the baseline at every seed, give or take ``wobble``."""
    records = [record(f"p000{s}", v, seed=s) for s, v in BASELINE.items()]
    records.append(record("p0005", BASELINE[0] - gain + wobble[0], proposer="classical-tpe",
                          batch_size=8))
    records += [record(f"p001{s}", BASELINE[s] - gain + wobble[s], proposer="seed-rerun",
                       parent="p0005", seed=s, batch_size=8) for s in (1, 2)]
    return records


def test_the_floor_is_the_mean_and_range_of_the_baseline_seeds() -> None:
    floor = noise_floor([record("p0000", 2.50, seed=0), record("p0001", 2.56, seed=1),
                         record("p0002", 2.53, seed=2),
                         record("p0003", 2.00, proposer="classical-tpe", seed=0)])
    assert floor is not None
    assert floor.mean == pytest.approx(2.53)
    assert floor.spread == pytest.approx(0.06)
    assert floor.seeds == (0, 1, 2)
    assert floor.kind == "unpaired"  # no recipe but the baseline has two seeds


def test_no_floor_from_fewer_than_two_complete_baseline_seeds() -> None:
    assert noise_floor([]) is None
    assert noise_floor([record("p0000", 2.5)]) is None
    assert noise_floor([record("p0000", 2.5), record("p0001", None, seed=1, status="failed"),
                        record("s0000", 2.4, kind="stress", seed=2)]) is None


def test_a_repeated_seed_counts_once() -> None:
    assert noise_floor([record("p0000", 2.5, seed=0), record("p0001", 2.6, seed=0)]) is None


def test_a_gain_within_the_spread_is_noise_and_a_larger_one_is_not() -> None:
    floor = NoiseFloor(mean=2.53, spread=0.06, seeds=(0, 1, 2))
    assert floor.is_noise(2.50)  # 0.03 better: a lucky seed could do that
    assert floor.is_noise(2.47)  # exactly the spread
    assert not floor.is_noise(2.40)  # 0.13 better: a real gain
    assert floor.is_noise(2.58)  # worse, but within the spread
    assert not floor.is_noise(2.70)
    assert floor.interval(2.50).describe() == "within noise: +0.0300 [-0.0300, +0.0900], 1 seed"
    assert floor.interval(2.40).describe() == "+0.1300 [+0.0700, +0.1900], 1 seed"


def test_a_seed_mean_covers_every_complete_trial_of_the_same_recipe() -> None:
    finalist = record("p0007", 2.40, proposer="classical-tpe")
    records = [finalist,
               record("p0010", 2.50, proposer="seed-rerun", parent="p0007", seed=1),
               record("p0011", 2.45, proposer="seed-rerun", parent="p0007", seed=2),
               record("p0012", None, proposer="seed-rerun", parent="p0007", seed=3,
                      status="failed"),
               record("p0013", 1.00, proposer="seed-rerun", parent="p0008", seed=1)
               .model_copy(update={"recipe": {"seed": 1, "batch_size": 8}})]
    assert seed_mean(finalist, records) == pytest.approx(2.45)
    baseline = record("p0000", 2.50)
    seeds = [baseline, record("p0001", 2.56, seed=1), record("p0002", 2.53, seed=2)]
    assert seed_mean(baseline, seeds) == pytest.approx(2.53)  # the noise-floor seeds


def test_paired_differences_pair_each_recipe_with_the_baseline_at_the_same_seed() -> None:
    records = campaign()
    differences = paired_differences(records)
    assert len(differences) == 1
    (by_seed,) = differences.values()
    assert by_seed == pytest.approx({0: -0.046, 1: -0.056, 2: -0.048})


def test_the_paired_floor_resolves_a_gain_the_unpaired_spread_calls_noise() -> None:
    records = campaign(gain=0.05)
    unpaired = noise_floor(records[:4])  # before the seed re-runs: only the baseline has seeds
    assert unpaired is not None and unpaired.kind == "unpaired"
    assert unpaired.spread == pytest.approx(0.6)
    assert unpaired.is_noise(BASELINE[0] - 0.05)

    floor = noise_floor(records)
    assert floor is not None and floor.kind == "paired"
    assert (floor.pairs, floor.recipes) == (3, 1)
    assert floor.paired_spread is not None and floor.paired_spread < 0.02  # the seeds' 0.6
    assert floor.floor == floor.paired_spread  # cancels in the paired differences
    assert floor.spread == pytest.approx(0.6)
    assert floor.reference(0) == BASELINE[0]  # a result is compared at its own seed
    candidate = records[3].val_bpb or 0.0
    gain = floor.interval(candidate, seed=0)
    assert gain.value == pytest.approx(0.046)
    assert 0.0 < gain.low < gain.value < gain.high
    assert not floor.is_noise(candidate, seed=0)
    assert not floor.interval(candidate, seed=0).describe().startswith("within noise")
    assert floor.is_noise(BASELINE[0] - 0.001, seed=0)
    assert floor.interval(BASELINE[0] - 0.001, seed=0).describe().startswith("within noise: ")
    assert "paired noise floor" in floor.summary() and "unpaired" in unpaired.summary()


def test_a_bare_val_bpb_without_its_seed_is_judged_unpaired_as_before() -> None:
    floor = noise_floor(campaign(gain=0.05))
    assert floor is not None and floor.kind == "paired"
    assert floor.reference() == floor.reference(7) == pytest.approx(2.5)  # the baseline mean
    assert floor.is_noise(BASELINE[0] - 0.05)  # within the unpaired 0.6
    assert floor.interval(2.3).low == pytest.approx(0.2 - 0.6)


def test_a_recipe_with_a_single_shared_seed_leaves_the_floor_unpaired() -> None:
    records = campaign()
    lone = [*records[:4], record("p0011", 2.70, proposer="seed-rerun", parent="p0005", seed=7,
                                 batch_size=8)]  # a seed the baseline never trained
    floor = noise_floor(lone)
    assert floor is not None and floor.kind == "unpaired"


def test_the_bootstrap_is_reproducible_and_narrows_with_more_seeds() -> None:
    records = campaign()
    first, again = noise_floor(records), noise_floor(records)
    assert first is not None and again is not None
    assert first == again
    assert first.noise_quantiles(1) == again.noise_quantiles(1)
    one_low, one_high = first.noise_quantiles(1)
    three_low, three_high = first.noise_quantiles(3)
    assert one_low < three_low < 0.0 < three_high < one_high


def test_a_paired_gain_averages_over_every_seed_the_baseline_shares() -> None:
    records = campaign(gain=0.05)
    floor = noise_floor(records)
    assert floor is not None
    gain = paired_gain(records[3], records, floor)
    assert gain is not None and gain.seeds == 3
    assert gain.value == pytest.approx(0.05)
    single = floor.interval(records[3].val_bpb or 0.0, seed=0)
    assert gain.high - gain.low < single.high - single.low
    assert not gain.is_noise
    baseline = paired_gain(records[0], records, floor)
    assert baseline is not None and baseline.value == 0.0 and baseline.is_noise


def test_the_same_deviations_always_give_the_same_interval() -> None:
    """The bootstrap's generator is seeded: a report rebuilt from the same records reads the
    same (many distinct deviations, so an unseeded draw would move the percentiles)."""
    deviations = tuple(float(x) for x in np.random.default_rng(5).normal(0.0, 0.01, size=60))
    floor = NoiseFloor(mean=2.5, spread=0.6, seeds=(0, 1), values=(2.5, 2.6), kind="paired",
                       deviations=deviations, pairs=60, recipes=20)
    assert floor.noise_quantiles(3) == floor.noise_quantiles(3)
    assert floor.interval(2.4, seed=0) == floor.interval(2.4, seed=0)
