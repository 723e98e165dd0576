"""The proxy must keep the target's shape, or its result says nothing about the target.

A proxy is predictive of the target because it shares head dimension, FFN ratio,
activation, norm, positional encoding, GQA ratio and QK-norm with it; only depth and width shrink.
A campaign may deliberately search one of these (for example the activation) by listing its
dotted name in ``GuardContext.searchable``; then the invariant is lifted for that knob.

The campaign's precision is held the same way: every trial trains in the baseline's
precision (``--precision``) unless ``precision`` is searchable, since a ranking that mixes
bf16 and fp32 trials compares numerics as much as recipes.
"""

from __future__ import annotations

import math
from typing import Any

from recipelab.guardrails.base import GuardContext
from recipelab.recipe import Recipe, Shape

FFN_RATIO_REL_TOL = 1e-6
"""ffn_ratio is a float (8/3, 11008/4096): equal within this relative tolerance."""


def _invariants(shape: Shape) -> dict[str, Any]:
    """The dotted knob names of the shape-faithfulness invariants and their values."""
    return {
        "shape.head_dim": shape.head_dim,
        "shape.ffn_ratio": shape.ffn_ratio,
        "shape.activation": shape.activation,
        "shape.norm": shape.norm,
        "shape.position": shape.position,
        "shape.gqa_ratio": shape.gqa_ratio,
        "shape.qk_norm": shape.qk_norm,
    }


def check_shape_invariants(recipe: Recipe, ctx: GuardContext) -> list[str]:
    """Reject a candidate whose shape invariants differ from the target's, unless searchable."""
    mine, target = _invariants(recipe.shape), _invariants(ctx.target.shape)
    reasons: list[str] = []
    for knob, want in target.items():
        have = mine[knob]
        if knob in ctx.searchable or _same(have, want):
            continue
        if knob == "shape.gqa_ratio":
            what, fix = f"{knob} (n_head // n_kv_head)", f"set shape.n_kv_head to n_head // {want}"
        else:
            what, fix = knob, f"set it to {want!r}"
        reasons.append(
            f"{what} is {have!r} but the target {ctx.target.name} has {want!r}; a proxy must "
            f"keep the target's value to predict it, so {fix} (or make {knob} searchable in "
            "the campaign settings)."
        )
    want_precision = ctx.baseline.precision
    if "precision" not in ctx.searchable and recipe.precision != want_precision:
        reasons.append(
            f"precision is {recipe.precision!r} but this campaign trains every trial in "
            f"{want_precision!r} (--precision), so its ranking compares recipes, not numerics; "
            f"set it to {want_precision!r} (or make precision searchable in the campaign "
            "settings: --searchable precision)."
        )
    return reasons


def _same(have: Any, want: Any) -> bool:
    if isinstance(want, float):
        return math.isclose(have, want, rel_tol=FFN_RATIO_REL_TOL)
    return bool(have == want)
