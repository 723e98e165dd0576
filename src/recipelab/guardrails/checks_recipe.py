"""Checks that need only the recipe and the campaign's numbers: ranges, divisibility,
the parameter budget and duplicates.

Pydantic's bounds on :class:`~recipelab.recipe.Recipe` are static ("lr <= 1"); the bounds
here are relative to the campaign, because what makes a proxy trial comparable to the
others (the same training tokens, the same evaluation slice, a batch geometry near the
baseline's) depends on
the baseline it is compared against.
"""

from __future__ import annotations

import math

from recipelab.guardrails.base import GuardContext
from recipelab.recipe import Recipe

SEQ_LEN_FACTOR = 8
"""A candidate's seq_len may be at most this multiple of the baseline's."""

TOKENS_FACTOR = 8
"""A candidate's tokens per step may be within this factor of the baseline's, either way."""


def check_ranges(recipe: Recipe, ctx: GuardContext) -> list[str]:
    """Reject knobs that would make the trial incomparable to the campaign or unbounded in cost."""
    base = ctx.baseline
    reasons: list[str] = []
    budgeted = recipe.at_tokens(base.tokens).steps
    if recipe.steps != budgeted:
        reasons.append(
            f"steps {recipe.steps:,} train {recipe.tokens:,} tokens, not the baseline's "
            f"{base.tokens:,}: a proxy candidate may not change its own training length (a "
            "longer run scores better without being a better recipe), and a batch edit trades "
            f"steps for batch, so keep steps at {budgeted:,} for this batch."
        )
    if recipe.eval_bytes != base.eval_bytes:
        reasons.append(
            f"eval_bytes {recipe.eval_bytes:,} differs from the baseline's {base.eval_bytes:,}: "
            "val_bpb is only comparable across trials measured on the same evaluation slice, "
            f"so keep eval_bytes at {base.eval_bytes:,}."
        )
    max_seq_len = SEQ_LEN_FACTOR * base.seq_len
    if recipe.seq_len > max_seq_len:
        reasons.append(
            f"seq_len {recipe.seq_len:,} is more than {SEQ_LEN_FACTOR}x the baseline's "
            f"{base.seq_len:,}; use seq_len <= {max_seq_len:,}."
        )
    tokens, base_tokens = recipe.tokens_per_step, base.tokens_per_step
    geometry = (
        f"tokens per step (batch_size {recipe.batch_size} x seq_len {recipe.seq_len} x "
        f"grad_accum {recipe.grad_accum} = {tokens:,})"
    )
    if tokens > TOKENS_FACTOR * base_tokens:
        reasons.append(
            f"{geometry} is more than {TOKENS_FACTOR}x the baseline's {base_tokens:,}; lower "
            f"batch_size or grad_accum to reach at most {TOKENS_FACTOR * base_tokens:,}."
        )
    if tokens * TOKENS_FACTOR < base_tokens:
        least = math.ceil(base_tokens / TOKENS_FACTOR)
        reasons.append(
            f"{geometry} is less than 1/{TOKENS_FACTOR} of the baseline's {base_tokens:,}; raise "
            f"batch_size or grad_accum to reach at least {least:,}."
        )
    warmup = recipe.schedule.warmup_steps
    if warmup >= recipe.steps:
        reasons.append(
            f"schedule.warmup_steps {warmup:,} is not shorter than the run ({recipe.steps:,} "
            "steps), so the learning rate would never leave its warmup; keep the warmup "
            f"shorter than the run: schedule.warmup_steps <= {recipe.steps - 1:,}."
        )
    return reasons


def check_divisibility(recipe: Recipe, ctx: GuardContext) -> list[str]:
    """Reject shapes the model cannot be built from.

    :class:`~recipelab.recipe.Shape` validates the last two at schema time; they are repeated
    here because a Recipe made with ``model_construct`` skips validation.
    """
    shape = recipe.shape
    reasons: list[str] = []
    if shape.d_model % shape.n_head:
        below = shape.d_model // shape.n_head * shape.n_head
        options = " or ".join(str(v) for v in (below, below + shape.n_head) if v > 0)
        reasons.append(
            f"shape.d_model {shape.d_model} is not divisible by shape.n_head {shape.n_head}; "
            f"use a d_model that is a multiple of {shape.n_head}, such as {options}."
        )
    if shape.n_head % shape.n_kv_head:
        reasons.append(
            f"shape.n_head {shape.n_head} is not a multiple of shape.n_kv_head "
            f"{shape.n_kv_head}, so the query heads cannot be split evenly among key/value "
            f"heads; pick n_kv_head among the divisors of {shape.n_head}: "
            f"{', '.join(map(str, _divisors(shape.n_head)))}."
        )
    if shape.position == "rope" and shape.head_dim % 2:
        reasons.append(
            f"shape.head_dim {shape.head_dim} is odd, but RoPE rotates pairs of channels; "
            "use an even head_dim."
        )
    return reasons


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def check_param_budget(recipe: Recipe, ctx: GuardContext) -> list[str]:
    """Reject candidates larger than the campaign's proxy budget (the hardware plan assumes it)."""
    params = recipe.param_count()
    if params <= ctx.param_budget:
        return []
    return [
        f"the candidate has {params:,} parameters, over the campaign's budget of "
        f"{ctx.param_budget:,}; shrink shape.n_layer, shape.d_model, shape.ffn_ratio or "
        "shape.vocab_size."
    ]


def check_duplicate(recipe: Recipe, ctx: GuardContext) -> list[str]:
    """Reject a candidate identical to one already run or queued: it would teach nothing."""
    fingerprint = recipe.fingerprint()
    if fingerprint not in ctx.seen:
        return []
    return [
        f"the same recipe already ran as a trial (fingerprint {fingerprint}); "
        "propose a different edit."
    ]
