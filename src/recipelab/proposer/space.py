"""The declared search space: which knobs a proposer may move, and how far.

One :class:`SearchSpace` serves three readers. The classical proposer turns it into Optuna
distributions; the LLM proposer prints :meth:`SearchSpace.describe` into its prompt so the
model knows the ranges; the agent hands :meth:`SearchSpace.searchable_shape_knobs` to the
guardrails, which otherwise insist that a proxy keeps the target's shape.

Knobs are named by the dotted names of :meth:`recipelab.recipe.Recipe.knobs`, so a point in
the space is nearly an edit of a recipe. Two things make it more than a flat box:

- a *conditional* knob exists only while another knob takes given values (the WSD decay
  fraction only under ``schedule.kind = "wsd"``), so no sampler wastes trials on a knob
  that changes nothing and no trial records a meaningless value;
- ``seq_len`` and ``grad_accum`` move at constant tokens per step: :meth:`SearchSpace.resolve`
  rescales ``batch_size`` when they change, so the batch-size knob alone sets the tokens a
  step trains on and the others only how they are split.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
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
BATCH = "batch_size"
TOKEN_SPLITTERS = ("seq_len", "grad_accum")
"""Knobs that move at constant tokens per step: changing them rescales ``batch_size``."""


def same_choice(value: Any, choice: Any) -> bool:
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
    condition: tuple[str, tuple[Any, ...]] | None = None
    """``(knob, values)``: this knob exists only while ``knob`` takes one of ``values``."""

    def __post_init__(self) -> None:
        if self.condition is not None and not self.condition[1]:
            raise ValueError(f"knob {self.name}: a condition needs at least one value")
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
            return any(same_choice(value, choice) for choice in self.choices)
        assert self.low is not None and self.high is not None  # checked in __post_init__
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not isinstance(value, int):
            return False
        return math.isfinite(value) and self.low <= value <= self.high

    def active(self, values: Mapping[str, Any]) -> bool:
        """Whether this knob exists at ``values`` (a point, over the parent's knobs)."""
        if self.condition is None:
            return True
        knob, allowed = self.condition
        return any(same_choice(values.get(knob), choice) for choice in allowed)

    def range_text(self) -> str:
        """``one of 'a', 'b'`` or ``float in [0.001, 0.1], log scale``."""
        if self.choices is not None:
            return f"one of {', '.join(repr(c) for c in self.choices)}"
        assert self.low is not None and self.high is not None  # checked in __post_init__
        kind = "integer" if self.integer else "float"
        scale = ", log scale" if self.log else ""
        return f"{kind} in [{_number(self.low)}, {_number(self.high)}]{scale}"

    def note(self) -> str:
        """When the knob applies and what else it moves; empty for a plain knob."""
        notes = []
        if self.condition is not None:
            knob, allowed = self.condition
            notes.append(f"only when {knob} is {' or '.join(repr(v) for v in allowed)}")
        if self.name in TOKEN_SPLITTERS:
            notes.append("batch_size rescales to keep tokens per step")
        return "; ".join(notes)

    def describe(self) -> str:
        """One line for prompts and docs: ``optimizer.lr: float in [0.001, 0.1], log scale``."""
        note = self.note()
        return f"{self.name}: {self.range_text()}" + (f" ({note})" if note else "")


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

    def knob(self, name: str) -> Knob:
        return next(knob for knob in self.knobs if knob.name == name)

    def describe(self) -> str:
        """One knob per line, in declaration order."""
        return "\n".join(knob.describe() for knob in self.knobs)

    def rows(self, baseline: Recipe) -> list[dict[str, Any]]:
        """The space as data, one dict per knob: name, range, default (the baseline's value)
        and note; what ``recipelab space`` prints as a table and as JSON."""
        base = baseline.knobs()
        rows = []
        for knob in self.knobs:
            row: dict[str, Any] = {"name": knob.name, "range": knob.range_text(),
                                   "default": base[knob.name], "note": knob.note()}
            if knob.choices is not None:
                row["choices"] = list(knob.choices)
            else:
                row |= {"low": knob.low, "high": knob.high, "log": knob.log,
                        "integer": knob.integer}
            if knob.condition is not None:
                row["condition"] = {"knob": knob.condition[0],
                                    "values": list(knob.condition[1])}
            rows.append(row)
        return rows

    def resolve(self, point: Mapping[str, Any], parent: Mapping[str, Any]) -> dict[str, Any]:
        """The recipe edit a point of the space makes to ``parent`` (dotted knobs).

        Inactive conditional knobs are dropped; a change of ``seq_len`` or ``grad_accum``
        rescales ``batch_size`` (the point's, else the parent's) so the tokens per step stay
        those the batch size sets, rounding down to at least one sequence.
        """
        values = {**parent, **point}
        edit = {name: value for name, value in point.items()
                if name not in self.names() or self.knob(name).active(values)}
        if any(name in point and point[name] != parent[name] for name in TOKEN_SPLITTERS):
            tokens = values[BATCH] * parent["seq_len"] * parent["grad_accum"]
            edit[BATCH] = max(1, tokens // (values["seq_len"] * values["grad_accum"]))
        return {name: value for name, value in edit.items() if parent.get(name) != value}

    def point_of(self, knobs: Mapping[str, Any], parent: Mapping[str, Any]) -> dict[str, Any]:
        """The point of this space a recipe's ``knobs`` lie at, relative to ``parent`` (the
        inverse of :meth:`resolve`): only active knobs, and ``batch_size`` as the batch the
        same tokens per step would have at the parent's ``seq_len`` and ``grad_accum``."""
        point = {knob.name: knobs.get(knob.name, parent.get(knob.name))
                 for knob in self.knobs if knob.active({**parent, **knobs})}
        if BATCH in point and all(name in knobs for name in (BATCH, *TOKEN_SPLITTERS)):
            tokens = knobs[BATCH] * knobs["seq_len"] * knobs["grad_accum"]
            per_parent = parent["seq_len"] * parent["grad_accum"]
            point[BATCH] = tokens // per_parent if tokens % per_parent == 0 else tokens / per_parent
        return point


SHAPE_KNOBS: dict[str, Knob] = {knob.name: knob for knob in (
    Knob("shape.activation", choices=("swiglu", "gelu", "gelu_exact", "relu2")),
    Knob("shape.norm", choices=("rmsnorm", "layernorm")),
    Knob("shape.qk_norm", choices=(False, True)),
    Knob("shape.position", choices=("rope", "learned")),
    Knob("shape.tie_embeddings", choices=(False, True)),
)}
"""Shape knobs ``--searchable`` may add to the space; every other shape knob is the proxy's
size (set by the budget) or the target's identity."""


PRECISION = "precision"
"""``--searchable precision`` searches the precision among those the machine can train;
without it every trial of a campaign trains in the campaign's ``--precision``."""


def check_searchable(names: Iterable[str]) -> None:
    """Raise ValueError naming the knobs that cannot be searched, and those that can."""
    unknown = sorted(set(names) - set(SHAPE_KNOBS) - {PRECISION})
    if unknown:
        raise ValueError(f"cannot search {', '.join(unknown)}; searchable shape knobs are "
                         f"{', '.join(SHAPE_KNOBS)} (and {PRECISION})")


def _factor_choices(value: int, factors: Iterable[float],
                    fits: Callable[[int], bool]) -> tuple[int, ...]:
    return tuple(sorted({int(value * f) for f in factors
                         if value * f >= 1 and fits(int(value * f))}))


def default_space(baseline: Recipe, searchable: Iterable[str] = (),
                  precisions: Iterable[str] = ()) -> SearchSpace:
    """The optimizer, schedule, stability and batch knobs around ``baseline``, plus the shape
    knobs named in ``searchable`` (see :data:`SHAPE_KNOBS`).

    Ranges that depend on scale are relative to the baseline (learning rate within a decade
    either way, warmup up to a third of the run, batch halved or doubled, sequence halved or
    doubled at constant tokens per step) so the same space makes sense for the tiny CPU
    proxy and the Spark one. A conditional knob is left out when its condition can never
    hold (the output layer's knobs with tied embeddings that are not searched).

    Precision is searched only when ``searchable`` names it (:data:`PRECISION`): a campaign
    trains in one precision, so its ranking compares recipes rather than numerics. Then
    ``precisions`` are those this machine can train (the hardware guardrail's verdict, which
    the caller has and the proposer must not import); with fewer than two, precision is not
    searched, since offering one the guardrails reject wastes every trial that picks it.
    """
    searchable = tuple(searchable)
    check_searchable(searchable)
    lr = baseline.optimizer.lr
    batch, seq, accum = baseline.batch_size, baseline.seq_len, baseline.grad_accum
    batches = tuple(sorted({max(1, size) for size in (batch // 2, batch, batch * 2)}))
    smallest = min(batches)
    # seq_len and grad_accum may only take values that leave every batch choice whole, the
    # smallest batch at the longest sequence and the most accumulation included.
    tokens = smallest * seq * accum
    seqs = _factor_choices(seq, (0.5, 1, 2), lambda s: s >= 4 and tokens % (s * accum) == 0)
    accums = _factor_choices(accum, (1, 2, 4), lambda a: tokens % (max(seqs) * a) == 0)
    rope = baseline.shape.rope_base
    precision_choices = tuple(dict.fromkeys(
        (baseline.precision, *(precisions if PRECISION in searchable else ()))))
    knobs = [
        Knob("optimizer.lr", lr / 10, min(1.0, lr * 10), log=True),
        Knob("optimizer.beta1", 0.8, 0.95),
        Knob("optimizer.beta2", 0.9, 0.999),
        Knob("optimizer.eps", 1e-10, 1e-6, log=True),
        Knob("optimizer.weight_decay", 0.0, 0.3),
        Knob("optimizer.grad_clip", 0.25, 4.0),
        Knob("optimizer.lr_embed_mult", 0.1, 10.0, log=True),
        Knob("optimizer.lr_output_mult", 0.1, 10.0, log=True,
             condition=("shape.tie_embeddings", (False,))),
        Knob("optimizer.lr_hidden_mult", 0.1, 10.0, log=True),
        Knob("optimizer.decay_embeddings", choices=(True, False)),
        Knob("optimizer.decay_norms", choices=(False, True)),
        Knob("schedule.kind", choices=("cosine", "linear", "wsd")),
        Knob("schedule.warmup_steps", 0, max(1, baseline.steps // 3), integer=True),
        Knob("schedule.min_lr_ratio", 0.0, 0.5),
        Knob("schedule.decay_fraction", 0.05, 0.5, condition=("schedule.kind", ("wsd",))),
        Knob("stability.z_loss", 0.0, 1e-3),
        Knob("stability.logit_softcap", choices=(0.0, 15.0, 30.0, 50.0)),
        Knob("stability.init_std", 0.005, 0.05, log=True),
        Knob("stability.output_init_std", 0.005, 0.05, log=True,
             condition=("shape.tie_embeddings", (False,))),
        Knob("stability.depth_scaled_init", choices=(True, False)),
        Knob("shape.rope_base", rope / 10, min(1e9, rope * 10), log=True,
             condition=("shape.position", ("rope",))),
        Knob(BATCH, choices=batches),
        Knob("seq_len", choices=seqs),
        Knob("grad_accum", choices=accums),
        Knob("precision", choices=precision_choices),
        *(SHAPE_KNOBS[name] for name in SHAPE_KNOBS if name in searchable),
    ]
    base = baseline.knobs()
    names = {knob.name for knob in knobs}
    return SearchSpace(tuple(
        knob for knob in knobs
        if knob.condition is None or knob.condition[0] in names or knob.active(base)
        if knob.choices is None or len(knob.choices) > 1))
