"""noise: the spread of the baseline's seeds, and which gains it swallows."""

from __future__ import annotations

from typing import Any

import pytest

from recipelab.trajectory.noise import NoiseFloor, noise_floor, seed_mean
from recipelab.trajectory.record import TrialRecord


def record(trial_id: str, val_bpb: float | None, *, proposer: str = "baseline", seed: int = 0,
           status: str = "complete", kind: str = "proxy", **fields: Any) -> TrialRecord:
    return TrialRecord(campaign="c", trial_id=trial_id, status=status, kind=kind,
                       proposer=proposer, val_bpb=val_bpb, recipe={"seed": seed}, **fields)


def test_the_floor_is_the_mean_and_range_of_the_baseline_seeds() -> None:
    floor = noise_floor([record("p0000", 2.50, seed=0), record("p0001", 2.56, seed=1),
                         record("p0002", 2.53, seed=2),
                         record("p0003", 2.00, proposer="classical-tpe", seed=0)])
    assert floor is not None
    assert floor.mean == pytest.approx(2.53)
    assert floor.spread == pytest.approx(0.06)
    assert floor.seeds == (0, 1, 2)


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
    assert floor.describe(2.50) == "noise"
    assert floor.describe(2.40) == "+0.1300 vs baseline"


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
