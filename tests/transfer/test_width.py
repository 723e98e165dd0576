"""The width rung's size term: the two models it trains, the law through their scores, and
the pair of runs it reads from a campaign's records."""

from __future__ import annotations

import math

import pytest

from recipelab.recipe import Recipe, non_embedding_params
from recipelab.targets import get_target, proxy_recipe
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.width_check import WIDTH_KIND
from recipelab.transfer.width import (
    MAX_CONTEXT,
    WIDTH_ALPHA,
    SizeGap,
    WideLevel,
    measured_gap,
    wide_level,
    width_targets,
)


def test_the_wider_model_keeps_the_head_size_the_groups_and_the_depth_to_width_ratio() -> None:
    proxy, target = proxy_recipe("tiny").shape, get_target("toy")
    narrow, wide = width_targets(proxy, target)
    assert narrow.shape == proxy and narrow.context == wide.context == min(target.context, MAX_CONTEXT)
    assert (wide.shape.d_model, wide.shape.n_layer) == (2 * proxy.d_model, 2 * proxy.n_layer)
    assert wide.shape.head_dim == proxy.head_dim and wide.shape.gqa_ratio == proxy.gqa_ratio
    assert wide.shape.vocab_size == proxy.vocab_size  # the proxy's tokenizer, not the target's
    assert 7 < non_embedding_params(wide.shape) / non_embedding_params(proxy) < 9  # ≈ 2³


def test_a_long_context_is_cut_to_what_the_gap_needs() -> None:
    narrow, wide = width_targets(proxy_recipe("cpu").shape, get_target("smollm2-135m"))
    assert narrow.context == wide.context == MAX_CONTEXT < get_target("smollm2-135m").context


def test_two_sizes_on_the_law_give_back_its_slope_and_the_targets_gap() -> None:
    """Scores made by L = 2 + 30·N^-0.34: the slope is 30, and the target sits as far below
    the proxy as the law puts it."""
    def law(n: int) -> float:
        return 2.0 + 30.0 * float(n ** -WIDTH_ALPHA)

    gap = SizeGap(90_000, law(90_000), 720_000, law(720_000), ("w0000", "w0001"))
    assert gap.slope == pytest.approx(30.0)
    assert gap.lowering(90_000, 6_000_000) == pytest.approx(law(90_000) - law(6_000_000))
    assert gap.lowering(90_000, 90_000) == 0.0


def test_a_wider_model_that_scored_no_better_measured_no_gap() -> None:
    assert not SizeGap(90_000, 3.0, 720_000, 3.1, ("w0000", "w0001")).measured
    assert not SizeGap(90_000, 3.0, 720_000, 3.0, ("w0000", "w0001")).measured
    assert SizeGap(90_000, 3.1, 720_000, 3.0, ("w0000", "w0001")).measured


def test_a_gap_read_back_from_its_json_is_the_same() -> None:
    gap = SizeGap(90_000, 3.2, 720_000, 3.0, ("w0000", "w0001"))
    assert SizeGap.from_json(gap.to_json()) == gap


def width_run(trial_id: str, multiple: int, val_bpb: float | None, *, seed: int = 0,
              parent: str = "p0003", status: str = "complete", control: bool = False
              ) -> TrialRecord:
    proxy = proxy_recipe("tiny")
    narrow, wide = width_targets(proxy.shape, get_target("toy"))
    shape = (narrow if multiple == 1 else wide).shape
    recipe = proxy.model_copy(update={"shape": shape, "seed": seed})
    return TrialRecord(campaign="c", trial_id=trial_id, kind=WIDTH_KIND, status=status,
                       recipe=recipe.model_dump(mode="json"), parent=parent, budget=200,
                       edit={"width_multiple": multiple, **({"arm": "baseline"} if control
                                                             else {})}, val_bpb=val_bpb)


def test_the_gap_pairs_the_two_sizes_of_one_parent_and_seed() -> None:
    records = [width_run("w0000", 1, 3.4), width_run("w0001", 2, 3.3)]
    gap = measured_gap(records)
    assert gap is not None and gap.runs == ("w0000", "w0001")
    assert (gap.narrow_val_bpb, gap.wide_val_bpb) == (3.4, 3.3)
    assert math.isclose(gap.slope, 0.1 / (gap.narrow_params ** -WIDTH_ALPHA
                                          - gap.wide_params ** -WIDTH_ALPHA))


@pytest.mark.parametrize("partner", [
    width_run("w0001", 2, 3.3, seed=1),  # another seed
    width_run("w0001", 2, 3.3, parent="p0005"),  # another candidate's
    width_run("w0001", 2, None, status="failed"),  # failed: no score
    width_run("w0001", 1, 3.3),  # the same size again
], ids=["seed", "parent", "failed", "same size"])
def test_no_gap_without_a_scored_pair(partner: TrialRecord) -> None:
    assert measured_gap([width_run("w0000", 1, 3.4), partner]) is None


def test_over_two_seeds_the_gap_is_between_the_means() -> None:
    records = [width_run("w0000", 1, 3.4), width_run("w0001", 2, 3.3),
               width_run("w0002", 1, 3.6, seed=1), width_run("w0003", 2, 3.3, seed=1)]
    gap = measured_gap(records)
    assert gap is not None and gap.seeds == 2 and gap.runs == ("w0000+w0002", "w0001+w0003")
    assert (gap.narrow_val_bpb, gap.wide_val_bpb) == pytest.approx((3.5, 3.3))
    assert "means of 2 seeds" in gap.describe() and SizeGap.from_json(gap.to_json()) == gap
    older = {k: v for k, v in gap.to_json().items() if k != "seeds"}  # a prediction.json of before
    assert SizeGap.from_json(older).seeds == 1


def test_the_baselines_run_at_twice_the_width_is_no_part_of_the_gap() -> None:
    control = width_run("w0002", 2, 3.0, parent="p0003", control=True)  # even under its parent
    assert measured_gap([width_run("w0000", 1, 3.4), control]) is None


def family_run(trial_id: str, multiple: int, val_bpb: float, rate: float) -> TrialRecord:
    """A width run at ``rate`` × the export's rate (the rung's rate family)."""
    run = width_run(trial_id, multiple, val_bpb)
    return run.model_copy(update={"edit": {**run.edit, "lr_family": rate}})


def test_the_wide_level_is_the_best_rate_at_the_widest_size_over_its_seeds() -> None:
    """The level the prediction starts from: the wider model at the best rate it trained,
    each rate a mean over its seeds; the narrow runs and another parent's do not count."""
    records = [width_run("w0000", 1, 3.1), width_run("w0001", 2, 3.5),
               width_run("w0002", 2, 3.6, seed=1), family_run("w0003", 2, 3.45, 2.0),
               family_run("w0004", 2, 3.9, 0.5), width_run("w0005", 2, 3.0, parent="p0009")]
    level = wide_level(records, "p0003", bytes_per_token=1.0)
    recipe = Recipe.model_validate(records[1].recipe)
    assert level == WideLevel(non_embedding_params(recipe.shape), 3.45, 2.0,
                              float(recipe.steps * recipe.tokens_per_step), "w0003")
    at_own_rate = wide_level(records[:3], "p0003", 1.0)
    assert at_own_rate is not None and at_own_rate.val_bpb == pytest.approx(3.55)
    assert (at_own_rate.multiple, at_own_rate.runs) == (1.0, "w0001+w0002")
    assert wide_level(records[1:3], "p0003", 1.0) is None, "one size is no rung"
    assert WideLevel.from_json(level.to_json()) == level
