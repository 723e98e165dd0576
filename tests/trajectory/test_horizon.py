"""The horizon rule: the best learning rate's fall with the tokens trained, fitted only from
one recipe's learning-rate families and shrunk toward the published prior."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from recipelab.targets import proxy_recipe
from recipelab.trajectory.calibration import load_calibration
from recipelab.trajectory.horizon import (
    ALPHA_BOUNDS,
    PRIOR_ALPHA,
    PRIOR_RULE,
    HorizonFit,
    best_log_lr,
    best_rate,
    fit_alpha,
    horizon_rule,
)
from recipelab.trajectory.ledger import LR_FAMILY_PROPOSER
from recipelab.trajectory.record import TrialRecord

BASE = proxy_recipe("tiny")
PROXY_STEPS, RUNG_STEPS = 60, 240
LRS = (1e-3, 3e-3, 1e-2, 3e-2)
FAMILY = (0.5, 1.0, 2.0)


def bowl(lr: float, best: float) -> float:
    """A val_bpb that is lowest at ``best`` and rises with the square of the log distance."""
    return 3.0 + 0.1 * math.log(lr / best) ** 2


def trial(campaign: str, trial_id: str, lr: float, steps: int, val_bpb: float, *,
          kind: str = "proxy", parent: str | None = None, proposer: str = "classical-tpe",
          seed: int = 0) -> TrialRecord:
    recipe = BASE.apply({"optimizer.lr": lr, "steps": steps, "seed": seed})
    return TrialRecord(campaign=campaign, trial_id=trial_id, kind=kind, status="complete",
                       val_bpb=val_bpb, recipe=recipe.model_dump(mode="json"),
                       fingerprint=recipe.fingerprint(), proposer=proposer, parent=parent,
                       budget=steps, edit={"optimizer.lr": lr})


def baseline_family(name: str, best: dict[int, float], lr: float = 1e-2) -> list[TrialRecord]:
    """The baseline p0000 at ``lr``, and at each budget of ``best`` its run and its family at
    lr × {½, 2}, each scored on a bowl around that budget's best rate."""
    records = [trial(name, "p0000", lr, PROXY_STEPS, bowl(lr, best[PROXY_STEPS]),
                     proposer="baseline")]
    for steps, at in best.items():
        for m in FAMILY:
            if steps == PROXY_STEPS and m == 1.0:
                continue  # the proxy itself
            family = m != 1.0
            records.append(trial(name, f"r{steps}-{m:g}", lr * m, steps, bowl(lr * m, at),
                                 kind="rung", parent="p0000",
                                 proposer=LR_FAMILY_PROPOSER if family else "baseline"))
    return records


def test_the_best_learning_rate_is_the_minimum_of_a_quadratic_in_log_lr() -> None:
    points = [(lr, bowl(lr, 4e-3)) for lr in LRS]
    assert best_log_lr(points) == pytest.approx(math.log(4e-3))


def test_no_best_learning_rate_from_two_rates_or_a_curve_without_a_minimum() -> None:
    assert best_log_lr([(1e-3, 3.0), (1e-2, 2.9)]) is None
    assert best_log_lr([(lr, -bowl(lr, 4e-3)) for lr in LRS]) is None


def test_the_best_learning_rate_stays_within_the_rates_measured() -> None:
    assert best_log_lr([(lr, bowl(lr, 1.0)) for lr in LRS]) == pytest.approx(math.log(max(LRS)))


def test_a_familys_best_rate_says_whether_it_is_the_edge() -> None:
    """What the transfer bench anchors at: inside the family, the quadratic's minimum; at
    its lowest rate with no minimum, that rate, flagged as the edge."""
    inside = best_rate([(0.5, 2.1), (1.0, 2.0), (2.0, 2.1)])
    assert inside is not None and inside[0] == pytest.approx(1.0) and not inside[1]
    edge = best_rate([(0.5, 1.9), (1.0, 2.0), (2.0, 2.05)])
    assert edge is not None and edge[0] == pytest.approx(0.5) and edge[1]
    assert best_rate([(0.5, 1.9), (1.0, 2.0)]) is None


def test_alpha_is_the_fall_of_one_recipes_best_log_lr_per_log_budget() -> None:
    """The baseline's best rate falls by √2 over a 4x budget: alpha = ln √2 / ln 4 = 0.25,
    each best rate placed to half the family's step."""
    fit = fit_alpha(baseline_family("c", {PROXY_STEPS: 1e-2, RUNG_STEPS: 1e-2 / math.sqrt(2)}))
    assert fit is not None and fit.alpha == pytest.approx(0.25)
    assert fit.se == pytest.approx(math.log(2) / 2 * math.sqrt(2) / math.log(4))


def test_runs_of_different_recipes_make_no_fit() -> None:
    """Proxies that differ in other knobs than the rate are not a learning-rate family,
    however well their val_bpb lines up against their rates."""
    proxies = [trial("c", f"p{i:04d}", lr, PROXY_STEPS, bowl(lr, 1e-2)) for i, lr in enumerate(LRS)]
    rungs = [trial("c", f"r{i:04d}", lr, RUNG_STEPS, bowl(lr, 5e-3), kind="rung",
                   parent=f"p{i:04d}") for i, lr in enumerate(LRS)]
    assert fit_alpha(proxies + rungs) is None


def test_proxies_parented_on_the_baseline_are_not_in_its_family() -> None:
    """A campaign parents every proposal on the baseline: those proxies share its budget and
    seed but are other recipes, so they leave its family's best rate where it is."""
    records = baseline_family("c", {PROXY_STEPS: 1e-2, RUNG_STEPS: 1e-2 / math.sqrt(2)})
    proposals = [trial("c", f"p{i + 1:04d}", lr, PROXY_STEPS, bowl(lr, 1e-3), parent="p0000")
                 for i, lr in enumerate(LRS)]
    assert fit_alpha(records + proposals) == fit_alpha(records)


def test_a_family_without_a_minimum_places_its_best_rate_at_its_edge() -> None:
    """Three rates falling toward the lowest say the best rate is there or beyond: a point at
    the edge, weighted as one."""
    records = baseline_family("c", {PROXY_STEPS: 1e-2, RUNG_STEPS: 1e-2 / math.sqrt(2)})
    inside = fit_alpha(records)
    assert inside is not None
    curves: dict[str, Callable[[float], float]] = {
        "convex": lambda lr: 3.0 + 10 * lr ** 0.5,  # a minimum below the rates
        "concave": lambda lr: 3.0 - 0.1 * math.log(0.02 / lr) ** 2}  # no minimum
    for name, curve in curves.items():
        falling = [r.model_copy(update={"val_bpb": curve(r.recipe["optimizer"]["lr"])})
                   if r.budget_steps == RUNG_STEPS else r for r in records]
        fit = fit_alpha(falling)
        assert fit is not None and fit.alpha == pytest.approx(0.5), name  # 5e-3 over 4x
        assert fit.se > inside.se, name


def test_one_budget_makes_no_fit() -> None:
    assert fit_alpha(baseline_family("c", {PROXY_STEPS: 1e-2})) is None


def test_a_family_run_at_another_seed_is_still_part_of_the_family() -> None:
    """The top rung trains the baseline's family at each of its fresh seeds."""
    records = baseline_family("c", {PROXY_STEPS: 1e-2, RUNG_STEPS: 5e-3})
    moved = [r.model_copy(update={"recipe": {**r.recipe, "seed": 1}})
             if r.trial_id == "r240-0.5" else r for r in records]
    fit = fit_alpha(moved)
    assert fit is not None and fit.alpha == pytest.approx(0.5)
    assert fit_alpha([r for r in records if r.trial_id != "r240-0.5"]) is None, (
        "240 keeps two rates without it: no quadratic there")


def test_a_minimum_at_the_familys_edge_counts_for_less() -> None:
    inside = fit_alpha(baseline_family("c", {PROXY_STEPS: 1e-2, RUNG_STEPS: 7e-3}))
    edge = fit_alpha(baseline_family("c", {PROXY_STEPS: 1e-2, RUNG_STEPS: 1e-3}))
    assert inside is not None and edge is not None and edge.se > inside.se


def test_without_any_fit_the_rule_is_the_published_prior_and_says_so() -> None:
    rule = horizon_rule([])
    assert rule == PRIOR_RULE and rule.source == "prior" and rule.alpha == PRIOR_ALPHA == 0.32
    assert rule.interval == pytest.approx((0.32 - 0.1645, 0.32 + 0.1645), abs=1e-3)
    assert rule.factor(60, 1000) == pytest.approx((1000 / 60) ** -0.32)
    assert "Bjorck" in rule.describe() and "arXiv 2409.19913" in rule.describe()


def test_a_loose_fit_moves_the_prior_a_little_and_tight_fits_move_it_far() -> None:
    """One short ladder places alpha to about ±0.3: it moves the prior by a tenth of the
    way. Many campaigns agreeing move it most of the way."""
    own = baseline_family("c", {PROXY_STEPS: 1e-2, RUNG_STEPS: 5e-3})
    one = horizon_rule(own)
    assert one.source == "fitted" and one.fits == 1
    assert PRIOR_ALPHA < one.alpha < PRIOR_ALPHA + 0.05
    many = horizon_rule(own, prior_fits=[HorizonFit(0.5, 0.05)] * 4)
    assert 0.48 < many.alpha < 0.5 and many.sd < one.sd


def test_the_rule_is_bounded_to_what_the_literature_reports() -> None:
    low, high = ALPHA_BOUNDS
    assert horizon_rule([], prior_fits=[HorizonFit(1.5, 0.01)]).alpha == high
    assert horizon_rule([], prior_fits=[HorizonFit(-0.4, 0.01)]).alpha == low
    assert horizon_rule([], prior_fits=[HorizonFit(1.5, 0.01)]).interval[1] == high


def test_the_rule_describes_its_interval() -> None:
    rule = horizon_rule([], prior_fits=[HorizonFit(0.4, 0.1)])
    low, high = rule.interval
    assert low < rule.alpha < high
    assert f"[{low:.3f}, {high:.3f}]" in rule.describe() and "1 fit(s)" in rule.describe()


def test_the_rule_is_tight_only_when_its_deviation_is_small() -> None:
    assert not horizon_rule([]).tight
    assert not horizon_rule(baseline_family("c", {PROXY_STEPS: 1e-2, RUNG_STEPS: 5e-3})).tight
    assert horizon_rule([], prior_fits=[HorizonFit(0.3, 0.05)] * 3).tight


def test_each_calibration_campaign_brings_its_own_fit(tmp_path: Path) -> None:
    path = tmp_path / "trajectory.jsonl"
    records = (baseline_family("a", {PROXY_STEPS: 1e-2, RUNG_STEPS: 5e-3})
               + baseline_family("b", {PROXY_STEPS: 1e-2, RUNG_STEPS: 1e-2}))
    path.write_text("".join(r.to_json_line() + "\n" for r in records))
    fits = load_calibration([path]).horizon_fits
    assert [f.alpha for f in fits] == pytest.approx([0.5, 0.0], abs=1e-9)
