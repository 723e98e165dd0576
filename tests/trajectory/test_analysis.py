"""What a trajectory says: knob importance, rank correlation and the best-so-far line."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from recipelab.targets import proxy_recipe
from recipelab.trajectory.analysis import best_so_far, knob_importance, scored_proxies, spearman
from recipelab.trajectory.record import TrialRecord


def record(i: int, val_bpb: float | None, edit: dict[str, Any] | None = None, *,
           status: str = "complete", kind: str = "proxy") -> TrialRecord:
    recipe = proxy_recipe("tiny").apply(edit or {})
    return TrialRecord(campaign="c", trial_id=f"p{i:04d}", iteration=i, kind=kind,
                       status=status, recipe=recipe.model_dump(mode="json"), edit=edit or {},
                       fingerprint=recipe.fingerprint(), val_bpb=val_bpb)


def lr_driven(n: int, seed: int) -> list[TrialRecord]:
    """Trials whose val_bpb depends only on the learning rate (plus a little noise), while
    weight decay and batch size vary at random."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        lr = 10 ** rng.uniform(-3, -1)
        edit = {"optimizer.lr": lr, "optimizer.weight_decay": rng.uniform(0.0, 0.3),
                "batch_size": rng.choice([4, 8, 16])}
        records.append(record(i, 2.0 - math.log10(lr) + rng.gauss(0, 0.02), edit))
    return records


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_importance_finds_the_knob_that_drives_val_bpb(seed: int) -> None:
    found = knob_importance(lr_driven(24, seed))

    assert next(iter(found)) == "optimizer.lr"
    assert found["optimizer.lr"] > 0.5
    assert set(found) == {"optimizer.lr", "optimizer.weight_decay", "batch_size"}
    assert math.isclose(sum(found.values()), 1.0)


def test_importance_is_deterministic() -> None:
    records = lr_driven(16, 3)
    assert knob_importance(records) == knob_importance(records)


def test_importance_uses_only_complete_proxy_trials() -> None:
    records = lr_driven(12, 4)
    noise = [record(100 + i, None, {"optimizer.beta1": 0.5}, status="failed") for i in range(5)]
    stress = [record(200 + i, 9.0, {"optimizer.beta1": 0.8}, kind="stress") for i in range(5)]
    assert "optimizer.beta1" not in knob_importance(records + noise + stress)


def test_importance_says_nothing_with_too_few_trials_or_nothing_varying() -> None:
    assert knob_importance(lr_driven(3, 0)) == {}
    same_knobs = [record(i, 3.0 + i) for i in range(6)]
    assert knob_importance(same_knobs) == {}
    same_result = [record(i, 3.0, {"optimizer.lr": 0.001 * (i + 1)}) for i in range(6)]
    assert knob_importance(same_result) == {}


def test_spearman_of_monotone_pairs_is_plus_or_minus_one() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 35, 90]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)


def test_spearman_averages_tied_ranks() -> None:
    # x ranks (1, 2.5, 2.5, 4) against y ranks (1, 2, 3, 4): 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))


def test_spearman_says_nothing_with_too_few_points_or_a_constant_side() -> None:
    assert spearman([1.0, 2.0], [2.0, 1.0]) is None
    assert spearman([], []) is None
    assert spearman([1, 2, 3], [5, 5, 5]) is None
    with pytest.raises(ValueError, match="paired"):
        spearman([1, 2, 3], [1, 2])


def test_best_so_far_is_the_running_minimum_over_scored_proxy_trials() -> None:
    records = [record(i, v, {"optimizer.lr": 0.001 * (i + 1)}, status=status)
               for i, v, status in ((0, 4.0, "complete"), (1, 4.5, "complete"),
                                    (2, None, "failed"), (3, 3.5, "complete"),
                                    (4, 3.9, "complete"), (5, math.inf, "complete"))]
    assert best_so_far(records) == [(0, 4.0), (1, 4.0), (3, 3.5), (4, 3.5)]
    assert [r.trial_id for r in scored_proxies(records)] == ["p0000", "p0001", "p0003", "p0004"]


def test_best_so_far_follows_a_recipe_at_its_mean_over_seeds_not_a_lucky_seed() -> None:
    """p0002 re-runs p0001's recipe at seed 1 and draws a lucky 3.0: the line moves to the
    recipe's mean, 3.5, not to 3.0."""
    records = [record(0, 4.0), record(1, 4.0, {"optimizer.lr": 0.02}),
               record(2, 3.0, {"optimizer.lr": 0.02, "seed": 1})]
    assert best_so_far(records) == [(0, 4.0), (1, 4.0), (2, 3.5)]
