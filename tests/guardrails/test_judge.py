"""judge(): the registry, the order of work and the collection of reasons."""

from __future__ import annotations

import pytest

import recipelab.guardrails as guardrails
from recipelab.guardrails import CHECKS, judge
from tests.guardrails.factories import BASELINE, OLD_CPU, context, unvalidated


def test_registry_holds_every_check_in_order() -> None:
    assert list(CHECKS) == ["ranges", "stability", "divisibility", "shape_invariants", "param_budget",
                            "duplicate", "hardware", "memory", "time"]


def test_every_exported_name_exists() -> None:
    for name in guardrails.__all__:
        assert hasattr(guardrails, name), name


def test_the_baseline_passes_every_check() -> None:
    verdict = judge(BASELINE, context())
    assert verdict.accepted, verdict.reasons
    assert verdict.recipe is BASELINE


def test_reasons_from_several_failing_checks_are_all_collected() -> None:
    candidate = BASELINE.apply({"steps": 40, "shape.activation": "gelu", "precision": "bf16"})
    verdict = judge(candidate, context(device=OLD_CPU, seen=frozenset({candidate.fingerprint()}),
                                       searchable=frozenset({"precision"})))
    assert not verdict.accepted
    assert verdict.recipe == candidate
    assert verdict.checks == ("ranges", "shape_invariants", "duplicate", "hardware")
    assert len(verdict.reasons) == 4
    for knob in ("steps", "shape.activation", "already ran", "bf16"):
        assert any(knob in reason for reason in verdict.reasons), knob


def test_only_the_named_checks_run() -> None:
    candidate = BASELINE.apply({"steps": 40, "shape.activation": "gelu"})
    verdict = judge(candidate, context(), checks=["shape_invariants"])
    assert verdict.checks == ("shape_invariants",)
    assert judge(candidate, context(), checks=[]).accepted


def test_an_unknown_check_name_is_the_callers_error() -> None:
    with pytest.raises(ValueError, match="unknown guardrail check"):
        judge(BASELINE, context(), checks=["ranges", "vibes"])


def test_a_check_that_crashes_rejects_instead_of_letting_the_recipe_through() -> None:
    broken = unvalidated(n_kv_head=0)  # only model_construct/model_copy can build this
    verdict = judge(broken, context())
    assert not verdict.accepted
    assert "divisibility" in verdict.checks
    assert any("ZeroDivisionError" in r and "rejected rather than trained unchecked" in r
               for r in verdict.reasons)
