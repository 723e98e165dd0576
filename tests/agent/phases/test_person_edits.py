"""A person's ``--edit`` edits: tried in order after the noise floor, each once, whatever the
guardrails say of it, and never again on resume."""

from __future__ import annotations

from typing import Any

from recipelab.agent.phases.person_edits import person_proposals
from recipelab.recipe import PERSON_PROPOSER
from recipelab.targets import proxy_recipe
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord

BASELINE = proxy_recipe("tiny")
EDITS = ({"optimizer.lr": 0.005}, {"schedule.kind": "wsd"}, {"optimizer.beta2": 0.99})


def record(trial_id: str, edit: dict[str, Any], *, status: str = "complete",
           proposer: str = PERSON_PROPOSER, **fields: Any) -> TrialRecord:
    return TrialRecord(campaign="c", trial_id=trial_id, status=status, proposer=proposer,
                       edit=edit, recipe=BASELINE.apply(edit).model_dump(mode="json"), **fields)


def test_the_edits_come_in_order_as_edits_of_the_baseline() -> None:
    proposals = person_proposals(BASELINE, "p0000", [], EDITS, n=2)

    assert [p.edit for p in proposals] == list(EDITS[:2])
    assert {p.proposer for p in proposals} == {PERSON_PROPOSER}
    assert {p.parent_id for p in proposals} == {"p0000"}
    assert proposals[0].candidate["optimizer"]["lr"] == 0.005
    assert proposals[1].hypothesis == "your edit 2/3 (--edit)"


def test_an_edit_started_rejected_or_finished_is_not_proposed_again() -> None:
    tried = [record("p0001", EDITS[0], status="running"),
             record("p0002", EDITS[1], status="rejected")]

    assert [p.edit for p in person_proposals(BASELINE, None, tried, EDITS, n=5)] == [EDITS[2]]
    assert person_proposals(BASELINE, None, [*tried, record("p0003", EDITS[2])], EDITS) == []


def test_only_the_persons_trials_count_and_a_rerun_is_not_a_new_edit() -> None:
    others = [record("p0001", {"optimizer.lr": 0.02}, proposer="classical-tpe"),
              record("p0002", EDITS[0]),
              record("p0003", EDITS[0], retry_of="p0002")]

    assert [p.edit for p in person_proposals(BASELINE, None, others, EDITS)] == [EDITS[1]]


def test_a_persons_trials_are_search_trials_but_not_the_proposers_nor_the_llms() -> None:
    trials = [record("p0000", {}, proposer="baseline", val_bpb=2.5),
              record("p0001", EDITS[0], val_bpb=2.4),
              record("p0002", {"optimizer.lr": 0.02}, proposer="llm:smollm2", val_bpb=2.6),
              record("p0003", {"optimizer.lr": 0.03}, proposer="classical-tpe", val_bpb=2.7)]

    counts = Ledger(trials).counts()

    assert (counts.trained, counts.proposed, counts.llm) == (4, 2, 1)
