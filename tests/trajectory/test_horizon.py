"""The horizon rule: the best learning rate's fall from the proxy to the rung, per log step."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from recipelab.recipe import proxy_recipe
from recipelab.trajectory.calibration import load_calibration
from recipelab.trajectory.horizon import PRIOR_RULE, best_log_lr, fit_alpha, horizon_rule
from recipelab.trajectory.record import TrialRecord

BASE = proxy_recipe("tiny")
PROXY_STEPS, RUNG_STEPS = 60, 240
LRS = (1e-3, 3e-3, 1e-2, 3e-2)


def bowl(lr: float, best: float) -> float:
    """A val_bpb that is lowest at ``best`` and rises with the square of the log distance."""
    return 3.0 + 0.1 * math.log(lr / best) ** 2


def trial(campaign: str, trial_id: str, lr: float, steps: int, val_bpb: float,
          kind: str = "proxy") -> TrialRecord:
    recipe = BASE.apply({"optimizer.lr": lr, "steps": steps})
    return TrialRecord(campaign=campaign, trial_id=trial_id, kind=kind, status="complete",
                       val_bpb=val_bpb, recipe=recipe.model_dump(mode="json"),
                       fingerprint=recipe.fingerprint(), proposer="classical-tpe",
                       edit={"optimizer.lr": lr})


def campaign(name: str, best_at_proxy: float, best_at_rung: float) -> list[TrialRecord]:
    proxies = [trial(name, f"p{i:04d}", lr, PROXY_STEPS, bowl(lr, best_at_proxy))
               for i, lr in enumerate(LRS)]
    rungs = [trial(name, f"r{i:04d}", lr, RUNG_STEPS, bowl(lr, best_at_rung), kind="rung")
             for i, lr in enumerate(LRS)]
    return proxies + rungs


def test_the_best_learning_rate_is_the_minimum_of_a_quadratic_in_log_lr() -> None:
    points = [(lr, bowl(lr, 4e-3)) for lr in LRS]
    assert best_log_lr(points) == pytest.approx(math.log(4e-3))


def test_no_best_learning_rate_from_two_rates_or_a_curve_without_a_minimum() -> None:
    assert best_log_lr([(1e-3, 3.0), (1e-2, 2.9)]) is None
    assert best_log_lr([(lr, -bowl(lr, 4e-3)) for lr in LRS]) is None


def test_the_best_learning_rate_stays_within_the_rates_measured() -> None:
    assert best_log_lr([(lr, bowl(lr, 1.0)) for lr in LRS]) == pytest.approx(math.log(max(LRS)))


def test_alpha_is_the_fall_of_the_best_log_lr_per_log_step() -> None:
    """Halving the best rate over a 4x longer run is alpha = ln 2 / ln 4 = 0.5."""
    assert fit_alpha(campaign("c", 1e-2, 5e-3)) == pytest.approx(0.5)


def test_alpha_is_clamped_to_zero_and_one() -> None:
    assert fit_alpha(campaign("c", 5e-3, 1e-2)) == 0.0
    assert fit_alpha(campaign("c", 3e-2, 1e-3)) == 1.0


def test_no_fit_without_rung_runs_or_with_too_few_rates() -> None:
    records = campaign("c", 1e-2, 5e-3)
    assert fit_alpha([r for r in records if r.kind == "proxy"]) is None
    assert fit_alpha([r for r in records if r.trial_id not in ("r0000", "r0001")]) is None


def test_the_rule_is_the_mean_of_this_campaigns_fit_and_the_calibrations() -> None:
    rule = horizon_rule(campaign("c", 1e-2, 5e-3), prior_fits=[0.1])
    assert rule.alpha == pytest.approx(0.3) and rule.fits == 2
    assert rule.factor(60, 240) == pytest.approx(4 ** -0.3)


def test_without_any_fit_the_rule_is_the_published_prior_and_says_so() -> None:
    """DeepSeek LLM's lr_opt ∝ C^-0.125, with the model and batch fixed: lr ∝ steps^-0.125."""
    rule = horizon_rule([])
    assert rule == PRIOR_RULE and rule.source == "prior" and rule.alpha == 0.125
    assert rule.factor(60, 1000) == pytest.approx((1000 / 60) ** -0.125)
    assert "DeepSeek LLM" in rule.describe() and "arXiv 2401.02954" in rule.describe()


def test_a_fit_replaces_the_prior() -> None:
    rule = horizon_rule(campaign("c", 1e-2, 5e-3))
    assert rule.source == "fitted" and rule.alpha == pytest.approx(0.5)


def test_three_horizons_fit_one_slope_through_every_best_rate() -> None:
    """The ladder measures the learning-rate family at each rung: the best rate halves per
    4x steps at 60 -> 240 -> 960, so alpha is 0.5 through all three."""
    records = campaign("c", 1e-2, 5e-3) + [
        trial("c", f"q{i:04d}", lr, RUNG_STEPS * 4, bowl(lr, 2.5e-3), kind="rung")
        for i, lr in enumerate(LRS)]
    assert fit_alpha(records) == pytest.approx(0.5)


def test_the_rule_is_tight_only_when_several_fits_agree() -> None:
    assert not horizon_rule([]).tight
    assert not horizon_rule(campaign("c", 1e-2, 5e-3)).tight  # one fit
    assert horizon_rule(campaign("c", 1e-2, 5e-3), prior_fits=[0.45]).tight
    assert not horizon_rule(campaign("c", 1e-2, 5e-3), prior_fits=[0.1]).tight


def test_each_calibration_campaign_brings_its_own_fit(tmp_path: Path) -> None:
    path = tmp_path / "trajectory.jsonl"
    records = campaign("a", 1e-2, 5e-3) + campaign("b", 1e-2, 1e-2)
    path.write_text("".join(r.to_json_line() + "\n" for r in records))
    assert load_calibration([path]).horizon_fits == pytest.approx((0.5, 0.0))
