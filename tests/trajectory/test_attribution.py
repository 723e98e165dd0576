"""Specifications of the attribution of a winner's edit (recipelab.trajectory.attribution)."""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Sequence

from recipelab.trajectory.attribution import (
    RESULT_KIND,
    Abandoned,
    Attribution,
    GroupKey,
    Pending,
    attribute,
    group_edit,
    group_of,
    recommendation_line,
    variant_edit,
    variant_key,
)
from recipelab.trajectory.noise import NoiseFloor
from recipelab.trajectory.record import TrialRecord

SEEDS = (0, 1, 2)


def wobble(key: GroupKey, seed: int, size: float = 0.003) -> float:
    """A deterministic paired noise: each variant and seed moves by up to ``size``."""
    return ((zlib.crc32(f"{key}/{seed}".encode()) % 2001) - 1000) / 1000 * size


def measure(groups: dict[str, dict[str, object]], loss: Callable[[GroupKey], float],
            seeds: Sequence[int] = SEEDS, size: float = 0.003) -> dict[GroupKey, dict[int, float | None]]:
    """Every subset of ``groups`` measured at every seed: a seed's own level, plus the
    variant's ``loss`` and its wobble."""
    names = sorted(groups)
    out: dict[GroupKey, dict[int, float | None]] = {}
    for n in range(len(names) + 1):
        for keep in itertools.combinations(names, n):
            out[keep] = {s: 2.0 + 0.01 * s + loss(keep) + wobble(keep, s, size) for s in seeds}
    return out


def decide(groups: dict[str, dict[str, object]], measured: dict[GroupKey, dict[int, float | None]],
           seeds: Sequence[int] = SEEDS, fallback: NoiseFloor | None = None) -> Attribution:
    found = attribute(groups, measured, seeds, fallback)
    assert isinstance(found, Attribution), found
    return found


def test_knobs_fall_into_groups_and_the_seed_into_none() -> None:
    assert group_of("seed") is None and group_of("steps") is None
    assert group_of("optimizer.eps") == "optimizer betas" == group_of("optimizer.beta2")
    assert group_of("optimizer.lr_hidden_mult") == "learning rate"
    assert group_of("schedule.warmup_steps") == "schedule"
    assert group_of("stability.z_loss") == "stability" == group_of("optimizer.grad_clip")
    assert group_of("grad_accum") == "batch geometry"
    assert group_of("shape.rope_base") == "shape"
    edit = {"seed": 3, "optimizer.eps": 1e-10, "optimizer.lr": 0.01, "batch_size": 32}
    grouped = group_edit(edit)
    assert list(grouped) == ["learning rate", "optimizer betas", "batch geometry"]
    assert variant_key(variant_edit(grouped, ["optimizer betas", "learning rate"])) == (
        "learning rate", "optimizer betas")


def test_it_first_asks_for_the_baseline_the_winner_and_each_group_left_out() -> None:
    groups = group_edit({"optimizer.lr": 0.01, "optimizer.eps": 1e-10})
    pending = attribute(groups, {}, (0, 1))
    assert isinstance(pending, Pending)
    assert set(pending.runs) == {(key, s) for key in [(), ("learning rate", "optimizer betas"),
                                                      ("optimizer betas",), ("learning rate",)]
                                 for s in (0, 1)}


def test_a_planted_neutral_edit_is_dropped_and_a_planted_real_one_kept() -> None:
    groups = group_edit({"optimizer.lr": 0.01, "optimizer.eps": 1e-10})
    found = decide(groups, measure(groups, lambda keep: -0.1 * ("learning rate" in keep)))
    kept, dropped = found.kept, found.dropped
    assert [c.group for c in kept] == ["learning rate"]
    assert [c.group for c in dropped] == ["optimizer betas"]
    assert kept[0].cost is not None and kept[0].cost.low > 0
    assert dropped[0].cost is not None and dropped[0].cost.low <= 0 <= dropped[0].cost.high
    assert found.minimal_edit == {"optimizer.lr": 0.01}
    assert found.keeps_gain and found.recommends_minimal
    assert found.gain is not None and abs(found.gain.value - 0.1) < 0.01
    share = kept[0].share(found.gain.value)
    assert share is not None and 0.9 < share < 1.1
    assert found.method == "leave-one-group-out" and "paired" in found.noise


def test_an_unstable_baseline_does_not_hide_a_steady_cost_near_the_winner() -> None:
    # the baseline's val_bpb swings by 0.8 between seeds (as a proxy recipe at a high learning
    # rate does at 200 steps), while the winner's variants move with it within 0.003; batch
    # geometry costs a steady 0.05 and must be kept, eps costs nothing and is dropped
    groups = group_edit({"optimizer.lr": 0.01, "optimizer.eps": 1e-10, "batch_size": 32,
                         "schedule.warmup_steps": 4})
    measured = measure(groups, lambda keep: -0.3 * ("learning rate" in keep)
                       - 0.05 * ("batch geometry" in keep))
    measured[()] = {s: v + (0.4, -0.4, 0.1)[s] for s, v in measured[()].items() if v is not None}
    found = decide(groups, measured)
    assert {c.group for c in found.kept} == {"learning rate", "batch geometry"}
    batch = next(c for c in found.kept if c.group == "batch geometry")
    assert batch.cost is not None and batch.cost.low > 0.04 and batch.cost.high < 0.06
    # the gain itself is compared against the baseline, whose own spread it keeps
    assert found.gain is not None and found.gain.high - found.gain.low > 0.3


def test_when_every_group_carries_gain_the_minimal_edit_is_the_whole_edit() -> None:
    groups = group_edit({"optimizer.lr": 0.01, "schedule.warmup_steps": 4})
    found = decide(groups, measure(groups, lambda keep: -0.05 * len(keep)))
    assert not found.dropped and found.minimal_edit == variant_edit(groups, list(groups))
    assert found.minimal_loss is None and not found.recommends_minimal


def test_leave_one_out_remeasures_a_minimal_edit_it_has_not_measured_yet() -> None:
    groups = group_edit({"optimizer.lr": 0.01, "optimizer.eps": 1e-10, "precision": "bf16"})
    full = measure(groups, lambda keep: -0.1 * ("learning rate" in keep))
    partial = {k: v for k, v in full.items() if k != ("learning rate",)}
    pending = attribute(groups, partial, SEEDS)
    assert isinstance(pending, Pending)
    assert pending.runs == tuple((("learning rate",), s) for s in SEEDS)
    assert decide(groups, full).minimal_edit == {"optimizer.lr": 0.01}


def test_greedy_elimination_keeps_groups_that_are_only_noise_one_at_a_time() -> None:
    # schedule and stability stand in for each other: either alone keeps the gain, neither
    # loses 0.05; leave-one-out alone would drop both
    groups = group_edit({"optimizer.lr": 0.01, "optimizer.eps": 1e-10, "schedule.warmup_steps": 4,
                         "stability.z_loss": 1e-4, "precision": "bf16"})

    def loss(keep: GroupKey) -> float:
        substitutes = "schedule" in keep or "stability" in keep
        return -0.1 * ("learning rate" in keep) - 0.05 * substitutes

    found = decide(groups, measure(groups, loss))
    assert found.method == "greedy backward elimination"
    assert {c.group for c in found.kept} == {"learning rate", "stability"} or \
        {c.group for c in found.kept} == {"learning rate", "schedule"}
    survivor = next(c for c in found.kept if c.group != "learning rate")
    assert "not together" in survivor.note
    assert found.keeps_gain and found.recommends_minimal


def test_a_group_whose_removal_makes_the_run_fail_is_kept() -> None:
    groups = group_edit({"optimizer.lr": 0.01, "stability.z_loss": 1e-4})
    measured = measure(groups, lambda keep: -0.1 * ("learning rate" in keep))
    measured[("learning rate",)] = {s: None for s in SEEDS}  # without stability: diverged
    found = decide(groups, measured)
    stability = next(c for c in found.contributions if c.group == "stability")
    assert stability.kept and stability.cost is None and "fail" in stability.note


def test_without_two_seeds_or_a_noise_floor_nothing_is_called_noise() -> None:
    groups = group_edit({"optimizer.lr": 0.01, "optimizer.eps": 1e-10})
    measured = measure(groups, lambda keep: -0.1 * ("learning rate" in keep), seeds=(0,))
    found = decide(groups, measured, seeds=(0,))
    assert not found.dropped and "none" in found.noise
    floor = NoiseFloor(mean=2.0, spread=0.01, seeds=(0, 1), values=(2.0, 2.01))
    with_floor = decide(groups, measured, seeds=(0,), fallback=floor)
    assert [c.group for c in with_floor.dropped] == ["optimizer betas"]


def test_a_winner_that_fails_at_this_fidelity_abandons_the_attribution() -> None:
    groups = group_edit({"optimizer.lr": 0.01, "optimizer.eps": 1e-10})
    measured = measure(groups, lambda keep: 0.0)
    measured[("learning rate", "optimizer betas")] = {s: None for s in SEEDS}
    found = attribute(groups, measured, SEEDS)
    assert isinstance(found, Abandoned) and "winner" in found.reason
    assert isinstance(attribute({}, {}, SEEDS), Abandoned)


def test_the_recommendation_line_names_what_to_book_or_says_the_whole_edit() -> None:
    groups = group_edit({"optimizer.lr": 0.01, "optimizer.eps": 1e-10})

    def line(found: Attribution) -> str:
        data = {**found.to_json(), "steps": 200, "winner": "p0003",
                "full_edit": variant_edit(groups, list(groups))}
        return recommendation_line(TrialRecord(campaign="c", trial_id="m0000", kind=RESULT_KIND,
                                               status="complete", metrics={"attribution": data}))

    minimal = decide(groups, measure(groups, lambda keep: -0.1 * ("learning rate" in keep)))
    assert line(minimal) == (
        "recommended: the baseline plus the winner p0003's learning rate change(s), 1 of its 2 "
        "knob(s); dropped: optimizer betas (attribution at 200 steps, 3 seed(s), "
        "leave-one-group-out; 'recipelab export' writes it, the report says why)")
    whole = decide(groups, measure(groups, lambda keep: -0.05 * len(keep)))
    assert line(whole).startswith("recommended: the winner p0003's whole edit; no group")
