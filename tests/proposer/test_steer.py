"""The steering turn: the sampler proposes candidates, the LLM picks one and adjusts it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from optuna.trial import TrialState

from recipelab.proposer import ClassicalProposer, Observation, default_space
from recipelab.proposer.llm import LLMProposer
from recipelab.proposer.llm_endpoint import decoding_schema
from recipelab.proposer.prompt import HYPOTHESIS_CHARS as PROMPT_HYPOTHESIS_CHARS
from recipelab.proposer.steer import (
    MAX_CHANGES,
    STEER_ARTIFACT,
    apply_changes,
    knob_value,
    steer_model,
)
from recipelab.recipe import BASELINE_PROPOSER, Recipe, flatten
from recipelab.targets import proxy_recipe
from tests.proposer.conformance import BASELINE_ID, ProposerConformance, synthetic_history
from tests.proposer.fake_openai import (
    FakeOpenAI,
    fake_openai_fixture,  # noqa: F401 - the `fake` fixture
    fast_config,
    steered,
    text,
)

BASELINE = proxy_recipe("tiny")
SPACE = default_space(BASELINE)
BASE = BASELINE.knobs()
TARGET = "toy: a 7M Llama-shaped model"
HISTORY = synthetic_history(BASELINE, 24)
ONE_LINE = "str"  # any string type works for the schema tests

MakeSteering = Callable[..., LLMProposer]


def sampler(kind: str = "tpe") -> ClassicalProposer:
    return ClassicalProposer(BASELINE, BASELINE_ID, SPACE, sampler=kind)  # type: ignore[arg-type]


@pytest.fixture
def make_steering(fake: FakeOpenAI) -> Iterator[MakeSteering]:
    made: list[LLMProposer] = []
    fake.default = steered()

    def make(kind: str = "tpe", **overrides: Any) -> LLMProposer:
        proposer = LLMProposer(fast_config(fake.base_url, **overrides), BASELINE, BASELINE_ID,
                               SPACE, TARGET, sampler=sampler(kind))
        made.append(proposer)
        return proposer

    yield make
    for proposer in made:
        proposer.close()


class TestSteeringConformance(ProposerConformance):
    @pytest.fixture
    def make_proposer(self, make_steering: MakeSteering) -> Callable[[], LLMProposer]:
        return make_steering


# --- the reply schema ----------------------------------------------------------------------


def test_the_schema_is_a_pick_a_short_list_of_changes_and_one_line() -> None:
    schema = decoding_schema(steer_model(SPACE, 4, str).model_json_schema())
    assert schema["required"] == ["pick", "hypothesis"]  # changes may be left out
    assert schema["properties"]["pick"]["enum"] == [0, 1, 2, 3]
    changes = schema["properties"]["changes"]
    assert changes["maxItems"] == MAX_CHANGES
    assert changes["items"]["properties"]["knob"]["enum"] == SPACE.names()
    assert "$ref" not in json.dumps(schema), "llama.cpp's grammar follows $ref poorly"


@pytest.mark.parametrize("reply", [
    '{"pick": 4, "hypothesis": "x"}',  # only candidates 0..3 exist
    '{"pick": "1", "hypothesis": "x"}',  # strict: a string is not an index
    '{"pick": 1, "changes": [{"knob": "optimizer.nope", "value": 1}], "hypothesis": "x"}',
    '{"pick": 1, "changes": [' + ", ".join(['{"knob": "optimizer.lr", "value": 0.01}'] * 4)
    + '], "hypothesis": "x"}',
])
def test_the_schema_refuses_what_it_can_pin(reply: str) -> None:
    with pytest.raises(ValueError):
        steer_model(SPACE, 4, str).model_validate_json(reply)


# --- values: clamped, snapped or refused -----------------------------------------------------


def test_a_number_outside_a_range_is_clamped_into_it_and_says_so() -> None:
    lr = SPACE.knob("optimizer.lr")
    assert knob_value(lr, 5.0) == (lr.high, f"clamped into [{lr.low:g}, {lr.high:g}]")
    assert knob_value(lr, lr.low) == (lr.low, "")
    warmup = SPACE.knob("schedule.warmup_steps")
    assert knob_value(warmup, 2.6) == (3, "clamped into [0, 6]")
    assert knob_value(warmup, -4) == (0, "clamped into [0, 6]")


def test_a_number_in_quotes_is_read_as_that_number_and_a_word_is_not() -> None:
    """A small model quotes its numbers ("rope_base": "10000"); that is still a number."""
    lr = SPACE.knob("optimizer.lr")
    assert knob_value(lr, "0.004") == (0.004, "")
    assert knob_value(lr, " 5 ") == (lr.high, f"clamped into [{lr.low:g}, {lr.high:g}]")
    for word in ("high", "nan", ""):
        with pytest.raises(ValueError, match="takes a number"):
            knob_value(lr, word)


def test_a_number_for_a_numeric_choice_snaps_to_the_nearest_choice() -> None:
    assert knob_value(SPACE.knob("batch_size"), 7) == (8, "nearest choice to 7")
    assert knob_value(SPACE.knob("batch_size"), "7") == (8, "nearest choice to 7.0")
    assert knob_value(SPACE.knob("batch_size"), 16) == (16, "")


@pytest.mark.parametrize(("knob", "value", "says"), [
    ("schedule.kind", "exponential", "one of 'cosine', 'linear', 'wsd'"),
    ("optimizer.lr", "high", "takes a number"),
    ("optimizer.lr", True, "takes a number"),
    ("optimizer.decay_embeddings", 1, "one of True, False"),
])
def test_a_value_the_knob_cannot_take_is_an_error_naming_what_it_takes(
        knob: str, value: Any, says: str) -> None:
    with pytest.raises(ValueError, match=knob) as raised:
        knob_value(SPACE.knob(knob), value)
    assert says in str(raised.value)


def test_changes_apply_to_the_picked_point_and_remember_what_they_replaced() -> None:
    point = {"optimizer.lr": 0.02, "schedule.kind": "cosine"}
    changed, made = apply_changes(SPACE, point, BASE, [
        {"knob": "optimizer.lr", "value": 0.003}, {"knob": "optimizer.beta2", "value": 0.97}])
    assert changed == {**point, "optimizer.lr": 0.003, "optimizer.beta2": 0.97}
    assert [(c.knob, c.was, c.value) for c in made] == [
        ("optimizer.lr", 0.02, 0.003), ("optimizer.beta2", BASE["optimizer.beta2"], 0.97)]


# --- the steering turn against a server --------------------------------------------------------


def test_the_proposal_is_the_picked_candidate_with_the_models_changes(
        fake: FakeOpenAI, make_steering: MakeSteering) -> None:
    fake.script(steered(pick=2, changes=[{"knob": "optimizer.lr", "value": 0.0042}]))
    proposal = make_steering().propose(HISTORY, 1)[0]

    candidates = sampler().suggest(HISTORY, 4, with_state=False)
    expected = SPACE.resolve({**candidates.points[2], "optimizer.lr": 0.0042}, BASE)
    assert proposal.edit == expected
    assert Recipe.model_validate(proposal.candidate).edit_from(BASELINE) == expected
    assert proposal.parent_id == BASELINE_ID
    assert proposal.proposer == "llm:fake-model" and proposal.fallback is None
    assert proposal.hypothesis.startswith("picked TPE candidate 2 of 4, lr ")
    assert len(proposal.hypothesis) <= PROMPT_HYPOTHESIS_CHARS

    record = json.loads(proposal.artifacts[STEER_ARTIFACT])
    assert record["pick"] == 2 and record["sampler"] == "TPE"
    assert record["candidates"] == [p.edit for p in candidates.proposals]
    assert record["changes"] == [{"knob": "optimizer.lr", "asked": 0.0042, "value": 0.0042,
                                  "was": candidates.points[2]["optimizer.lr"], "note": ""}]
    assert record["state"]["good"] == 2 and record["state_shown"]


def test_the_model_reads_the_candidates_the_state_the_noise_and_the_rejections(
        fake: FakeOpenAI, make_steering: MakeSteering) -> None:
    seeds = [Observation(trial_id=f"b{i}", status="complete", knobs=BASE, val_bpb=v,
                         proposer=BASELINE_PROPOSER) for i, v in enumerate((3.01, 3.04))]
    make_steering().propose([*seeds, *HISTORY], 1)

    body = fake.chat_requests()[0].body
    system, user = (m["content"] for m in body["messages"])
    assert '"pick": <0 to 3>' in system and "optimizer.lr: float in" in system
    assert "Noise floor: the baseline's 2 seeds span 0.0300" in user
    assert "memory: the candidate does not fit" in user  # the rejection reason
    assert "What the sampler has learned:" in user and "good trials" in user
    candidates = user.split("Candidates (each an edit from the baseline):\n")[1]
    assert [line.split(":")[0] for line in candidates.splitlines()[:4]] == ["0", "1", "2", "3"]
    assert user.rstrip().endswith("pick a candidate from 0 to 3.")


def test_the_request_constrains_the_reply_to_the_steering_schema(
        fake: FakeOpenAI, make_steering: MakeSteering) -> None:
    make_steering(structured_output="json_schema").propose(HISTORY, 1)
    schema = fake.chat_requests()[0].body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["pick"]["enum"] == [0, 1, 2, 3]


def test_the_request_types_each_change_by_its_knob_so_a_grammar_holds_a_number_to_a_number(
        fake: FakeOpenAI, make_steering: MakeSteering) -> None:
    make_steering(structured_output="json_schema").propose(HISTORY, 1)
    schema = fake.chat_requests()[0].body["response_format"]["json_schema"]["schema"]
    alternatives = schema["properties"]["changes"]["items"]["anyOf"]
    value = {a["properties"]["knob"]["const"]: a["properties"]["value"] for a in alternatives}

    assert list(value) == SPACE.names()
    assert value["optimizer.lr"] == {"type": "number"}  # never a word
    assert value["schedule.warmup_steps"] == {"type": "integer"}
    assert value["schedule.kind"] == {"enum": ["cosine", "linear", "wsd"]}
    assert all(a["required"] == ["knob", "value"] and a["additionalProperties"] is False
               for a in alternatives)


def test_an_invalid_reply_is_asked_again_with_the_problem_quoted(
        fake: FakeOpenAI, make_steering: MakeSteering) -> None:
    fake.script(text('{"pick": 1, "changes": [{"knob": "schedule.kind", "value": "step"}], '
                     '"hypothesis": "x"}'), steered(pick=0, changes=[]))
    proposal = make_steering().propose(HISTORY, 1)[0]

    assert len(fake.chat_requests()) == 2
    quoted = fake.chat_requests()[1].body["messages"][-1]["content"]
    assert "schedule.kind takes one of 'cosine', 'linear', 'wsd'; got 'step'" in quoted
    assert proposal.edit == sampler().propose(HISTORY, 1)[0].edit  # candidate 0 as drawn


def test_an_out_of_range_value_is_clamped_and_recorded(
        fake: FakeOpenAI, make_steering: MakeSteering) -> None:
    fake.script(steered(changes=[{"knob": "optimizer.lr", "value": 3.0}]))
    proposal = make_steering().propose(HISTORY, 1)[0]
    high = SPACE.knob("optimizer.lr").high
    assert proposal.edit["optimizer.lr"] == high
    change = json.loads(proposal.artifacts[STEER_ARTIFACT])["changes"][0]
    assert (change["asked"], change["value"]) == (3.0, high) and "clamped" in change["note"]


def test_the_sampler_is_told_the_pick_with_the_values_trained(
        make_steering: MakeSteering) -> None:
    proposal = make_steering("cmaes").propose(HISTORY, 1)[0]
    trained = Observation(trial_id="t900", status="complete", val_bpb=1.5,
                          knobs=flatten(proposal.candidate), proposer=proposal.proposer)

    told = sampler("cmaes").trials([*HISTORY, trained])[-1]
    assert told.state == TrialState.COMPLETE and told.value == 1.5
    assert told.params == SPACE.point_of(trained.knobs, BASE)
    assert told.params["optimizer.lr"] == 0.0042  # the model's change, not the draw


def test_several_at_once_are_distinct_picks_one_request_each(
        fake: FakeOpenAI, make_steering: MakeSteering) -> None:
    proposals = make_steering().propose(HISTORY, 2)
    assert len(proposals) == 2 and len(fake.chat_requests()) == 2
    assert proposals[0].candidate != proposals[1].candidate


def test_steering_needs_at_least_one_candidate(fake: FakeOpenAI) -> None:
    with pytest.raises(ValueError, match="candidates must be at least 1"):
        LLMProposer(fast_config(fake.base_url), BASELINE, BASELINE_ID, SPACE, TARGET,
                    sampler=sampler(), candidates=0)
