"""The sampler state an LLM is shown: CMA-ES's distribution, TPE's good/bad split."""

from __future__ import annotations

import math

import optuna
import optuna._transform
import pytest
from optuna.samplers import TPESampler

from recipelab.proposer import ClassicalProposer, default_space
from recipelab.proposer.sampler_state import SamplerState, sampler_state
from recipelab.targets import proxy_recipe
from tests.proposer.conformance import BASELINE_ID, synthetic_history

BASELINE = proxy_recipe("tiny")
SPACE = default_space(BASELINE)
HISTORY = synthetic_history(BASELINE, 24)  # 15 complete: past TPE's start-up and CMA's warm start
COMPLETE = sorted((obs for obs in HISTORY if obs.status == "complete"),
                  key=lambda obs: obs.val_bpb or math.inf)


def state_of(sampler: str) -> SamplerState | None:
    proposer = ClassicalProposer(BASELINE, BASELINE_ID, SPACE, sampler=sampler)  # type: ignore[arg-type]
    return proposer.suggest(HISTORY, 4).state


def test_cmaes_state_is_the_warm_started_distribution_with_the_installed_optuna() -> None:
    # Read through Optuna's private names: if an upgrade moves them, this fails first.
    state = state_of("cmaes")
    assert state is not None and state.sampler == "CMA-ES"
    assert state.data["fitted"] is True
    # WS-CMA-ES centres on the best tenth of the complete trials: here the best two.
    best_lrs = [obs.knobs["optimizer.lr"] for obs in COMPLETE[:2]]
    assert min(best_lrs) * 0.99 <= state.data["mean"]["optimizer.lr"] <= max(best_lrs) * 1.01
    assert 0 < state.data["sigma"] < 1
    assert "step size" in state.text() and "optimizer.lr" in state.text()


def test_cmaes_state_before_warm_start_says_the_distribution_is_not_fitted() -> None:
    proposer = ClassicalProposer(BASELINE, BASELINE_ID, SPACE, sampler="cmaes")
    state = proposer.suggest(synthetic_history(BASELINE, 4), 4).state
    assert state is not None and state.data["fitted"] is False
    assert "not fitted yet" in state.lines[0]


def test_tpe_state_is_its_good_bad_split_with_the_important_knobs_first() -> None:
    state = state_of("tpe")
    assert state is not None and state.sampler == "TPE"
    # Optuna's default gamma: the best ceil(10 %) of 15 complete trials are "good".
    assert (state.data["complete"], state.data["good"]) == (15, 2)
    assert state.data["threshold"] == pytest.approx(COMPLETE[1].val_bpb)
    # The synthetic loss is a bowl in lr: PED-ANOVA ranks lr first, and the good trials'
    # lr range is shown inside the range of every trial.
    first = next(iter(state.data["knobs"]))
    assert first == "optimizer.lr"
    assert "importance" in state.data["knobs"][first]
    assert "modelling" in state.lines[0]


def test_tpe_state_without_its_private_gamma_is_omitted() -> None:
    # A mock, as above: an Optuna release that renames TPESampler._gamma.
    proposer = ClassicalProposer(BASELINE, BASELINE_ID, SPACE, sampler="tpe")
    sampler = TPESampler()
    study = optuna.create_study(sampler=sampler)
    study.add_trials(proposer.trials(HISTORY))
    assert sampler_state(study, sampler, SPACE, {}) is not None
    del sampler._gamma
    assert sampler_state(study, sampler, SPACE, {}) is None


def test_random_search_has_no_state_to_show() -> None:
    assert state_of("random") is None


@pytest.mark.parametrize("sampler", ["tpe", "cmaes"])
def test_reading_the_state_never_changes_the_candidates(sampler: str) -> None:
    proposer = ClassicalProposer(BASELINE, BASELINE_ID, SPACE, sampler=sampler)  # type: ignore[arg-type]
    with_state = proposer.suggest(HISTORY, 4)
    assert with_state.state is not None
    assert with_state.proposals == proposer.propose(HISTORY, 4)


def test_a_moved_private_optuna_name_omits_the_state_but_keeps_the_candidates(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A mock, because the fault (an Optuna release moving its private _SearchSpaceTransform)
    # cannot be produced with the installed version. Optuna's CMA-ES module keeps the name
    # it imported, so only the state reader loses it.
    proposer = ClassicalProposer(BASELINE, BASELINE_ID, SPACE, sampler="cmaes")
    expected = proposer.propose(HISTORY, 4)
    monkeypatch.delattr(optuna._transform, "_SearchSpaceTransform")
    suggestion = proposer.suggest(HISTORY, 4)
    assert suggestion.state is None
    assert suggestion.proposals == expected
