"""shape_invariants: the proxy keeps the target's shape unless the campaign searches a knob."""

from __future__ import annotations

from typing import Any

import pytest

from recipelab.guardrails import check_shape_invariants
from recipelab.recipe import Recipe
from tests.guardrails.factories import BASELINE, TARGET, context

# Each edit breaks exactly one invariant; the baseline is a tiny proxy of TARGET (toy).
BREAKS: list[tuple[str, dict[str, Any]]] = [
    ("shape.head_dim", {"shape.head_dim": 16}),
    ("shape.ffn_ratio", {"shape.ffn_ratio": 3.0}),
    ("shape.activation", {"shape.activation": "gelu"}),
    ("shape.norm", {"shape.norm": "layernorm"}),
    ("shape.position", {"shape.position": "learned"}),
    ("shape.gqa_ratio", {"shape.n_kv_head": 2}),
    ("shape.qk_norm", {"shape.qk_norm": True}),
]


def test_the_baseline_keeps_every_invariant() -> None:
    assert check_shape_invariants(BASELINE, context()) == []


@pytest.mark.parametrize(("knob", "edit"), BREAKS)
def test_a_broken_invariant_is_rejected_with_its_knob_and_both_values(
        knob: str, edit: dict[str, Any]) -> None:
    candidate = BASELINE.apply(edit)
    (reason,) = check_shape_invariants(candidate, context())
    assert reason.startswith(knob)
    assert f"the target {TARGET.name} has" in reason
    assert f"make {knob} searchable" in reason


def test_the_gqa_reason_says_which_knob_to_set() -> None:
    (reason,) = check_shape_invariants(BASELINE.apply({"shape.n_kv_head": 2}), context())
    assert reason.startswith("shape.gqa_ratio (n_head // n_kv_head) is 1 but the target toy has 2")
    assert "set shape.n_kv_head to n_head // 2" in reason


@pytest.mark.parametrize(("knob", "edit"), BREAKS)
def test_a_searchable_knob_lifts_its_invariant_only(knob: str, edit: dict[str, Any]) -> None:
    candidate = BASELINE.apply(edit)
    assert check_shape_invariants(candidate, context(searchable=frozenset({knob}))) == []
    others = frozenset(k for k, _ in BREAKS if k != knob)
    assert check_shape_invariants(candidate, context(searchable=others))


def test_ffn_ratio_equal_within_a_relative_millionth() -> None:
    def with_ratio(ratio: float) -> Recipe:
        return BASELINE.apply({"shape.ffn_ratio": ratio})

    assert check_shape_invariants(with_ratio(TARGET.shape.ffn_ratio * (1 + 1e-7)), context()) == []
    assert check_shape_invariants(with_ratio(TARGET.shape.ffn_ratio * (1 + 1e-5)), context())


def test_several_broken_invariants_give_one_reason_each() -> None:
    candidate = BASELINE.apply({"shape.activation": "relu2", "shape.norm": "layernorm"})
    assert len(check_shape_invariants(candidate, context())) == 2


def test_a_candidate_in_another_precision_than_the_campaigns_is_rejected() -> None:
    (reason,) = check_shape_invariants(BASELINE.apply({"precision": "bf16"}), context())
    assert reason.startswith("precision is 'bf16' but this campaign trains every trial in 'fp32'")
    assert "--searchable precision" in reason


def test_a_campaign_that_searches_precision_accepts_another_precision() -> None:
    candidate = BASELINE.apply({"precision": "bf16"})
    assert check_shape_invariants(candidate, context(searchable=frozenset({"precision"}))) == []
