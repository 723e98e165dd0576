"""Schema: plain data that is not a valid Recipe becomes readable reasons, never an exception."""

from __future__ import annotations

from typing import Any

import pytest

from recipelab.guardrails import SCHEMA, judge
from tests.guardrails.factories import BASELINE, context


def candidate(**changes: Any) -> dict[str, Any]:
    """The baseline as plain data with ``changes`` applied (dotted names reach nested knobs)."""
    data = BASELINE.model_dump()
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[leaf] = value
    return data


def rejected(data: Any) -> tuple[str, ...]:
    verdict = judge(data, context())
    assert not verdict.accepted
    assert verdict.recipe is None
    assert verdict.checks == (SCHEMA,)
    return verdict.reasons


def test_plain_data_of_a_valid_recipe_is_accepted_as_that_recipe() -> None:
    verdict = judge(candidate(), context())
    assert verdict.accepted, verdict.reasons
    assert verdict.recipe == BASELINE
    assert verdict.reasons == () and verdict.checks == ()


def test_out_of_range_value_names_the_dotted_knob_the_bound_and_the_value() -> None:
    assert rejected(candidate(**{"optimizer.lr": 5.0})) == (
        "optimizer.lr: Input should be less than or equal to 1 (got 5.0)",)


@pytest.mark.parametrize(("knob", "value"), [
    ("batch_size", "lots"), ("shape.n_layer", [2]), ("shape.activation", "tanh"),
    ("schedule.warmup_steps", 2.5), ("shape", "tiny"),
])
def test_wrong_type_names_the_dotted_knob_and_the_value(knob: str, value: Any) -> None:
    (reason,) = rejected(candidate(**{knob: value}))
    assert reason.startswith(f"{knob}: ")
    assert f"(got {value!r})" in reason


def test_unknown_key_is_named_not_ignored() -> None:
    data = candidate()
    data["optimizer"]["momentum"] = 0.9
    assert rejected(data) == ("optimizer.momentum: Extra inputs are not permitted (got 0.9)",)


def test_missing_knob_is_named_without_echoing_the_enclosing_object() -> None:
    data = candidate()
    del data["shape"]["n_layer"]
    assert rejected(data) == ("shape.n_layer: Field required",)


def test_cross_field_error_reads_as_a_sentence_at_its_location() -> None:
    (reason,) = rejected(candidate(**{"shape.n_kv_head": 3}))
    assert reason.startswith("shape: n_head (2) must be a multiple of n_kv_head (3)")
    (reason,) = rejected(candidate(**{"shape.vocab_size": 100}))
    assert reason == "recipe: the byte tokenizer needs vocab_size >= 256, got 100"


def test_every_error_is_reported_and_no_other_check_runs() -> None:
    data = candidate(**{"optimizer.lr": 5.0, "steps": 0, "shape.activation": "tanh"})
    data["bogus"] = True
    reasons = rejected(data)
    assert sorted(r.split(":")[0] for r in reasons) == [
        "bogus", "optimizer.lr", "shape.activation", "steps"]


@pytest.mark.parametrize("data", [None, [1, 2], "a recipe", 42])
def test_a_candidate_that_is_not_a_mapping_is_rejected(data: Any) -> None:
    (reason,) = rejected(data)
    assert reason.startswith("recipe: Input should be a valid dictionary")


def test_hostile_values_and_keys_are_echoed_briefly() -> None:
    data = candidate(**{"seed": 10**5000, "shape.activation": "x" * 100_000})
    data["k" * 10_000] = 1
    reasons = rejected(data)
    assert len(reasons) == 3
    assert all(len(r) < 200 for r in reasons)
    assert any(r.startswith("seed: ") and "too large to print" in r for r in reasons)
