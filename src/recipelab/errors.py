"""The root of every error recipelab raises, so the CLI catches one class, not a list.

A :class:`RecipelabError` says what was wrong (its message) and, where the raiser knows it,
what to do (``fix``), which the CLI prints on a line of its own. Each class also keeps the
builtin base its callers catch (``ValueError`` for bad input, ``RuntimeError`` for a
resource that is not there), so narrowing an ``except`` is never needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = ["RecipelabError", "one_line"]


class RecipelabError(Exception):
    """Something recipelab cannot do as asked; ``fix`` is the remedy, when one is known."""

    fix: str | None = None

    def __init__(self, *args: object, fix: str | None = None) -> None:
        super().__init__(*args)
        if fix is not None:
            self.fix = fix


def one_line(error: ValidationError) -> str:
    """A pydantic error as one line: each bad field, what is wrong, and the value given."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}"
        + (f" (got {e['input']!r})" if not isinstance(e.get("input"), dict) else "")
        for e in error.errors())
