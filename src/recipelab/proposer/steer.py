"""The steering turn's reply: which sampler candidate the LLM picks, and what it changes.

On a steering turn the classical sampler draws K candidates and the LLM answers with

    {"pick": 2, "changes": [{"knob": "optimizer.lr", "value": 0.003}], "hypothesis": "..."}

an index, at most :data:`MAX_CHANGES` knob changes to that candidate (optional) and one
line. The schema is that small on purpose: a 135M model fills an integer and a short list
validly where twenty bounded numbers defeat it. Everything the grammar can pin is pinned
(``pick`` and ``knob`` are enums, the list is bounded); what it cannot, the value, is checked
here against the knob: a number outside a range is clamped into it (integers rounded), a
number in quotes for a range is read as that number, a number for a numeric choice snaps to
the nearest choice, and anything else (a word for a number, a choice the knob lacks) is an
error quoted back to the model by the re-ask.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from recipelab.proposer.space import Knob, SearchSpace, same_choice

MAX_CHANGES = 3
DEFAULT_CANDIDATES = 4
STEER_ARTIFACT = "steer.json"


def steer_model(space: SearchSpace, candidates: int, hypothesis: Any) -> type[BaseModel]:
    """The reply schema for ``candidates`` candidates over ``space``'s knobs; ``hypothesis``
    is the one-line string type the free-form edit uses too."""
    if candidates < 1:
        raise ValueError(f"a steering turn needs at least one candidate, got {candidates}")
    picks: Any = Literal.__getitem__(tuple(range(candidates)))
    knobs: Any = Literal.__getitem__(tuple(space.names()))
    change = create_model(
        "Change", __config__=ConfigDict(extra="forbid", strict=True),
        knob=(knobs, ...), value=(bool | int | float | str, ...))
    changes: Any = list[change]
    return create_model(
        "Steer", __config__=ConfigDict(extra="forbid", strict=True),
        pick=(picks, ...),
        changes=(changes, Field(default_factory=list, max_length=MAX_CHANGES)),
        hypothesis=(hypothesis, ...))


def value_schema(knob: Knob) -> dict[str, Any]:
    """What a grammar can hold of ``knob``'s value: its choices, else an integer or a number
    (a float's range is beyond llama.cpp's grammar; :func:`knob_value` clamps into it)."""
    if knob.choices is not None:
        return {"enum": list(knob.choices)}
    return {"type": "integer" if knob.integer else "number"}


def typed_changes(schema: dict[str, Any], space: SearchSpace) -> dict[str, Any]:
    """``schema`` (the reply's, as sent) with each change typed by its knob: one alternative
    per knob, ``{"knob": NAME, "value": what NAME takes}``. A server that turns the schema
    into a grammar then cannot let a small model write a word where a number goes (the
    failure that cost SmolLM2 whole turns); validation stays :func:`steer_model`'s."""
    items = {"anyOf": [{"type": "object",
                        "properties": {"knob": {"const": knob.name}, "value": value_schema(knob)},
                        "required": ["knob", "value"], "additionalProperties": False}
                       for knob in space.knobs]}
    changes = {**schema["properties"]["changes"], "items": items}
    return {**schema, "properties": {**schema["properties"], "changes": changes}}


@dataclass(frozen=True)
class Change:
    """One knob the LLM moved on its pick: what it asked for and what it got."""

    knob: str
    asked: Any
    value: Any
    was: Any  # the candidate's value (the parent's when the candidate left it alone)
    note: str = ""  # "clamped to ..." or "nearest choice ..." when ``value`` != ``asked``


def knob_value(knob: Knob, asked: Any) -> tuple[Any, str]:
    """``asked`` as a value of ``knob`` and a note when it had to be moved; ValueError, with
    what the knob takes, when it cannot be."""
    numeric = isinstance(asked, (int, float)) and not isinstance(asked, bool)
    if knob.choices is not None:
        for choice in knob.choices:
            if same_choice(asked, choice):
                return choice, ""
        asked, numeric = _quoted_number(asked, numeric)
        numbers = [c for c in knob.choices
                   if isinstance(c, (int, float)) and not isinstance(c, bool)]
        if numeric and math.isfinite(asked) and numbers:
            nearest = min(numbers, key=lambda c: (abs(c - asked), c))
            return nearest, f"nearest choice to {asked!r}"
        raise ValueError(f"{knob.name} takes {knob.range_text()}; got {asked!r}")
    assert knob.low is not None and knob.high is not None  # a range, by Knob's own check
    asked, numeric = _quoted_number(asked, numeric)
    if not numeric or not math.isfinite(asked):
        raise ValueError(f"{knob.name} takes a number ({knob.range_text()}); got {asked!r}")
    value: float | int = min(max(asked, knob.low), knob.high)
    if knob.integer:
        value = round(value)
    elif isinstance(value, int):
        value = float(value)
    moved = value != asked
    return value, f"clamped into [{knob.low:g}, {knob.high:g}]" if moved else ""


def _quoted_number(asked: Any, numeric: bool) -> tuple[Any, bool]:
    """``"10000"`` as 10000.0: a small model quotes its numbers. Anything else unchanged."""
    if isinstance(asked, str):
        with contextlib.suppress(ValueError):
            return float(asked), True
    return asked, numeric


def apply_changes(space: SearchSpace, point: dict[str, Any], parent: dict[str, Any],
                  changes: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Change]]:
    """``point`` with ``changes`` applied (later changes of a knob win), and each change as
    made. Raises ValueError naming the knob and what it takes when a value cannot be used."""
    changed = dict(point)
    made: dict[str, Change] = {}
    for item in changes:
        name, asked = item["knob"], item["value"]
        value, note = knob_value(space.knob(name), asked)
        was = made[name].was if name in made else point.get(name, parent.get(name))
        made[name] = Change(name, asked, value, was, note)
        changed[name] = value
    return changed, list(made.values())


def steer_line(sampler: str, pick: int, candidates: int, changes: list[Change],
               hypothesis: str) -> str:
    """The recorded hypothesis: which candidate, what changed, then the model's line."""
    moved = ", ".join(f"{c.knob.rsplit('.', 1)[-1]} {_short(c.was)}→{_short(c.value)}"
                      for c in changes if c.value != c.was)
    head = f"picked {sampler} candidate {pick} of {candidates}"
    return f"{head}, {moved}: {hypothesis}" if moved else f"{head}: {hypothesis}"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
