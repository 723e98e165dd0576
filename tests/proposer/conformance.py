"""The conformance suite every Proposer implementation must pass.

Modelled on Optuna's sampler tests: the checks live here once, and each implementation's
test module subclasses :class:`ProposerConformance` under a ``Test*`` name and provides a
``make_proposer`` fixture, a zero-argument factory building the proposer with
``baseline_id=BASELINE_ID`` around the ``baseline`` fixture. The factory is called afresh
where restart safety matters, so a resumed campaign is what is being checked.

:func:`synthetic_history` is exported for implementation-specific tests too: a plausible
campaign around a baseline, with a chosen loss and a chosen mix of statuses.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

import pytest

from recipelab.proposer import Observation, Proposal, Proposer
from recipelab.recipe import Recipe
from recipelab.targets import proxy_recipe

BASELINE_ID = "baseline"
MIXED_STATUSES = ("complete", "complete", "complete", "failed",
                  "complete", "rejected", "complete", "interrupted")
HYPOTHESIS_CHARS = 200

Loss = Callable[[Recipe], float]
ProposerFactory = Callable[[], Proposer]


def bowl(recipe: Recipe) -> float:
    """A smooth val_bpb surface with its best point a little below the tiny proxy's lr."""
    return (2.0 + math.log10(recipe.optimizer.lr / 5e-3) ** 2
            + recipe.optimizer.weight_decay + 0.01 * recipe.schedule.warmup_steps)


def synthetic_history(baseline: Recipe, size: int, *, seed: int = 0, loss: Loss = bowl,
                      statuses: Sequence[str] = MIXED_STATUSES) -> list[Observation]:
    """``size`` observations of edits around ``baseline``, statuses cycling ``statuses``.

    Edits stay inside ``default_space(baseline)`` (lr within a decade, warmup within a third
    of the run, batch halved or doubled), so a proposer searching that space can use them.
    """
    rng = random.Random(seed)
    batches = sorted({max(1, baseline.batch_size * f // 2) for f in (1, 2, 4)})
    history = []
    for i in range(size):
        recipe = baseline.apply({
            "optimizer.lr": float(f"{baseline.optimizer.lr * 10 ** rng.uniform(-1, 1):.6g}"),
            "optimizer.weight_decay": round(rng.uniform(0.0, 0.3), 4),
            "schedule.kind": rng.choice(["cosine", "linear", "wsd"]),
            "schedule.warmup_steps": rng.randint(0, max(1, baseline.steps // 3)),
            "batch_size": rng.choice(batches),
        })
        status = statuses[i % len(statuses)]
        history.append(Observation(
            trial_id=f"t{i:03d}",
            status=status,
            knobs=recipe.knobs(),
            val_bpb=loss(recipe) if status == "complete" else None,
            reason="nan" if status == "failed" else None,
            reasons=("memory: the candidate does not fit",) if status == "rejected" else (),
            proposer="synthetic",
            hypothesis="synthetic history",
        ))
    return history


def parent_of(proposal: Proposal, baseline: Recipe, history: list[Observation]) -> Recipe:
    """The recipe a proposal's ``parent_id`` names: the baseline or a trial of the history."""
    if proposal.parent_id in (None, BASELINE_ID):
        return baseline
    by_id = {obs.trial_id: obs for obs in history}
    assert proposal.parent_id in by_id, f"unknown parent {proposal.parent_id!r}"
    return baseline.apply(by_id[proposal.parent_id].knobs)


class ProposerConformance:
    """Checks every proposer must pass; see the module docstring for how to use it."""

    @pytest.fixture
    def baseline(self) -> Recipe:
        return proxy_recipe("tiny")

    @pytest.fixture(params=["empty", "mixed"])
    def history(self, request: pytest.FixtureRequest, baseline: Recipe) -> list[Observation]:
        return [] if request.param == "empty" else synthetic_history(baseline, 24)

    @pytest.mark.parametrize("n", [1, 4])
    def test_returns_at_most_n(self, make_proposer: ProposerFactory,
                               history: list[Observation], n: int) -> None:
        assert len(make_proposer().propose(history, n)) <= n

    def test_candidates_are_valid_recipes(self, make_proposer: ProposerFactory,
                                          history: list[Observation]) -> None:
        for proposal in make_proposer().propose(history, 4):
            Recipe.model_validate(proposal.candidate)

    def test_edit_is_the_difference_from_the_parent(self, make_proposer: ProposerFactory,
                                                    baseline: Recipe,
                                                    history: list[Observation]) -> None:
        for proposal in make_proposer().propose(history, 4):
            parent = parent_of(proposal, baseline, history)
            candidate = Recipe.model_validate(proposal.candidate)
            assert proposal.edit, "a proposal must change something"
            assert candidate.edit_from(parent) == proposal.edit

    def test_hypothesis_is_one_short_line(self, make_proposer: ProposerFactory,
                                          history: list[Observation]) -> None:
        for proposal in make_proposer().propose(history, 4):
            assert proposal.hypothesis.strip()
            assert "\n" not in proposal.hypothesis
            assert len(proposal.hypothesis) <= HYPOTHESIS_CHARS

    def test_names_its_proposer(self, make_proposer: ProposerFactory,
                                history: list[Observation]) -> None:
        proposer = make_proposer()
        assert proposer.name and proposer.name != Proposer.name
        for proposal in proposer.propose(history, 4):
            assert proposal.proposer

    def test_same_history_same_proposals(self, make_proposer: ProposerFactory,
                                         history: list[Observation]) -> None:
        proposer = make_proposer()
        first = proposer.propose(history, 4)
        assert proposer.propose(list(history), 4) == first
        assert make_proposer().propose(list(history), 4) == first, "not restart-safe"
