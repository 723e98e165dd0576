"""The first guardrail: turn plain data (possibly an LLM's hostile reply) into a Recipe.

Pydantic's errors are precise but its exception text is written for programmers. Each error
becomes one sentence naming the dotted knob, what was wrong and the value that was given, so
a person and the LLM on its next turn can both act on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

if TYPE_CHECKING:  # pydantic's own dependency, for the annotation only
    from pydantic_core import ErrorDetails

from recipelab.recipe import Recipe

MAX_SHOWN_CHARS = 60
"""Longest value or key echoed back in a reason: a hostile candidate must not flood it."""


def parse_candidate(candidate: Any) -> tuple[Recipe | None, list[str]]:
    """The validated recipe, or None and one reason per schema error."""
    try:
        return Recipe.model_validate(candidate), []
    except ValidationError as exc:
        return None, [_error_reason(error) for error in exc.errors(include_url=False)]


def _error_reason(error: ErrorDetails) -> str:
    where = _clip(".".join(str(part) for part in error["loc"])) or "recipe"
    message = error["msg"].removeprefix("Value error, ")
    given = error.get("input")
    # Missing fields and cross-field validators report the whole enclosing object as the
    # input; echoing it would bury the message, and the message already names the values.
    if error["type"] == "missing" or isinstance(given, Mapping):
        return f"{where}: {message}"
    return f"{where}: {message} (got {show(given)})"


def show(value: Any) -> str:
    """A short, safe ``repr`` of an untrusted value."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for str() (sys.set_int_max_str_digits)
        text = f"<{type(value).__name__} too large to print>"
    return _clip(text)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 3] + "..."
