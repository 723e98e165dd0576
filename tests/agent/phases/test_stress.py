"""Stress verdicts, judged on constructed loss and grad-norm curves."""

from __future__ import annotations

import math

import pytest

from recipelab.agent.phases.stress import judge_stress
from recipelab.trajectory.ledger import mid_ranked


def curve(losses: list[float], grads: list[float] | None = None) -> list[dict[str, float]]:
    grads = grads or [1.0] * len(losses)
    return [{"step": 50 * (i + 1), "loss": loss, "grad_norm": grad, "lr": 1e-3}
            for i, (loss, grad) in enumerate(zip(losses, grads, strict=True))]


def decaying(n: int = 20, start: float = 4.0, end: float = 2.0) -> list[float]:
    return [end + (start - end) * math.exp(-i / 6) for i in range(n)]


def test_a_loss_that_keeps_falling_with_calm_gradients_is_stable() -> None:
    assert judge_stress(curve(decaying())).verdict == "stable"


def test_a_loss_that_blows_up_late_is_diverged_and_the_step_is_named() -> None:
    losses = decaying()
    losses[15] = 9.0
    verdict = judge_stress(curve(losses))
    assert verdict.verdict == "diverged" and "step 800" in verdict.explanation


def test_a_nan_loss_is_diverged() -> None:
    losses = decaying()
    losses[-1] = math.nan
    assert judge_stress(curve(losses)).verdict == "diverged"


@pytest.mark.parametrize("reason", ["nan", "diverged"])
def test_a_run_that_failed_with_a_numeric_blowup_is_diverged(reason: str) -> None:
    assert judge_stress(curve(decaying()[:3]), failure=reason).verdict == "diverged"


def test_a_run_with_no_recorded_loss_is_diverged() -> None:
    assert judge_stress([]).verdict == "diverged"


def test_a_loss_that_stops_improving_over_the_last_quarter_is_flat() -> None:
    losses = decaying(10) + [2.05] * 10
    verdict = judge_stress(curve(losses))
    assert verdict.verdict == "flat" and "last" in verdict.explanation


def test_a_grad_norm_far_above_its_running_median_is_a_spike() -> None:
    grads = [1.0] * 20
    grads[12] = 25.0
    verdict = judge_stress(curve(decaying(), grads))
    assert verdict.verdict == "grad-spike" and "step 650" in verdict.explanation


def test_an_early_grad_norm_without_history_is_not_called_a_spike() -> None:
    grads = [30.0, 1.0] + [1.0] * 18
    assert judge_stress(curve(decaying(), grads)).verdict == "stable"


@pytest.mark.parametrize(("n", "k", "picked"), [
    (10, 3, [1, 5, 8]), (4, 2, [1, 3]), (5, 1, [2]), (2, 5, [0, 1]), (7, 0, [])])
def test_mid_ranked_picks_spread_evenly_over_the_ranking(n: int, k: int, picked: list[int]) -> None:
    assert mid_ranked(list(range(n)), k) == picked
