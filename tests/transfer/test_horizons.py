"""The data term of the prediction: the recipe's best at each horizon of the ladder, and
Chinchilla's B·D^-β through them."""

from __future__ import annotations

import json

import pytest

from recipelab.targets import proxy_recipe
from recipelab.trajectory.ledger import LR_FAMILY_PROPOSER
from recipelab.trajectory.record import TrialRecord
from recipelab.transfer.horizons import Horizons, best_by_budget, horizons


def ladder(ends: dict[int, dict[float, list[float]]], trial: str = "p0001") -> list[TrialRecord]:
    """``trial`` at each budget (its steps), at each rate its scores over seeds: the rate
    0.004 as the recipe's own rung run, any other as its learning-rate family."""
    base = proxy_recipe("tiny")
    records = []
    for budget, by_rate in ends.items():
        for lr, values in by_rate.items():
            for seed, value in enumerate(values):
                recipe = base.apply({"optimizer.lr": lr, "steps": budget, "seed": seed})
                own = lr == 0.004
                records.append(TrialRecord(
                    campaign="c", trial_id=f"r{budget}-{lr:g}-{seed}",
                    kind="stress" if own else "rung", status="complete", val_bpb=value,
                    recipe=recipe.model_dump(mode="json"), parent=trial, budget=budget,
                    proposer="classical-tpe" if own else LR_FAMILY_PROPOSER))
    return records


def law(tokens: float) -> float:
    return float(30.0 * tokens ** -0.3 + 1.5)


def test_each_budget_counts_its_best_rate_averaged_over_seeds() -> None:
    records = ladder({20: {0.004: [4.4, 4.6], 0.008: [4.3, 4.7]},
                      200: {0.004: [3.6, 3.8], 0.002: [3.5, 3.6]}})
    best = best_by_budget(records, "p0001")
    assert best[20] == pytest.approx(4.5) and best[200] == pytest.approx(3.55)
    assert best_by_budget(records, "p0009") == {}


def test_the_ends_of_three_horizons_place_the_data_term_and_carry_it_further() -> None:
    per_step = 512.0
    records = ladder({budget: {0.004: [law(budget * per_step) + 0.2],
                               0.008: [law(budget * per_step)]} for budget in (20, 60, 200)})
    term = horizons(records, "p0001", per_step)
    assert term is not None and [seen for seen, _ in term.points] == [10_240, 30_720, 102_400]
    start, end = 102_400, 512_000
    assert term.change(start, end) == pytest.approx(law(end) - law(start), rel=0.05)
    assert term.change(start, end) < 0 < term.change(start, 10_240)
    again = Horizons.from_json(json.loads(json.dumps(term.to_json())))
    assert again == term
    assert "best at each horizon of the ladder" in term.describe()


def test_fewer_than_three_horizons_or_ends_that_do_not_fall_give_no_data_term() -> None:
    two = ladder({20: {0.004: [4.4], 0.008: [4.5]}, 200: {0.004: [3.6], 0.008: [3.7]}})
    assert horizons(two, "p0001", 512.0) is None
    flat = ladder({budget: {0.004: [3.6], 0.008: [3.7]} for budget in (20, 60, 200)})
    assert horizons(flat, "p0001", 512.0) is None


def test_ends_that_have_not_bent_hold_the_floor_at_zero_and_say_so() -> None:
    """A fall that grows per decade is steeper than any power law with a floor at or above 0."""
    records = ladder({budget: {0.004: [value], 0.008: [value + 0.1]}
                      for budget, value in ((20, 4.4), (200, 3.6), (2000, 2.4))})
    term = horizons(records, "p0001", 512.0)
    assert term is not None and term.fit.bounded and term.fit.c == 0
    assert "floor held at 0" in term.describe()
