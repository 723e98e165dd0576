"""The Proposer plug-in point (:mod:`recipelab.proposer.base`): a proposal is its parent with
an edit applied as plain data, never validated (the guardrails judge it), and a proposer is
a class that only has to propose; its prefetch and close hooks do nothing unless it has
something to do."""

from __future__ import annotations

import dataclasses

import pytest

from recipelab.proposer.base import Observation, Proposal, Proposer
from recipelab.targets import proxy_recipe

PARENT = proxy_recipe("tiny")


class OneEdit(Proposer):
    """The smallest real plug-in: it proposes the same learning-rate edit every turn."""

    name = "one-edit"

    def propose(self, history: list[Observation], n: int) -> list[Proposal]:
        return [Proposal.from_edit(PARENT, None, {"optimizer.lr": 1e-3}, "cooler", self.name)] * n


def test_a_proposal_is_its_parent_with_each_dotted_knob_of_the_edit_set() -> None:
    proposal = Proposal.from_edit(PARENT, "p0000", {"optimizer.lr": 1e-3, "batch_size": 16},
                                  "cooler and wider", "tpe")
    expected = PARENT.model_dump(mode="json")
    expected["optimizer"]["lr"], expected["batch_size"] = 1e-3, 16
    assert proposal.candidate == expected
    assert (proposal.parent_id, proposal.hypothesis, proposal.proposer) == (
        "p0000", "cooler and wider", "tpe")
    assert proposal.artifacts == {} and proposal.fallback is None
    assert PARENT.optimizer.lr != 1e-3, "the parent recipe itself is untouched"


def test_an_invalid_edit_is_kept_as_given_for_the_guardrails_to_name() -> None:
    """An LLM's edit may be out of range, of the wrong type or of a knob that does not exist;
    the proposal carries it as is, so the schema check can say exactly what was wrong."""
    proposal = Proposal.from_edit(PARENT, None, {"optimizer.lr": -1, "batch_size": "big",
                                                 "optimizer.lrr": 0.1, "shape.moe.experts": 8},
                                  "reckless", "llm")
    assert proposal.candidate["optimizer"]["lr"] == -1
    assert proposal.candidate["batch_size"] == "big"
    assert proposal.candidate["optimizer"]["lrr"] == 0.1
    assert proposal.candidate["shape"]["moe"] == {"experts": 8}  # its path is made for it


def test_a_proposal_keeps_its_own_copy_of_the_edit() -> None:
    edit = {"optimizer.lr": 1e-3}
    proposal = Proposal.from_edit(PARENT, None, edit, "cooler", "tpe")
    edit["optimizer.lr"] = 1.0
    assert proposal.edit == {"optimizer.lr": 1e-3}


def test_proposals_and_observations_cannot_change_after_they_are_made() -> None:
    proposal = Proposal.from_edit(PARENT, None, {}, "baseline", "baseline")
    observed = Observation(trial_id="p0000", status="complete", knobs=PARENT.knobs(), val_bpb=2.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        proposal.hypothesis = "another"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        observed.val_bpb = 1.0  # type: ignore[misc]


def test_an_observation_without_a_result_says_nothing_more_than_its_status() -> None:
    observed = Observation(trial_id="p0003", status="rejected", knobs={})
    assert (observed.val_bpb, observed.reason, observed.reasons) == (None, None, ())
    assert (observed.proposer, observed.hypothesis) == ("", "")


def test_a_proposer_must_propose() -> None:
    class Silent(Proposer):
        pass

    with pytest.raises(TypeError, match="propose"):
        Silent()  # type: ignore[abstract]


def test_a_proposer_that_only_proposes_can_be_prefetched_and_closed() -> None:
    """The campaign calls both hooks on every proposer; the defaults do nothing."""
    proposer = OneEdit()
    history = [Observation(trial_id="p0000", status="complete", knobs=PARENT.knobs(), val_bpb=2.5)]
    proposer.prefetch(history)
    proposer.close()
    assert [p.edit for p in proposer.propose(history, 2)] == [{"optimizer.lr": 1e-3}] * 2
    assert Proposer.name == "proposer" and proposer.name == "one-edit"
