"""ClassicalProposer: the conformance suite for each sampler, then its own specification."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recipelab.proposer import ClassicalProposer, Knob, Observation, SearchSpace, default_space
from recipelab.proposer.classical import HYPOTHESIS_CHARS, hypothesis_line
from recipelab.recipe import Recipe
from recipelab.targets import proxy_recipe
from tests.proposer.conformance import BASELINE_ID, ProposerConformance, synthetic_history

SAMPLERS = ["tpe", "cmaes", "random"]

BASELINE = proxy_recipe("tiny")
SPACE = default_space(BASELINE)
SYNTHETIC = SearchSpace(tuple(knob for knob in SPACE.knobs if knob.name in {
    "optimizer.lr", "optimizer.beta2", "optimizer.weight_decay", "optimizer.grad_clip",
    "schedule.kind", "schedule.warmup_steps", "schedule.min_lr_ratio", "batch_size"}))
"""The knobs :func:`synthetic_history` varies, where a test needs the sampler's model to
rest on them alone."""


def make(sampler: str = "tpe", seed: int = 0, space: SearchSpace = SPACE) -> ClassicalProposer:
    return ClassicalProposer(BASELINE, BASELINE_ID, space, sampler=sampler,  # type: ignore[arg-type]
                             seed=seed)


class TestClassicalConformance(ProposerConformance):
    @pytest.fixture(params=SAMPLERS)
    def make_proposer(self, request: pytest.FixtureRequest, baseline: Recipe):
        return lambda: ClassicalProposer(baseline, BASELINE_ID, default_space(baseline),
                                         sampler=request.param)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_proposals_carry_the_sampler_in_their_proposer_name(sampler: str) -> None:
    proposals = make(sampler).propose(synthetic_history(BASELINE, 24), 2)
    assert {p.proposer for p in proposals} == {f"classical-{sampler}"}
    assert all(p.parent_id == BASELINE_ID for p in proposals)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), size=st.integers(0, 30),
       sampler=st.sampled_from(["tpe", "random"]))
def test_proposals_stay_within_the_space(seed: int, size: int, sampler: str) -> None:
    history = synthetic_history(BASELINE, size, seed=seed)
    parent = BASELINE.knobs()
    for proposal in make(sampler, seed=seed).propose(history, 3):
        knobs = Recipe.model_validate(proposal.candidate).knobs()
        assert set(proposal.edit) <= set(SPACE.names())
        # batch_size moves with seq_len and grad_accum: its point is the tokens per step.
        for name, value in SPACE.point_of(knobs, parent).items():
            assert SPACE.knob(name).contains(value) or value == parent[name]


def test_values_are_recipe_friendly() -> None:
    for proposal in make().propose(synthetic_history(BASELINE, 24), 4):
        for name, value in proposal.edit.items():
            knob = next(k for k in SPACE.knobs if k.name == name)
            if knob.integer:
                assert type(value) is int
            elif knob.choices is None:
                assert value == float(f"{value:.6g}"), "floats keep 6 significant digits"


def test_tpe_follows_a_loss_that_falls_with_lr() -> None:
    history = synthetic_history(BASELINE, 20, statuses=("complete",),
                                loss=lambda r: 1.0 + 10 * r.optimizer.lr)
    median = statistics.median(obs.knobs["optimizer.lr"] for obs in history)
    lrs = [p.candidate["optimizer"]["lr"] for p in make().propose(history, 8)]
    assert len(lrs) == 8
    assert sum(lr < median for lr in lrs) > len(lrs) / 2


def test_tpe_batch_is_distinct() -> None:
    proposals = make().propose(synthetic_history(BASELINE, 24), 4)
    fingerprints = {Recipe.model_validate(p.candidate).fingerprint() for p in proposals}
    assert len(fingerprints) == 4


def test_successive_calls_and_seeds_differ() -> None:
    history = synthetic_history(BASELINE, 24)
    first = make().propose(history, 2)
    assert make().propose(history[:-1], 2) != first
    assert make(seed=1).propose(history, 2) != first


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_failed_and_rejected_points_are_not_modelled(sampler: str) -> None:
    """Two histories differing only where trials failed or were rejected propose alike."""
    history = synthetic_history(BASELINE, 24)
    elsewhere = synthetic_history(BASELINE, 24, seed=99)
    moved = [dataclasses.replace(obs, knobs=other.knobs)
             if obs.status in ("failed", "rejected") else obs
             for obs, other in zip(history, elsewhere, strict=True)]
    assert moved != history
    assert make(sampler).propose(moved, 4) == make(sampler).propose(history, 4)


@pytest.mark.parametrize("status", ["failed", "rejected", "interrupted"])
def test_history_without_a_complete_trial_still_proposes(status: str) -> None:
    history = synthetic_history(BASELINE, 12, statuses=(status,))
    assert len(make().propose(history, 3)) == 3


def test_observations_outside_the_space_are_skipped() -> None:
    """Out-of-range or missing knobs drop the observation, like an interrupted trial."""
    history = synthetic_history(BASELINE, 24, statuses=("complete",))
    too_high = dict(history[0].knobs, **{"optimizer.lr": 0.9})
    missing = {k: v for k, v in history[1].knobs.items() if k != "schedule.kind"}
    not_a_choice = dict(history[2].knobs, **{"batch_size": 12})
    odd = [dataclasses.replace(history[0], knobs=too_high),
           dataclasses.replace(history[1], knobs=missing),
           dataclasses.replace(history[2], knobs=not_a_choice)]
    skipped = [dataclasses.replace(obs, status="interrupted", val_bpb=None)
               for obs in history[:3]]
    proposals = make().propose(odd + history[3:], 4)
    assert len(proposals) == 4
    assert proposals == make().propose(skipped + history[3:], 4)


def test_non_finite_val_bpb_is_skipped() -> None:
    history = synthetic_history(BASELINE, 24, statuses=("complete",))
    broken = [dataclasses.replace(history[0], val_bpb=float("nan")), *history[1:]]
    skipped = [dataclasses.replace(history[0], status="interrupted"), *history[1:]]
    assert make().propose(broken, 3) == make().propose(skipped, 3)


def test_gives_up_when_the_space_holds_only_the_baseline() -> None:
    only_baseline = SearchSpace((Knob("schedule.kind", choices=("cosine",)),))
    assert make(space=only_baseline).propose([], 3) == []


def test_small_space_returns_each_point_once() -> None:
    shape = SearchSpace((Knob("shape.qk_norm", choices=(True, False)),))
    proposals = make(space=shape).propose([], 3)
    assert [p.edit for p in proposals] == [{"shape.qk_norm": True}]


def test_hypothesis_says_what_changes() -> None:
    history = synthetic_history(BASELINE, 24)
    for proposal in make().propose(history, 4):
        first = next(iter(proposal.edit)).rsplit(".", 1)[-1]
        assert proposal.hypothesis.startswith(f"TPE: {first} ")
        assert "model of 15 trials expects lower val_bpb" in proposal.hypothesis


def test_hypothesis_line_counts_what_does_not_fit() -> None:
    parent = {f"optimizer.knob{i}": 0.1 for i in range(40)}
    edit = {name: 0.2 for name in parent}
    line = hypothesis_line("TPE", edit, parent, "because")
    assert len(line) <= HYPOTHESIS_CHARS
    assert line.startswith("TPE: knob0 0.1→0.2, ")
    assert line.endswith(" more); because")


def test_rejects_a_space_with_unknown_knobs() -> None:
    with pytest.raises(ValueError, match=r"optimizer\.momentum"):
        make(space=SearchSpace((Knob("optimizer.momentum", 0.0, 1.0),)))


def test_rejects_an_unknown_sampler() -> None:
    with pytest.raises(ValueError, match="unknown sampler 'bohb'"):
        make("bohb")



def test_a_point_in_flight_is_not_proposed_again() -> None:
    shape = SearchSpace((Knob("shape.qk_norm", choices=(True, False)),))
    in_flight = Observation(trial_id="p0001", status="running",
                            knobs=BASELINE.apply({"shape.qk_norm": True}).knobs(),
                            proposer="classical-tpe")
    assert make(space=shape).propose([in_flight], 3) == []


def test_trials_in_flight_steer_tpe_as_running_trials() -> None:
    """Constant liar: the same points in flight (running) or lost (interrupted, ignored)
    give different batches, and none repeats a point in flight."""
    history = synthetic_history(BASELINE, 24, statuses=("complete",))
    running = [dataclasses.replace(obs, trial_id=f"r{i}", status="running", val_bpb=None)
               for i, obs in enumerate(synthetic_history(BASELINE, 6, seed=7))]
    lost = [dataclasses.replace(obs, status="interrupted") for obs in running]
    batch = make(space=SYNTHETIC).propose(history + running, 4)
    assert len(batch) == 4
    assert batch != make(space=SYNTHETIC).propose(history + lost, 4)
    in_flight = {tuple(sorted(obs.knobs.items())) for obs in running}
    assert all(tuple(sorted(Recipe.model_validate(p.candidate).knobs().items())) not in in_flight
               for p in batch)


# --- conditional knobs and searchable shape knobs -------------------------------------------


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_the_decay_fraction_is_proposed_only_with_the_wsd_schedule(sampler: str) -> None:
    history = synthetic_history(BASELINE, 4)  # TPE still at random start-up
    proposals = make(sampler, seed=3).propose(history, 12)
    kinds = {Recipe.model_validate(p.candidate).schedule.kind for p in proposals}
    assert "wsd" in kinds and kinds - {"wsd"}
    for proposal in proposals:
        recipe = Recipe.model_validate(proposal.candidate)
        if recipe.schedule.kind != "wsd":
            assert "schedule.decay_fraction" not in proposal.edit
    # The sampler itself never draws the fraction without wsd, so no study models a value
    # that changed nothing.
    points = make(sampler, seed=3).suggest(history, 12, with_state=False).points
    assert all(("schedule.decay_fraction" in point) == (point["schedule.kind"] == "wsd")
               for point in points)


def test_a_trial_records_only_the_knobs_active_at_its_point() -> None:
    proposer, distributions = make(), SPACE.distributions()
    for kind, has_fraction in (("wsd", True), ("cosine", False)):
        obs = Observation(trial_id="t", status="complete", val_bpb=2.0,
                          knobs=BASELINE.apply({"schedule.kind": kind}).knobs())
        trial = proposer._as_trial(obs, distributions)
        assert trial is not None
        assert ("schedule.decay_fraction" in trial.params) is has_fraction


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_searchable_shape_knobs_are_proposed(sampler: str) -> None:
    shape_knobs = ("shape.activation", "shape.norm", "shape.qk_norm")
    space = default_space(BASELINE, shape_knobs)
    proposals = make(sampler, space=space).propose(synthetic_history(BASELINE, 12), 8)
    edited = {name for p in proposals for name in p.edit}
    assert set(shape_knobs) <= edited


def test_a_trial_recorded_before_the_new_knobs_still_places_in_the_space() -> None:
    """An older trajectory's recipe lacks the knobs added since and calls WSD
    ``constant-cooldown``; it places at the neutral defaults and today's names."""
    recipe = BASELINE.apply({"schedule.kind": "wsd", "schedule.decay_fraction": 0.3})
    old = {name: value for name, value in recipe.knobs().items()
           if not name.startswith("stability.") and name not in (
               "optimizer.lr_embed_mult", "optimizer.lr_hidden_mult", "shape.rope_base",
               "schedule.decay_fraction")}
    old |= {"schedule.kind": "constant-cooldown", "schedule.cooldown_fraction": 0.3}
    obs = Observation(trial_id="old", status="complete", val_bpb=2.0, knobs=old)
    trial = make()._as_trial(obs, SPACE.distributions())
    assert trial is not None
    assert trial.params == SPACE.point_of(recipe.knobs(), BASELINE.knobs())
