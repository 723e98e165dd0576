"""The reply schema generated from the search space, and replies read as a small model
writes them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from recipelab.proposer.llm_reply import edit_model, extract_json_object, read_reply_object
from tests.proposer.conftest import SPACE
from tests.proposer.fake_openai import (
    fake_openai_fixture,  # noqa: F401 - the `fake` fixture
    )

# --- the reply schema ------------------------------------------------------------------------


def test_the_schema_names_knobs_by_their_dotted_names_with_the_space_bounds() -> None:
    schema = edit_model(SPACE).model_json_schema()
    knobs = schema["$defs"]["EditKnobs"]
    assert set(knobs["properties"]) == set(SPACE.names())
    assert knobs["additionalProperties"] is False and schema["additionalProperties"] is False
    lr = knobs["properties"]["optimizer.lr"]["anyOf"][0]
    assert (lr["minimum"], lr["maximum"]) == (pytest.approx(1e-3), pytest.approx(0.1))
    assert knobs["properties"]["batch_size"]["anyOf"][0]["enum"] == [4, 8, 16]
    assert schema["required"] == ["edit", "hypothesis"]
    assert schema["properties"]["hypothesis"]["maxLength"] == 200


def test_the_schema_accepts_python_field_names_too() -> None:
    reply = edit_model(SPACE).model_validate(
        {"edit": {"optimizer__lr": 0.003}, "hypothesis": "lower"})
    assert reply.model_dump(by_alias=True, exclude_none=True)["edit"] == {"optimizer.lr": 0.003}


@pytest.mark.parametrize("reply", [
    {"edit": {"optimizer.lr": 1e9}, "hypothesis": "absurd"},
    {"edit": {"optimizer.lr": "0.003"}, "hypothesis": "a string for a number"},
    {"edit": {"schedule.warmup_steps": 2.5}, "hypothesis": "a float for an integer"},
    {"edit": {"batch_size": 12}, "hypothesis": "not a choice"},
    {"edit": {"optimizer.momentum": 0.9}, "hypothesis": "an unknown knob"},
    {"edit": {"optimizer.lr": 0.003}, "hypothesis": "ok", "command": "rm -rf /"},
    {"edit": {"optimizer.lr": 0.003}, "hypothesis": "two\nlines"},
    {"edit": {"optimizer.lr": 0.003}, "hypothesis": "   "},
    {"edit": {"optimizer.lr": 0.003}, "hypothesis": "x" * 201},
    {"edit": {"optimizer.lr": 0.003}},
])
def test_the_schema_rejects_what_is_outside_the_space(reply: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        edit_model(SPACE).model_validate_json(json.dumps(reply))


@pytest.mark.parametrize("reply", [
    '{"edit": {}, "hypothesis": "h"}',
    '```json\n{"edit": {}, "hypothesis": "h"}\n```',
    'Sure! Here is my proposal: {"edit": {}, "hypothesis": "h"} Hope it helps.',
])
def test_a_json_object_is_found_inside_fences_and_prose(reply: str) -> None:
    assert extract_json_object(reply) == '{"edit": {}, "hypothesis": "h"}'


def test_braces_and_escaped_quotes_inside_strings_do_not_end_the_object() -> None:
    obj = r'{"edit": {}, "hypothesis": "a \"}\" brace {"}'
    assert extract_json_object(f"{obj} trailing }}") == obj


def test_a_steering_reply_with_raw_line_breaks_in_its_strings_is_read_as_written() -> None:
    """Small models put a real line break or tab inside a JSON string; strict JSON refuses
    it, and three such replies in a row used to cost the LLM its turn."""
    raw = '{"pick": 1, "changes": [], "hypothesis": "lower the lr\n\tfor a\r\nlonger run"}'
    with pytest.raises(ValueError):
        json.loads(raw)
    assert read_reply_object(raw) == {"pick": 1, "changes": [],
                                      "hypothesis": "lower the lr \tfor a longer run"}


@pytest.mark.parametrize("reply", ["", "no json here", '{"edit": {"unclosed": 1}'])
def test_a_reply_without_a_complete_object_is_an_error(reply: str) -> None:
    with pytest.raises(ValueError, match="no complete JSON object"):
        extract_json_object(reply)
