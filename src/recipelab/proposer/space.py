"""The declared search space: which knobs a proposer may move, and how far.

One :class:`SearchSpace` serves three readers. The classical proposer turns it into Optuna
distributions; the LLM proposer prints :meth:`SearchSpace.describe` into its prompt so the
model knows the ranges; the agent hands :meth:`SearchSpace.searchable_shape_knobs` to the
guardrails, which otherwise insist that a proxy keeps the target's shape.

Knobs are named by the dotted names of :meth:`recipelab.recipe.Recipe.knobs`, so a point in
the space is directly an edit of a recipe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from recipelab.recipe import Recipe

SHAPE_PREFIX = "shape."


def _same_choice(value: Any, choice: Any) -> bool:
    """Equality that keeps booleans apart from numbers (``True == 1`` in Python)."""
    return isinstance(value, bool) == isinstance(choice, bool) and bool(value == choice)


def _number(value: float) -> str:
    return f"{value:.4g}"


@dataclass(frozen=True)
class Knob:
    """One searchable knob: a numeric range (``low``/``high``) or a set of ``choices``.

    Invalid declarations fail at construction, so a bad space is found when a campaign
    starts rather than on the first proposal.
    """

    name: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    choices: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if self.choices is not None:
            if not self.choices:
                raise ValueError(f"knob {self.name}: choices must not be empty")
            if self.low is not None or self.high is not None or self.log or self.integer:
                raise ValueError(
                    f"knob {self.name}: give either choices or a range (low/high), not both"
                )
            return
        if self.low is None or self.high is None:
            raise ValueError(f"knob {self.name}: give a range (low and high) or choices")
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low > self.high:
            raise ValueError(
                f"knob {self.name}: need finite low <= high, got [{self.low}, {self.high}]"
            )
        if self.log and self.low <= 0:
            raise ValueError(f"knob {self.name}: a log-scale range needs low > 0, got {self.low}")
        if self.integer and not (float(self.low).is_integer() and float(self.high).is_integer()):
            raise ValueError(
                f"knob {self.name}: an integer range needs integer bounds, "
                f"got [{self.low}, {self.high}]"
            )

    def distribution(self) -> BaseDistribution:
        """The Optuna distribution of this knob."""
        if self.choices is not None:
            return CategoricalDistribution(self.choices)
        assert self.low is not None and self.high is not None  # checked in __post_init__
        if self.integer:
            return IntDistribution(int(self.low), int(self.high), log=self.log)
        return FloatDistribution(self.low, self.high, log=self.log)

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a point of this knob (right type, inside the range)."""
        if self.choices is not None:
            return any(_same_choice(value, choice) for choice in self.choices)
        assert self.low is not None and self.high is not None  # checked in __post_init__
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not isinstance(value, int):
            return False
        return math.isfinite(value) and self.low <= value <= self.high

    def describe(self) -> str:
        """One line for prompts and docs: ``optimizer.lr: float in [0.001, 0.1], log scale``."""
        if self.choices is not None:
            return f"{self.name}: one of {', '.join(repr(c) for c in self.choices)}"
        assert self.low is not None and self.high is not None  # checked in __post_init__
        kind = "integer" if self.integer else "float"
        scale = ", log scale" if self.log else ""
        return f"{self.name}: {kind} in [{_number(self.low)}, {_number(self.high)}]{scale}"


@dataclass(frozen=True)
class SearchSpace:
    """The knobs a campaign searches; every other knob stays at the parent's value."""

    knobs: tuple[Knob, ...]

    def __post_init__(self) -> None:
        names = self.names()
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"search space declares knob(s) twice: {', '.join(duplicates)}")

    def names(self) -> list[str]:
        return [knob.name for knob in self.knobs]

    def check_fits(self, baseline: Recipe) -> None:
        """Raise ValueError when the space names knobs the recipe does not have."""
        unknown = sorted(set(self.names()) - set(baseline.knobs()))
        if unknown:
            raise ValueError(f"search space names unknown recipe knob(s): {', '.join(unknown)}")

    def searchable_shape_knobs(self) -> frozenset[str]:
        """Shape knobs the space may vary; guardrails let exactly these differ from the target."""
        return frozenset(name for name in self.names() if name.startswith(SHAPE_PREFIX))

    def distributions(self) -> dict[str, BaseDistribution]:
        return {knob.name: knob.distribution() for knob in self.knobs}

    def describe(self) -> str:
        """One knob per line, in declaration order."""
        return "\n".join(knob.describe() for knob in self.knobs)


def default_space(baseline: Recipe) -> SearchSpace:
    """The optimizer, schedule and batch knobs around ``baseline``; no shape knobs.

    Ranges that depend on scale are relative to the baseline (learning rate within a decade
    either way, warmup up to a third of the run, batch halved or doubled) so the same space
    makes sense for the tiny CPU proxy and the Spark one. The shape is left out because the
    proxy's job is to keep the target's shape.
    """
    lr = baseline.optimizer.lr
    batch = baseline.batch_size
    batches = tuple(sorted({max(1, size) for size in (batch // 2, batch, batch * 2)}))
    return SearchSpace((
        Knob("optimizer.lr", lr / 10, min(1.0, lr * 10), log=True),
        Knob("optimizer.beta2", 0.9, 0.999),
        Knob("optimizer.weight_decay", 0.0, 0.3),
        Knob("optimizer.grad_clip", 0.25, 4.0),
        Knob("schedule.kind", choices=("cosine", "linear", "constant-cooldown")),
        Knob("schedule.warmup_steps", 0, max(1, baseline.steps // 3), integer=True),
        Knob("schedule.min_lr_ratio", 0.0, 0.5),
        Knob("batch_size", choices=batches),
    ))
