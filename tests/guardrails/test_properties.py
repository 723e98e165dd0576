"""Property: arbitrary JSON-like edits never make judge() raise, and what it accepts is valid."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from recipelab.guardrails import judge
from recipelab.recipe import Recipe
from tests.guardrails.factories import BASELINE, context, measured

KNOBS = sorted(BASELINE.knobs())
CHOICES = ["swiglu", "gelu", "relu2", "rmsnorm", "layernorm", "rope", "learned", "fp32",
           "bf16", "fp8", "byte", "bpe", "cosine", "linear", "wsd"]

json_leaves = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
               | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=6,
)


def near(value: Any) -> st.SearchStrategy[Any]:
    """Values of the same kind as a real knob's, so a fair share get past the schema."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.integers(0, 4 * value + 8)
    if isinstance(value, float):
        return st.floats(0.0, 4 * value + 1.0)
    return st.sampled_from(CHOICES)


plausible_edits = st.lists(
    st.sampled_from(KNOBS).flatmap(lambda k: st.tuples(st.just(k), near(BASELINE.knobs()[k]))),
    max_size=3,
).map(dict)
hostile_edits: st.SearchStrategy[dict[str, Any]] = st.just({}) | st.dictionaries(
    st.sampled_from(KNOBS) | st.text(min_size=1, max_size=10), json_values, min_size=1, max_size=2)
edits = st.tuples(plausible_edits, hostile_edits).map(lambda pair: {**pair[0], **pair[1]})

CTX = context(measurements=(measured(BASELINE, overhead_s=1.0),), timeout_s=3600.0)


def merged(edit: dict[str, Any]) -> dict[str, Any]:
    """The baseline's model_dump with each dotted key of ``edit`` set, whatever was there."""
    data = BASELINE.model_dump()
    for dotted, value in edit.items():
        *parents, leaf = dotted.split(".")
        node = data
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[leaf] = value
    return data


@settings(max_examples=200, deadline=None)
@given(edits)
def test_judge_never_raises_and_only_accepts_valid_recipes(edit: dict[str, Any]) -> None:
    verdict = judge(merged(edit), CTX)
    assert verdict.accepted == (not verdict.reasons)
    assert all(isinstance(reason, str) and reason for reason in verdict.reasons)
    if not verdict.accepted:
        return
    assert isinstance(verdict.recipe, Recipe)
    assert Recipe.model_validate(verdict.recipe.model_dump()) == verdict.recipe
    assert all(math.isfinite(v) for v in verdict.recipe.knobs().values()
               if isinstance(v, float))
    assert (verdict.recipe.steps, verdict.recipe.eval_bytes) == (BASELINE.steps,
                                                                 BASELINE.eval_bytes)
