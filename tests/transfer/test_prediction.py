"""The prediction of the target's val_bpb: the proxy's curve in bytes of text, moved by a
model-size term (the width rung's measured gap, else a published law's ratio), written by
``export`` and read back by ``verify``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from recipelab.recipe import BASELINE_PROPOSER, Recipe, non_embedding_params
from recipelab.targets import get_target, proxy_recipe
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.ledger import LR_FAMILY_PROPOSER, Ledger
from recipelab.trajectory.record import TrialRecord
from recipelab.transfer.horizons import Horizons
from recipelab.transfer.law_band import law_band
from recipelab.transfer.powerlaw import PowerLaw
from recipelab.transfer.prediction import (
    Prediction,
    SizeTerm,
    TunedLevel,
    predict,
    size_law_loss,
    tuned_level,
)
from recipelab.transfer.width import SizeGap, WideLevel

from .test_width import width_run


def test_the_size_term_is_one_for_the_proxy_and_below_one_for_a_larger_target() -> None:
    assert SizeTerm(100_000, 100_000).factor(1e6) == 1.0
    assert SizeTerm(100_000, 6_000_000).factor(1e6) < 1.0
    assert SizeTerm(6_000_000, 100_000).factor(1e6) > 1.0
    assert size_law_loss(1e6, 1e9) < size_law_loss(1e5, 1e9) < size_law_loss(1e5, 1e8)


def test_a_data_limited_target_gains_little_and_one_with_data_to_spare_gains_more() -> None:
    """At 5 bytes per parameter a 63× larger model is nearly as data-limited as the proxy; at
    a Chinchilla budget for the larger model the gap is several percent."""
    term = SizeTerm(92_416, 5_804_032)
    data_limited = 1 - term.factor(500_000)
    with_data = 1 - term.factor(20 * 4 * 5_804_032)
    assert 0 < data_limited < 0.01 < with_data


def test_a_prediction_read_back_from_its_json_predicts_the_same_curve(
        finished_campaign: Path) -> None:
    with TrajectoryStore(finished_campaign, "nightly", readonly=True) as store:
        records = store.records()
    chosen = Ledger(records).recommended
    assert chosen is not None
    target = get_target("toy").shape
    prediction = predict(records, chosen[0], target)
    source = next(r for r in records if r.trial_id == prediction.source_trial)
    proxy = Recipe.model_validate(source.recipe).shape
    assert prediction.size == SizeTerm(non_embedding_params(proxy), non_embedding_params(target))
    again = Prediction.from_json(json.loads(json.dumps(prediction.to_json())))
    for seen in (0.5, 1.0, 10.0, 1000.0):
        at = seen * prediction.last_bytes
        assert again.center(at) == pytest.approx(prediction.center(at))
        assert again.half_width(at) == pytest.approx(prediction.half_width(at))
    assert prediction.center(prediction.last_bytes) < predict(records, chosen[0]).center(
        prediction.last_bytes), "the larger target is predicted below the proxy's own curve"



def test_a_width_rung_replaces_the_laws_ratio_by_its_measured_gap() -> None:
    """The proxy's curve (flat here: no fit) less the gap the two widths put between the
    proxy's size and the target's, at every point; the law's ratio only without them."""
    size = SizeTerm(92_416, 5_804_032)
    gap = SizeGap(92_416, 3.64, 713_728, 3.56, ("w0000", "w0001"))
    common: dict[str, Any] = dict(source_trial="s0002", fit=None, last_bytes=1e5,
                                  last_val_bpb=3.2, band_base=0.05, noise_spread=0.05,
                                  fit_rmse_bpb=None, rank_agreement=None, rank_pairs=0, size=size)
    measured, by_law = Prediction(**common, measured_size=gap), Prediction(**common)
    for seen in (1e4, 1e5, 1e7):
        assert measured.center(seen) == pytest.approx(3.2 - gap.lowering(92_416, 5_804_032))
        assert by_law.center(seen) == pytest.approx(3.2 * size.factor(seen))
    assert measured.center(1e5) < by_law.center(1e5)
    assert "from the width rung" in measured.describe_size()
    assert "no width rung" in by_law.describe_size()
    again = Prediction.from_json(json.loads(json.dumps(measured.to_json())))
    assert again.measured_size == gap and again.center(1e6) == pytest.approx(measured.center(1e6))
    # a wider run that scored no better measured no gap: the law's ratio stays, and says why
    unmeasured = Prediction(**common, measured_size=SizeGap(92_416, 3.56, 713_728, 3.64,
                                                            ("w0000", "w0001")))
    assert unmeasured.center(1e5) == by_law.center(1e5)
    assert "measured no gap" in unmeasured.describe_size()


def test_a_fit_held_at_a_floor_of_zero_says_so_and_its_band_reaches_the_flat_curve() -> None:
    """Beyond the fitted range a fit without a physical floor is no better than the curve
    stopping where it was measured: the band spans both, and the prediction says why."""
    common: dict[str, Any] = dict(source_trial="s0002", last_bytes=1e5, last_val_bpb=3.0,
                                  band_base=0.05, noise_spread=0.05, fit_rmse_bpb=0.01,
                                  rank_agreement=None, rank_pairs=0,
                                  size=SizeTerm(92_416, 5_804_032))
    held = Prediction(**common, fit=PowerLaw(a=30.0, b=0.2, c=0.0, rmse=0.01, points=20,
                                             bounded=True))
    floored = Prediction(**common, fit=PowerLaw(a=30.0, b=0.2, c=0.0, rmse=0.01, points=20))
    far = 1e8
    fitted, flat = floored.center(far), held.held(far)
    assert fitted < flat
    assert held.center(far) == pytest.approx((fitted + flat) / 2)
    assert held.center(far) - held.half_width(far) == pytest.approx(fitted)
    assert held.center(far) + held.half_width(far) == pytest.approx(flat)
    assert floored.half_width(far) < held.half_width(far)
    for inside in (5e4, 1e5):  # within the curve nothing changes
        assert held.center(inside) == floored.center(inside)
        assert held.half_width(inside) == floored.half_width(inside)
    assert held.unphysical and "floor below 0" in held.unphysical
    assert floored.unphysical is None
    assert any(a.startswith("not physical:") for a in held.assumptions())
    again = Prediction.from_json(json.loads(json.dumps(held.to_json())))
    assert again.half_width(far) == pytest.approx(held.half_width(far))
    level = Prediction(**common, fit=PowerLaw(a=0.0, b=0.5, c=3.0, rmse=0.01, points=20))
    assert level.unphysical and "does not fall" in level.unphysical


def _top_rung(stress_at: float, family: dict[float, float], seeds: int = 2) -> list[TrialRecord]:
    """The winner p0001 at 20 steps, its stress runs at 200 steps (a falling curve ending at
    ``stress_at``) and its top-rung family at the stress rate × each multiple of ``family``,
    every rate at ``seeds`` seeds."""
    base = proxy_recipe("tiny")

    def run(trial_id: str, kind: str, lr: float, steps: int, seed: int, value: float,
            proposer: str = "classical-tpe") -> TrialRecord:
        recipe = base.apply({"optimizer.lr": lr, "steps": steps, "seed": seed})
        curve = [{"step": s, "loss": value * 1.4 * (s / steps) ** -0.2}
                 for s in range(20, steps + 1, 20)]
        return TrialRecord(campaign="c", trial_id=trial_id, kind=kind, status="complete",
                           val_bpb=value, recipe=recipe.model_dump(mode="json"),
                           fingerprint=recipe.fingerprint(), proposer=proposer,
                           parent=None if kind == "proxy" else "p0001", budget=steps,
                           curve=curve if kind != "proxy" else [])
    records = [run("p0001", "proxy", 0.01, 20, 0, 4.0)]
    records += [run(f"s{seed}", "stress", 0.004, 200, seed, stress_at) for seed in range(seeds)]
    records += [run(f"r{m:g}-{seed}", "rung", 0.004 * m, 200, seed, value, LR_FAMILY_PROPOSER)
                for m, value in family.items() for seed in range(seeds)]
    return records


def test_the_curve_is_moved_to_the_level_of_its_familys_best_rate() -> None:
    """The export sets the target's rate afresh, so a stress run at a rate its own family beat
    would carry the proxy's mistuning into the prediction: the curve ends at the family's best
    (bench/transfer.py: the baseline's prediction 12.6-26.6% high, 3.8-21.7% from the best)."""
    records = _top_rung(stress_at=3.6, family={0.5: 3.4, 2.0: 3.8})
    winner = records[0]
    prediction = predict(records, winner, get_target("toy").shape)
    assert prediction.tuned == TunedLevel(3.4, 0.5, 3.6, 2)
    assert prediction.last_val_bpb == pytest.approx(3.4)
    assert prediction.proxy_center(prediction.last_bytes) == pytest.approx(3.4)
    assert any(a.startswith("level: the recipe at 0.5× the stress run's rate")
               for a in prediction.assumptions())
    again = Prediction.from_json(json.loads(json.dumps(prediction.to_json())))
    assert again.tuned == prediction.tuned


def test_a_stress_run_at_its_familys_best_rate_keeps_its_own_level() -> None:
    records = _top_rung(stress_at=3.4, family={0.5: 3.5, 2.0: 3.8})
    assert tuned_level(records, "p0001", records[1]) is None
    prediction = predict(records, records[0])
    assert prediction.tuned is None and prediction.last_val_bpb == pytest.approx(3.4)
    assert any(a.startswith("level: the stress run's measured val_bpb")
               for a in prediction.assumptions())
    assert tuned_level(records[:3], "p0001", records[1]) is None, "no family, no level"


def test_the_size_term_is_the_exported_recipes_own_gap_else_the_recommendations() -> None:
    """The width rung trains the baseline at both widths beside the winner: an export of the
    baseline (``--trial p0000``, or a kept baseline) predicts with its own gap; a recipe the
    rung did not train, with the recommendation's."""
    records = _top_rung(stress_at=3.6, family={})
    records += [width_run(f"w000{i}", multiple, value, parent=parent, control=parent == "p0000")
                for i, (multiple, value, parent) in enumerate(
                    ((1, 3.7, "p0001"), (2, 3.5, "p0001"), (1, 3.9, "p0000"), (2, 3.4, "p0000")))]
    target = get_target("toy").shape
    gap = predict(records, records[0], target).measured_size
    assert gap is not None and gap.runs == ("w0000", "w0001")
    baseline = records[0].model_copy(update={"trial_id": "p0000"})
    gap = predict(records, baseline, target).measured_size
    assert gap is not None and gap.runs == ("w0002", "w0003")
    other = records[0].model_copy(update={"trial_id": "p0005"})
    gap = predict(records, other, target).measured_size
    assert gap is not None and gap.runs == ("w0000", "w0001")


def test_with_the_wider_model_and_the_horizons_the_prediction_starts_from_the_wider_model() -> None:
    """L(N, D) = E + A·N^-α + B·D^-β, each term from what the campaign measured closest to
    the target: the level from the width rung's wider model (the target's context and rules),
    the data term through the ladder's horizons, the size term from the wider model's size
    (bench/transfer.py: 5 of 6 arms within 5%, where the proxy's stress curve had 2 of 6)."""
    size = SizeTerm(92_416, 5_804_032)
    gap = SizeGap(92_416, 3.64, 713_728, 3.44, ("w0000", "w0001"), 2)
    wide = WideLevel(713_728, 3.40, 2.0, 1e5, "w0005")
    data_term = Horizons(((1e4, 4.4), (3e4, 4.0), (1e5, 3.6)),
                         PowerLaw(a=30.0, b=0.2, c=0.5, rmse=0.0, points=3))
    common: dict[str, Any] = dict(source_trial="s0002", fit=None, last_bytes=1e5,
                                  last_val_bpb=3.6, band_base=0.05, noise_spread=0.05,
                                  fit_rmse_bpb=None, rank_agreement=None, rank_pairs=0, size=size,
                                  measured_size=gap)
    prediction = Prediction(**common, horizons=data_term, wide=wide)
    assert prediction.from_wide
    for seen in (5e4, 1e5, 5e5):
        assert prediction.center(seen) == pytest.approx(
            3.40 + data_term.fit(seen) - data_term.fit(1e5) - gap.lowering(713_728, 5_804_032))
    assert prediction.center(5e5) < prediction.center(1e5) < prediction.center(5e4)
    assert prediction.assumptions()[0].startswith("level: the recipe at 713,728")
    again = Prediction.from_json(json.loads(json.dumps(prediction.to_json())))
    assert again.from_wide and again.center(5e5) == pytest.approx(prediction.center(5e5))
    no_gap = replace(gap, wide_val_bpb=3.7)  # the wider model scored worse: no size term
    for partial in (Prediction(**common, horizons=data_term),
                    Prediction(**common, wide=wide),
                    Prediction(**{**common, "measured_size": no_gap}, horizons=data_term,
                               wide=wide)):
        assert not partial.from_wide and partial.center(5e5) == partial.moved(3.6, 5e5)
    assert prediction.floor() == pytest.approx(
        3.40 - (data_term.fit(1e5) - 0.5) - gap.slope * 713_728 ** -0.34)
    assert prediction.floor() > 0
    assert not any(a.startswith("not physical") for a in prediction.assumptions())
    bent = replace(data_term, fit=replace(data_term.fit, c=0.0, bounded=True))
    unbent = Prediction(**common, horizons=bent, wide=wide)
    [said] = [a for a in unbent.assumptions() if a.startswith("not physical")]
    assert "ladder's horizons has not bent" in said and unbent.unphysical is None, (
        "said beside the prediction, not warned: the horizons of a campaign rarely bend")
    steep = replace(data_term, fit=replace(data_term.fit, a=60.0))  # E = L - A·N^-α - B·D^-β < 0
    below = Prediction(**common, horizons=steep, wide=wide)
    [said] = [a for a in below.assumptions() if a.startswith("not physical")]
    assert below.floor() < 0 and "E = L − A·N^-α − B·D^-β" in said and "below 0" in said
    far = 1e13
    assert below.center(far) - below.half_width(far) < 0 == below.band(far)[0]
    assert below.band(far)[1] >= 0
    assert below.band(5e5) == (below.center(5e5) - below.half_width(5e5),
                               below.center(5e5) + below.half_width(5e5))


def test_from_the_wider_model_the_band_is_the_seed_noise_carried_through_the_law() -> None:
    """With the baseline's seed noise measured, the band is the bootstrap's 90%
    (:mod:`recipelab.transfer.law_band`), held at least 2% off the center each side; the
    stress run's fit, which the prediction no longer follows, has no part in it."""
    size = SizeTerm(92_416, 5_804_032)
    gap = SizeGap(92_416, 3.64, 713_728, 3.44, ("w0000", "w0001"), 2)
    wide = WideLevel(713_728, 3.40, 2.0, 1e5, "w0005")
    data_term = Horizons(((1e4, 4.4), (3e4, 4.0), (1e5, 3.6)),
                         PowerLaw(a=30.0, b=0.2, c=0.5, rmse=0.01, points=3))
    stress = PowerLaw(a=9.0, b=0.1, c=0.0, rmse=0.4, points=40)
    prediction = Prediction(source_trial="s0002", fit=stress, last_bytes=2e5, last_val_bpb=3.6,
                            band_base=0.4, noise_spread=0.05, fit_rmse_bpb=0.4,
                            rank_agreement=None, rank_pairs=0, size=size, measured_size=gap,
                            horizons=data_term, wide=wide, seed_sd=0.03)
    for seen in (1e5, 5e5, 5e7):
        low, high = prediction.band(seen)
        drawn = law_band(data_term, wide, gap, size.target_params, 0.03).interval(seen)
        center = prediction.center(seen)
        assert low == pytest.approx(min(drawn[0], 0.98 * center))
        assert high == pytest.approx(max(drawn[1], 1.02 * center))
    assert prediction.band(5e7)[1] - prediction.band(5e7)[0] > (
        prediction.band(5e5)[1] - prediction.band(5e5)[0])
    assert any("redraws" in line and "0.0300" in line for line in prediction.assumptions())
    again = Prediction.from_json(json.loads(json.dumps(prediction.to_json())))
    assert again.band(5e5) == prediction.band(5e5)
    unmeasured = replace(prediction, seed_sd=None)  # one baseline seed: the noise floor's rule
    assert unmeasured.half_width(1e5) == pytest.approx(max(0.05, 0.02 * unmeasured.center(1e5)))
    assert "fit rmse 0.0100" in unmeasured.assumptions()[-1]


def test_predict_reads_the_horizons_and_the_wider_model_from_the_campaign() -> None:
    records = _top_rung(stress_at=3.6, family={0.5: 3.5, 2.0: 3.8})
    base = proxy_recipe("tiny")
    at_60 = base.apply({"optimizer.lr": 0.004, "steps": 60})
    records.append(TrialRecord(campaign="c", trial_id="r60", kind="rung", status="complete",
                               val_bpb=3.9, recipe=at_60.model_dump(mode="json"),
                               parent="p0001", budget=60, proposer=LR_FAMILY_PROPOSER))
    records += [width_run("w0000", 1, 3.7, parent="p0001"),
                width_run("w0001", 2, 3.45, parent="p0001")]
    target = get_target("toy").shape
    assert predict(records, records[0], target).seed_sd is None, "one baseline seed: no noise"
    records += [TrialRecord(campaign="c", trial_id=f"b{seed}", kind="proxy", status="complete",
                            val_bpb=value, recipe=base.apply({"seed": seed}).model_dump(
                                mode="json"), proposer=BASELINE_PROPOSER)
                for seed, value in ((0, 4.0), (1, 4.1))]
    prediction = predict(records, records[0], target)
    assert prediction.seed_sd == pytest.approx(0.1 / 2 ** 0.5)
    assert prediction.from_wide and prediction.horizons is not None
    assert [value for _, value in prediction.horizons.points] == pytest.approx([4.0, 3.9, 3.5])
    assert prediction.wide is not None and prediction.wide.val_bpb == 3.45
    assert not predict(records, records[0]).from_wide, "the proxy's own size has no size term"
