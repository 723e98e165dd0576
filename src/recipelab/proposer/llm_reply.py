"""What the LLM must answer, and how its answer is read.

The schema is generated from the search space: one JSON object with an edit of typed,
bounded, optional knobs and a one-line hypothesis (or a list of them when several trials
start at once). A reply is read as a small model writes it (a code fence or prose around
the object, a raw line break inside a string) and validated with pydantic; why it failed
is quoted back to the model in words it can act on.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    create_model,
)

from recipelab.proposer.prompt import (
    HYPOTHESIS_CHARS,
)
from recipelab.proposer.space import Knob, SearchSpace
from recipelab.text import clip

ERROR_CHARS = 600
INPUT_CHARS = 60
LINE_BREAKS = re.compile(r"[\r\n]+")

Hypothesis = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                              max_length=HYPOTHESIS_CHARS,
                                              pattern=r"^[^\r\n]+$")]


def field_name(knob: str) -> str:
    """A Python identifier for a dotted knob name: ``optimizer.lr`` → ``optimizer__lr``."""
    return knob.replace(".", "__")


def _knob_field(knob: Knob) -> tuple[Any, Any]:
    """An optional pydantic field holding exactly the values the knob allows."""
    if knob.choices is not None:
        choices: Any = Literal.__getitem__(knob.choices)
        return choices | None, Field(default=None, alias=knob.name)
    assert knob.low is not None and knob.high is not None  # a range, by Knob's own check
    if knob.integer:
        return int | None, Field(default=None, alias=knob.name, ge=int(knob.low),
                                 le=int(knob.high))
    return float | None, Field(default=None, alias=knob.name, ge=knob.low, le=knob.high,
                               allow_inf_nan=False)


def edit_model(space: SearchSpace) -> type[BaseModel]:
    """The reply schema: ``{"edit": {<knob>: <value>, ...}, "hypothesis": "<one line>"}``.

    Every knob is optional, typed and bounded by the space; unknown keys are errors, and
    validation is strict (no ``"0.1"`` for a number), so what passes is a point of the space.
    """
    fields: dict[str, Any] = {field_name(knob.name): _knob_field(knob) for knob in space.knobs}
    knobs = create_model(
        "EditKnobs",
        __config__=ConfigDict(extra="forbid", populate_by_name=True, strict=True), **fields)
    return create_model("Edit", __config__=ConfigDict(extra="forbid", strict=True),
                        edit=(knobs, ...), hypothesis=(Hypothesis, ...))


def batch_model(edit: type[BaseModel], n: int) -> type[BaseModel]:
    """The reply schema when ``n`` > 1 trials run at once: ``{"edits": [<edit reply>, ...]}``
    with one to ``n`` items, each exactly what :func:`edit_model` accepts."""
    items = Annotated[list[edit], Field(min_length=1, max_length=n)]  # type: ignore[valid-type]
    return create_model("Edits", __config__=ConfigDict(extra="forbid", strict=True),
                        edits=(items, ...))


def batch_request(n: int) -> str:
    """What the user message adds when ``n`` edits are wanted from one reply."""
    return (f"{n} trials will train at the same time: propose {n} different edits at once, as "
            'one JSON object {"edits": [{"edit": {...}, "hypothesis": "..."}, ...]} holding '
            f"{n} items, each following the rules for one edit.")


READER = json.JSONDecoder(strict=False)
"""Reads a reply as a small model writes it: a raw line break or tab inside a string is kept."""


def extract_json_object(text: str) -> str:
    """The JSON object at the first ``{`` in ``text``, where json's own scanner ends it:
    tolerates a code fence or prose around it and a raw line break inside a string."""
    incomplete = "the reply holds no complete JSON object; reply with one JSON object only"
    start = text.find("{")
    if start < 0:
        raise ValueError(incomplete)
    try:
        _, end = READER.raw_decode(text, start)
    except json.JSONDecodeError as error:
        if error.pos >= len(text.rstrip()):  # the text ended inside the object
            raise ValueError(incomplete) from None
        raise ValueError(f"Invalid JSON: {error}; reply with one JSON object only") from None
    return text[start:end]


def read_reply_object(reply: str) -> Any:
    """The reply's JSON object, read as a small model writes it: a raw line break or tab
    inside a string is taken as written (``strict=False``), and line breaks in the one-line
    hypothesis become spaces. Anything else malformed is a ValueError, quoted back."""
    data = READER.decode(extract_json_object(reply))
    if isinstance(data, dict) and isinstance(data.get("hypothesis"), str):
        data["hypothesis"] = LINE_BREAKS.sub(" ", data["hypothesis"])
    return data


def quote_error(exc: Exception) -> str:
    """A short, model-readable account of why a reply was invalid."""
    if not isinstance(exc, ValidationError):
        return clip(str(exc), ERROR_CHARS)
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "reply"
        given = error.get("input")
        got = "" if isinstance(given, dict) else f" (got {clip(repr(given), INPUT_CHARS)})"
        problems.append(f"{where}: {error['msg']}{got}")
    return clip("; ".join(problems), ERROR_CHARS)
