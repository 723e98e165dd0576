"""time: the trial-time prediction from measured throughput, and the check against the timeout."""

from __future__ import annotations

from dataclasses import replace

import pytest

from recipelab.guardrails import check_time, predict_trial_seconds
from tests.guardrails.factories import BASELINE, context, measured

TRIALS = (measured(BASELINE, tokens_per_s=5_000.0, overhead_s=3.0),)


def test_no_measurements_no_prediction_and_the_check_passes() -> None:
    assert predict_trial_seconds(BASELINE, ()) is None
    assert check_time(BASELINE, context(timeout_s=0.001)) == []


def test_a_measured_recipe_is_predicted_at_its_measured_wall_time() -> None:
    assert predict_trial_seconds(BASELINE, TRIALS) == pytest.approx(TRIALS[0].wall_s)


def test_training_time_scales_linearly_with_steps_and_overhead_stays() -> None:
    def training_seconds(steps: int) -> float:
        predicted = predict_trial_seconds(BASELINE.apply({"steps": steps}), TRIALS)
        assert predicted is not None
        return predicted - 3.0

    assert training_seconds(200) == pytest.approx(10 * training_seconds(20))
    assert training_seconds(1000) == pytest.approx(50 * training_seconds(20))


def test_the_median_throughput_of_several_trials_is_used() -> None:
    trials = tuple(measured(BASELINE, tokens_per_s=r) for r in (1_000.0, 4_000.0, 1e9))
    assert predict_trial_seconds(BASELINE, trials) == pytest.approx(
        BASELINE.steps * BASELINE.tokens_per_step / 4_000.0)


def test_failed_measurements_without_throughput_are_ignored() -> None:
    broken = replace(measured(BASELINE), tokens_per_s=0.0)
    assert predict_trial_seconds(BASELINE, (broken,)) is None


def test_a_trial_predicted_past_the_timeout_is_rejected_with_both_numbers() -> None:
    predicted = predict_trial_seconds(BASELINE, TRIALS)
    assert predicted is not None
    (reason,) = check_time(BASELINE, context(measurements=TRIALS, timeout_s=predicted / 2))
    assert reason.startswith(f"predicted trial time {predicted:,.1f} s")
    assert f"exceeds the per-trial timeout of {predicted / 2:,.1f} s" in reason
    assert check_time(BASELINE, context(measurements=TRIALS, timeout_s=predicted * 2)) == []
    assert check_time(BASELINE, context(measurements=TRIALS)) == []
