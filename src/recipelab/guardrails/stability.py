"""Checks on the optimizer-group, schedule and stability knobs that pydantic's static bounds
cannot express, because they depend on other knobs of the same recipe.

Each rejects a recipe that would train, but whose result would say nothing useful: an
effective learning rate no AdamW run survives, a WSD schedule whose decay begins before its
warmup ends, or a logit cap so low that the model cannot express a confident prediction.
"""

from __future__ import annotations

import math

from recipelab.guardrails.base import GuardContext
from recipelab.recipe import Recipe

MAX_EFFECTIVE_LR = 1.0
"""The largest learning rate any parameter group may train at (``lr`` times its multiplier):
the static bound on ``optimizer.lr`` itself, applied to every group."""

MIN_CONFIDENT_PROB = 0.9
"""The probability a capped model must still be able to give its most likely token; a cap
below that would show up as a loss floor, not as a worse recipe."""


def capped_max_prob(cap: float, vocab: int) -> float:
    """The largest probability a softmax over ``vocab`` logits in ``[-cap, cap]`` can give."""
    return 1.0 / (1.0 + (vocab - 1) * math.exp(-2.0 * cap))


def min_softcap(vocab: int) -> float:
    """The smallest logit cap that still lets one token reach :data:`MIN_CONFIDENT_PROB`."""
    return 0.5 * math.log((vocab - 1) * MIN_CONFIDENT_PROB / (1.0 - MIN_CONFIDENT_PROB))


def check_stability(recipe: Recipe, ctx: GuardContext) -> list[str]:
    """Reject group learning rates past :data:`MAX_EFFECTIVE_LR`, a WSD decay that starts
    inside the warmup, and a logit soft-cap below :func:`min_softcap`."""
    opt, schedule = recipe.optimizer, recipe.schedule
    reasons: list[str] = []
    for name, mult in (("lr_embed_mult", opt.lr_embed_mult), ("lr_output_mult", opt.lr_output_mult),
                       ("lr_hidden_mult", opt.lr_hidden_mult)):
        if opt.lr * mult > MAX_EFFECTIVE_LR:
            reasons.append(
                f"optimizer.lr {opt.lr:g} x optimizer.{name} {mult:g} = {opt.lr * mult:g} is a "
                f"learning rate above {MAX_EFFECTIVE_LR:g}, which no AdamW run survives; keep "
                f"optimizer.{name} <= {MAX_EFFECTIVE_LR / opt.lr:.4g}."
            )
    if schedule.kind == "wsd":
        decay_steps = max(1, round(schedule.decay_fraction * recipe.steps))
        decay_start = recipe.steps - decay_steps
        if schedule.warmup_steps > decay_start:
            reasons.append(
                f"the wsd schedule decays over the last {decay_steps} of {recipe.steps} steps "
                f"(schedule.decay_fraction {schedule.decay_fraction:g}), starting at step "
                f"{decay_start}, inside the {schedule.warmup_steps}-step warmup; lower "
                f"schedule.warmup_steps to <= {decay_start} or schedule.decay_fraction."
            )
    cap, vocab = recipe.stability.logit_softcap, recipe.shape.vocab_size
    if 0 < cap < min_softcap(vocab):
        reasons.append(
            f"stability.logit_softcap {cap:g} keeps every logit within +-{cap:g}, so over "
            f"{vocab:,} tokens no prediction can exceed probability "
            f"{capped_max_prob(cap, vocab):.2f}: val_bpb would measure the cap, not the "
            f"recipe; use 0 (off) or a cap >= {math.ceil(min_softcap(vocab))}."
        )
    return reasons
