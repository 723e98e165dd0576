"""The cloud recommendation: the winner on the target's shape, its token budget and cost."""

from __future__ import annotations

import math
from typing import Any

import pytest

from recipelab.report.context import CloudRates
from recipelab.report.recommend import recommend, scale_to_target
from recipelab.targets import get_target, proxy_recipe
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord

BASELINE = proxy_recipe("tiny")


def proxy(trial_id: str, val_bpb: float, edit: dict[str, Any]) -> TrialRecord:
    recipe = BASELINE.apply(edit)
    return TrialRecord(campaign="c", trial_id=trial_id, status="complete", val_bpb=val_bpb,
                       edit=edit, recipe=recipe.model_dump(mode="json"))


def stress(parent: str, verdict: str, losses: list[float]) -> TrialRecord:
    curve = [{"step": 10 * (i + 1), "loss": v, "grad_norm": 1.0, "lr": 1e-3} for i, v in enumerate(losses)]
    return TrialRecord(campaign="c", trial_id=f"s-{parent}", kind="stress", status="complete",
                       parent=parent, verdict=verdict, curve=curve,
                       recipe=BASELINE.model_dump(mode="json"))


FALLING = [4.0, 3.4, 3.1, 2.95, 2.85, 2.8]
RECORDS = [proxy("p0000", 4.7, {}), proxy("p0001", 4.5, {"optimizer.lr": 0.03}),
           proxy("p0002", 4.6, {"optimizer.weight_decay": 0.0, "schedule.kind": "linear",
                                "shape.qk_norm": True}),
           stress("p0001", "diverged", FALLING), stress("p0002", "stable", FALLING)]


def test_the_winner_is_the_best_trial_whose_stress_run_stayed_stable() -> None:
    winner, because = Ledger(RECORDS).recommended or (None, "")
    assert winner is not None and winner.trial_id == "p0002" and "stable" in because


def test_without_a_stable_stress_run_the_best_proxy_trial_wins_provisionally() -> None:
    winner, because = Ledger(RECORDS[:3]).recommended or (None, "")
    assert winner is not None and winner.trial_id == "p0001" and "provisional" in because
    assert Ledger([]).recommended is None


def test_the_winning_knobs_go_onto_the_target_shape() -> None:
    target = get_target("llama3.2-1b")
    winner = BASELINE.apply({"optimizer.weight_decay": 0.0, "schedule.kind": "linear",
                             "stability.z_loss": 1e-4})
    recipe = scale_to_target(winner, {"shape.qk_norm": True, "optimizer.weight_decay": 0.0}, target,
                             tokens=10_000_000)
    assert recipe.shape == target.shape.model_copy(update={"qk_norm": True})
    assert recipe.optimizer == winner.optimizer and recipe.schedule.kind == "linear"
    assert recipe.stability == winner.stability
    assert recipe.seq_len == target.context and recipe.tokenizer == "bpe"
    assert recipe.steps == math.ceil(10_000_000 / (winner.batch_size * target.context))
    assert recipe.schedule.warmup_steps == round(winner.schedule.warmup_steps / winner.steps * recipe.steps)


def test_the_budget_is_chinchilla_optimal_and_the_cost_follows_from_flops() -> None:
    target = get_target("llama2-7b")
    rates = CloudRates(gpu_peak_flops=1e15, mfu=0.5, usd_per_gpu_hour=2.0, gpus=8)
    found = recommend(Ledger(RECORDS), target, rates)
    assert found is not None
    assert found.tokens == math.ceil(20 * target.params)
    assert found.flops == found.recipe.flops_per_token() * found.tokens
    assert found.gpu_hours == pytest.approx(found.flops / 5e14 / 3600)
    assert found.cost_usd == pytest.approx(2.0 * found.gpu_hours)
    assert found.days_on_node == pytest.approx(found.gpu_hours / 8 / 24)
    day_tokens = 5e14 * 8 * 86_400 / found.recipe.flops_per_token()
    assert found.first_day_step == int(day_tokens // found.recipe.tokens_per_step)


def test_each_stress_curve_is_extrapolated_to_the_first_day() -> None:
    found = recommend(Ledger(RECORDS), get_target("llama2-7b"), CloudRates())
    assert found is not None and len(found.extrapolations) == 2
    for e in found.extrapolations:
        assert e.fit is not None and e.first_day_loss is not None
        assert e.first_day_loss < FALLING[-1]  # a falling curve keeps falling, towards c
        assert e.first_day_loss >= e.fit.c

