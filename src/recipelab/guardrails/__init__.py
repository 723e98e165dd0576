"""Guardrails: turn a candidate into a verdict, so nothing unchecked reaches a trainer.

Candidates come from Optuna or from an LLM, so they are treated as hostile data: the schema
is validated first (and nothing else runs if it fails), then every registered check runs and
all their reasons are collected, because a person and the LLM's next turn both learn more
from every problem at once than from the first. A rejection costs no training.

A check is a plain callable registered by name in :data:`CHECKS`; see
:data:`~recipelab.guardrails.base.Check`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from recipelab.guardrails.base import (
    Check,
    DeviceInfo,
    GuardContext,
    Measurement,
    Verdict,
)
from recipelab.guardrails.checks_recipe import (
    check_divisibility,
    check_duplicate,
    check_param_budget,
    check_ranges,
)
from recipelab.guardrails.hardware import check_hardware, detect_device
from recipelab.guardrails.invariants import check_shape_invariants
from recipelab.guardrails.memory import (
    analytic_peak_bytes,
    calibration_factor,
    check_memory,
    predict_peak_bytes,
)
from recipelab.guardrails.schema import parse_candidate, show
from recipelab.guardrails.stability import check_stability
from recipelab.guardrails.timing import check_time, predict_trial_seconds
from recipelab.recipe import Recipe
from recipelab.units import GIB

SCHEMA = "schema"
"""The name :attr:`Verdict.checks` carries when the candidate is not a valid Recipe."""

CHECKS: dict[str, Check] = {
    "ranges": check_ranges,
    "stability": check_stability,
    "divisibility": check_divisibility,
    "shape_invariants": check_shape_invariants,
    "param_budget": check_param_budget,
    "duplicate": check_duplicate,
    "hardware": check_hardware,
    "memory": check_memory,
    "time": check_time,
}
"""Every check by name, in the order :func:`judge` runs them (cheap and static first)."""


def judge(candidate: Mapping[str, Any] | Recipe, ctx: GuardContext,
          checks: Iterable[str] | None = None) -> Verdict:
    """The verdict on ``candidate``: schema first, then ``checks`` (default: all of CHECKS).

    Plain data is validated as a Recipe; a Recipe instance is taken as already validated,
    which is why checks such as ``divisibility`` repeat the schema's cross-field rules.

    Never raises on a bad candidate: schema errors and failing checks become reasons, and a
    check that crashes on an odd recipe rejects it rather than letting it through unchecked.
    Unknown check names raise ValueError, since they are the caller's mistake.
    """
    names = list(CHECKS) if checks is None else list(checks)
    unknown = [name for name in names if name not in CHECKS]
    if unknown:
        raise ValueError(f"unknown guardrail check(s) {', '.join(unknown)}; "
                         f"choose among {', '.join(CHECKS)}")
    if isinstance(candidate, Recipe):
        recipe = candidate
    else:
        parsed, schema_reasons = parse_candidate(candidate)
        if parsed is None:
            return Verdict(False, None, tuple(schema_reasons), (SCHEMA,))
        recipe = parsed
    reasons: list[str] = []
    rejected_by: list[str] = []
    for name in names:
        found = _run_check(name, recipe, ctx)
        if found:
            reasons.extend(found)
            rejected_by.append(name)
    return Verdict(not reasons, recipe, tuple(reasons), tuple(rejected_by))


def _run_check(name: str, recipe: Recipe, ctx: GuardContext) -> list[str]:
    try:
        return CHECKS[name](recipe, ctx)
    except Exception as exc:  # a Recipe built with model_construct can break any arithmetic
        return [f"check {name} could not evaluate this recipe ({type(exc).__name__}: "
                f"{show(str(exc))}), so it is rejected rather than trained unchecked."]


__all__ = [
    "CHECKS",
    "GIB",
    "SCHEMA",
    "Check",
    "DeviceInfo",
    "GuardContext",
    "Measurement",
    "Verdict",
    "analytic_peak_bytes",
    "calibration_factor",
    "check_divisibility",
    "check_duplicate",
    "check_hardware",
    "check_memory",
    "check_param_budget",
    "check_ranges",
    "check_shape_invariants",
    "check_stability",
    "check_time",
    "detect_device",
    "judge",
    "predict_peak_bytes",
    "predict_trial_seconds",
]
