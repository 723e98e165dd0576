"""Conversions between the agent's objects and the trajectory's records
(:mod:`recipelab.agent.records`): what a trial measured lands in the record, and a record
gives back the proposal, the observation and the measurement it was made from."""

from __future__ import annotations

from recipelab.agent.records import (
    agent_provenance,
    as_measurement,
    as_observation,
    as_proposal,
    proposal_fields,
    result_fields,
)
from recipelab.guardrails import DeviceInfo
from recipelab.proposer import Proposal
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import TrialResult
from recipelab.trajectory.record import TrialRecord

RECIPE = proxy_recipe("tiny")
DEVICE = DeviceInfo("cpu", "test cpu", 2**30, None, False, False)


def recorded(result: TrialResult, proposal: Proposal) -> TrialRecord:
    """The record the trial book writes for ``proposal`` once ``result`` is in."""
    return TrialRecord(campaign="c", trial_id=result.trial_id, kind="proxy",
                       recipe=RECIPE.model_dump(mode="json"), fingerprint=RECIPE.fingerprint(),
                       **proposal_fields(proposal),
                       **result_fields(result, RECIPE, 12.5, agent_provenance(DEVICE, 0)))


def test_a_complete_trial_is_evidence_for_the_memory_and_time_models() -> None:
    proposal = Proposal.from_edit(RECIPE, "p0000", {"optimizer.lr": 3e-3}, "hotter", "tpe")
    result = TrialResult(trial_id="p0001", status="complete", val_bpb=2.5, tokens_per_s=900.0,
                         peak_memory_bytes=2**27, params=RECIPE.param_count(), steps_done=20)
    record = recorded(result, proposal)
    assert record.provenance["device"] == "cpu:test cpu"  # the trainer reported none
    measurement = as_measurement(record)
    assert measurement is not None
    assert (measurement.tokens_per_s, measurement.wall_s, measurement.steps) == (
        900.0, 12.5, RECIPE.steps)
    assert as_proposal(record) == Proposal(candidate=record.recipe, edit={"optimizer.lr": 3e-3},
                                           parent_id="p0000", hypothesis="hotter", proposer="tpe")
    observed = as_observation(record)
    assert observed.knobs == RECIPE.knobs() and observed.val_bpb == 2.5


def test_a_failed_trial_is_no_evidence_for_the_models() -> None:
    proposal = Proposal.from_edit(RECIPE, None, {}, "baseline", "baseline")
    result = TrialResult(trial_id="p0000", status="failed", reason="oom", message="out of memory")
    record = recorded(result, proposal)
    assert as_measurement(record) is None
    assert (as_observation(record).status, as_observation(record).reason) == ("failed", "oom")
