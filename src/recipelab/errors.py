"""The root of every error recipelab raises, so the CLI catches one class, not a list.

A :class:`RecipelabError` says what was wrong (its message) and, where the raiser knows it,
what to do (``fix``), which the CLI prints on a line of its own. Each class also keeps the
builtin base its callers catch (``ValueError`` for bad input, ``RuntimeError`` for a
resource that is not there), so narrowing an ``except`` is never needed.
"""

from __future__ import annotations

__all__ = ["RecipelabError"]


class RecipelabError(Exception):
    """Something recipelab cannot do as asked; ``fix`` is the remedy, when one is known."""

    fix: str | None = None

    def __init__(self, *args: object, fix: str | None = None) -> None:
        super().__init__(*args)
        if fix is not None:
            self.fix = fix
