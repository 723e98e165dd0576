"""The rate's size exponent (:mod:`recipelab.transfer.size_exponent`): two widths' rate
families place a best rate each, the exponent through them carries its standard error, and the
export pools it with Step Law's."""

from __future__ import annotations

import math

import pytest

from recipelab.recipe import non_embedding_params
from recipelab.targets import get_target, proxy_recipe
from recipelab.trajectory.horizon import EDGE_SD, VERTEX_SD
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.width_check import WIDTH_KIND, WIDTH_RATES
from recipelab.transfer.size_exponent import (
    EXPONENT_BOUNDS,
    PRIOR,
    PRIOR_SD,
    measured_exponent,
    next_rate,
    size_exponent,
)
from recipelab.transfer.steplaw import LR_PARAMS_EXPONENT
from recipelab.transfer.width import width_targets

PROXY = proxy_recipe("tiny")
NARROW, WIDE = (t.shape for t in width_targets(PROXY.shape, get_target("toy")))
SIZES = non_embedding_params(WIDE) / non_embedding_params(NARROW)


def family(best: dict[int, float], at: dict[int, float], parent: str = "p0003",
           control: bool = False) -> list[TrialRecord]:
    """Both widths' runs at the export's rate ``at[multiple]`` × ½, 1 and 2, scored by a
    parabola in log rate whose minimum is ``best[multiple]``."""
    runs: list[TrialRecord] = []
    for multiple, shape in ((1, NARROW), (2, WIDE)):
        for factor in (1.0, *WIDTH_RATES):
            lr = at[multiple] * factor
            recipe = PROXY.model_copy(update={"shape": shape}).apply({"optimizer.lr": lr})
            edit: dict[str, object] = {"width_multiple": multiple,
                                       **({"lr_family": factor} if factor != 1.0 else {}),
                                       **({"arm": "baseline"} if control else {})}
            runs.append(TrialRecord(
                campaign="c", trial_id=f"w{len(runs):04d}", kind=WIDTH_KIND, status="complete",
                recipe=recipe.model_dump(mode="json"), parent=parent, budget=200, edit=edit,
                val_bpb=3.0 + math.log(lr / best[multiple]) ** 2))
    return runs


def test_two_widths_best_rates_give_the_exponent_and_its_error() -> None:
    narrow_best, wide_best = 4e-3, 4e-3 * SIZES ** -0.4
    measured = measured_exponent(family({1: narrow_best, 2: wide_best}, {1: 3e-3, 2: 1.5e-3}))
    assert measured is not None
    assert measured.narrow.lr == pytest.approx(narrow_best) and not measured.narrow.edge
    assert measured.wide.lr == pytest.approx(wide_best) and not measured.wide.edge
    assert measured.value == pytest.approx(-0.4)
    assert measured.se == pytest.approx(math.hypot(VERTEX_SD, VERTEX_SD) / math.log(SIZES))
    assert measured.narrow.runs == measured.wide.runs == 3


def test_a_best_rate_beyond_the_family_counts_for_less() -> None:
    """The wide family's best lies below its lowest rate: placed at that edge, with the
    edge's error."""
    measured = measured_exponent(family({1: 3e-3, 2: 1e-4}, {1: 3e-3, 2: 1e-3}))
    assert measured is not None and measured.wide.edge and measured.wide.lr == pytest.approx(5e-4)
    assert measured.se == pytest.approx(math.hypot(VERTEX_SD, EDGE_SD) / math.log(SIZES))


def test_the_export_pools_the_measurement_with_step_laws_by_inverse_variance() -> None:
    records = family({1: 4e-3, 2: 4e-3 * SIZES ** -0.4}, {1: 3e-3, 2: 1.5e-3})
    exponent = size_exponent(records)
    measured = measured_exponent(records)
    assert measured is not None and exponent.measured == measured
    w_prior, w_measured = PRIOR_SD ** -2, measured.se ** -2
    assert exponent.value == pytest.approx(
        (LR_PARAMS_EXPONENT * w_prior + measured.value * w_measured) / (w_prior + w_measured))
    assert exponent.sd == pytest.approx((w_prior + w_measured) ** -0.5)
    assert exponent.sd < min(PRIOR_SD, measured.se)
    assert "pooled by inverse variance" in exponent.describe()
    assert exponent.to_json()["measured"]["exponent"] == pytest.approx(-0.4)  # type: ignore[index]


def test_a_rate_rising_with_size_is_bounded() -> None:
    exponent = size_exponent(family({1: 1e-3, 2: 1e-3 * SIZES ** 3.0}, {1: 1e-3, 2: 1e-3 * SIZES ** 3.0}))
    assert exponent.value == EXPONENT_BOUNDS[1]


@pytest.mark.parametrize("records", [
    [],  # no width rung
    family({1: 4e-3, 2: 1e-3}, {1: 3e-3, 2: 1e-3}, control=True),  # the control's runs only
    [r for r in family({1: 4e-3, 2: 1e-3}, {1: 3e-3, 2: 1e-3}) if "lr_family" not in r.edit],
    [r for r in family({1: 4e-3, 2: 1e-3}, {1: 3e-3, 2: 1e-3})  # one rate of the wide family failed
     if not (r.edit["width_multiple"] == 2 and r.edit.get("lr_family") == 2.0)],
])
def test_without_both_families_the_export_keeps_the_laws_exponent(records: list[TrialRecord]) -> None:
    assert measured_exponent(records) is None
    assert size_exponent(records) == PRIOR and "alone" in PRIOR.describe()


def test_another_parents_runs_are_not_part_of_the_family() -> None:
    """The baseline's run at × 1 (another recipe, the control) sits beside the family; the
    exponent reads the recommendation's runs only."""
    ours = family({1: 4e-3, 2: 4e-3 * SIZES ** -0.4}, {1: 3e-3, 2: 1.5e-3})
    control = [r.model_copy(update={"trial_id": f"c{i}", "val_bpb": 1.0})
               for i, r in enumerate(family({1: 1e-3, 2: 1e-3}, {1: 1e-3, 2: 1e-3},
                                            parent="p0000", control=True)) if "lr_family" not in r.edit]
    measured = measured_exponent([*ours, *control])
    assert measured is not None and measured.value == pytest.approx(-0.4)


def one_width(values: dict[float, float | None]) -> list[TrialRecord]:
    """One width's family: the export's rate × each multiple, scored (None: failed)."""
    recipe = PROXY.model_copy(update={"shape": NARROW})
    return [TrialRecord(campaign="c", trial_id=f"w{i:04d}", kind=WIDTH_KIND,
                        status="complete" if value is not None else "failed",
                        recipe=recipe.apply({"optimizer.lr": 1e-3 * m}).model_dump(mode="json"),
                        parent="p0003", budget=200, val_bpb=value,
                        edit={"width_multiple": 1, **({"lr_family": m} if m != 1.0 else {})})
            for i, (m, value) in enumerate(values.items())]


@pytest.mark.parametrize(("values", "step"), [
    ({0.5: 3.6, 1.0: 3.5, 2.0: 3.6}, None),  # placed inside: done
    ({0.5: 3.9, 1.0: 3.7, 2.0: 3.6}, 4.0),  # best at the top: one step up
    ({0.5: 3.5, 1.0: 3.7, 2.0: 3.9}, 0.25),  # at the bottom: one step down
    ({0.5: 3.9, 1.0: 3.7, 2.0: 3.6, 4.0: 3.5}, 8.0),  # still at the top
    ({0.5: 3.9, 1.0: 3.7, 2.0: 3.6, 4.0: 3.55, 8.0: 3.3}, None),  # at the limit, × 8
    ({0.5: 3.9, 1.0: 3.7, 2.0: 3.6, 4.0: None}, None),  # the step above failed: the cliff
    ({1.0: 3.7}, None),  # no family yet
])
def test_a_family_at_its_edge_trains_one_step_beyond_it(
        values: dict[float, float | None], step: float | None) -> None:
    assert next_rate(one_width(values)) == step


def test_a_family_extended_past_its_edge_places_its_best_inside() -> None:
    runs = one_width({0.5: 3.9, 1.0: 3.7, 2.0: 3.6, 4.0: 3.55, 8.0: 3.7})
    wide = [r.model_copy(update={"recipe": r.recipe | {"shape": WIDE.model_dump(mode="json")},
                                 "trial_id": r.trial_id + "w",
                                 "edit": r.edit | {"width_multiple": 2}}) for r in runs]
    measured = measured_exponent([*runs, *wide])
    assert measured is not None and not measured.narrow.edge and measured.narrow.runs == 5
    assert 2e-3 < measured.narrow.lr < 8e-3
