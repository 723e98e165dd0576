"""TransformerEngine's shape rules for FP8, checked before a trial rather than at its first step.

``te.Linear`` refuses an FP8 GEMM unless the tokens it multiplies are divisible by 8 and its
in_features by 16 (``assert_dim_for_fp8_exec``), and the backward pass's transposed GEMMs
need out_features and the tokens divisible by 16 (cuBLASLt's leading-dimension rule). A
recipe that breaks them would crash at step 0 on the GPU, so it is rejected here, with the
offending knob and its nearest legal values. Proxies derived by :mod:`recipelab.recipe`
meet the rules by construction; these reasons are for edited and hand-written recipes.
"""

from __future__ import annotations

import math

from recipelab.recipe import FP8_TOKEN_MULTIPLE, FP8_WIDTH_MULTIPLE, Recipe, Shape

WIDTH_RULE = (
    f"TransformerEngine's FP8 GEMMs need every te.Linear's in_features and out_features "
    f"divisible by {FP8_WIDTH_MULTIPLE}"
)


def fp8_shape_reasons(recipe: Recipe) -> list[str]:
    """Why TransformerEngine would refuse ``recipe``'s FP8 GEMMs; empty when it would not."""
    if recipe.precision != "fp8":
        return []
    reasons = [_width_reason(recipe.shape, width, uses)
               for width, uses in _illegal_widths(recipe.shape).items()]
    tokens = recipe.batch_size * recipe.seq_len
    if tokens % FP8_TOKEN_MULTIPLE:
        rows = FP8_TOKEN_MULTIPLE // math.gcd(recipe.seq_len, FP8_TOKEN_MULTIPLE)
        reasons.append(
            f"precision 'fp8' needs batch_size × seq_len divisible by {FP8_TOKEN_MULTIPLE}, but "
            f"{recipe.batch_size} × {recipe.seq_len} = {tokens} tokens per micro-batch: "
            "TransformerEngine's FP8 GEMMs need the token count divisible by 8 in the forward "
            f"pass and by {FP8_TOKEN_MULTIPLE} for the weight gradient. Set seq_len to a "
            f"multiple of {FP8_TOKEN_MULTIPLE} ({_neighbours(recipe.seq_len)}) or batch_size "
            f"to a multiple of {rows}, or use bf16."
        )
    return reasons


def _illegal_widths(shape: Shape) -> dict[int, list[str]]:
    """Each width no FP8 GEMM accepts, with the layer sides that have it (in model order)."""
    found: dict[int, list[str]] = {}
    for layer in shape.linear_layers():
        for side, width in (("in_features", layer.in_features),
                            ("out_features", layer.out_features)):
            if width % FP8_WIDTH_MULTIPLE:
                found.setdefault(width, []).append(f"{layer.name} {side}")
    return found


def _width_reason(shape: Shape, width: int, uses: list[str]) -> str:
    if width == shape.d_model:
        what = "shape.d_model"
        fix = (f"set shape.d_model to a multiple of {FP8_WIDTH_MULTIPLE} "
               f"({_neighbours(shape.d_model)})")
    else:
        what = "a width derived from shape.head_dim and the head counts"
        fix = (f"set shape.head_dim to a multiple of {FP8_WIDTH_MULTIPLE} "
               f"({_neighbours(shape.head_dim)})")
    return (
        f"precision 'fp8' cannot run {', '.join(uses)} = {width} ({what}): {WIDTH_RULE}. "
        f"{fix[0].upper()}{fix[1:]}, or use bf16."
    )


def _neighbours(value: int) -> str:
    """The multiples of 16 on either side of ``value``, for a fix a reader can apply."""
    below = value // FP8_WIDTH_MULTIPLE * FP8_WIDTH_MULTIPLE
    above = below + FP8_WIDTH_MULTIPLE
    return f"{below} or {above}" if below else str(above)
