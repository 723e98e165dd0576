"""The recommendation for the cloud commit: what to train, for how long, at what cost.

The winning proxy recipe is scaled back to the target: its optimizer, schedule and
precision knobs (and any non-size shape knob it changed, such as ``qk_norm``) go onto the
target's shape and context; the token budget is Chinchilla-optimal (20 tokens per
parameter); GPU-hours follow from the target's training FLOPs per token, a GPU's peak
FLOP/s and an assumed model FLOPs utilisation (MFU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from recipelab.recipe import BYTE_VOCAB, Recipe
from recipelab.report.context import CloudRates
from recipelab.report.cost import cloud_run_cost
from recipelab.targets import Target
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord
from recipelab.transfer.export import TRANSFERABLE_SHAPE_KNOBS
from recipelab.transfer.powerlaw import PowerLaw, fit_power_law

SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class Extrapolation:
    """One stress run's loss curve fitted and read at the step the cloud run's first day reaches."""

    trial_id: str
    parent: str | None
    fit: PowerLaw | None
    last_step: int | None
    last_loss: float | None
    first_day_step: int
    first_day_loss: float | None


@dataclass(frozen=True)
class CloudRunPlan:
    winner: TrialRecord
    chosen_because: str
    recipe: Recipe
    params: int
    tokens: int
    flops: float
    gpu_hours: float
    days_on_node: float
    cost_usd: float
    first_day_step: int
    extrapolations: tuple[Extrapolation, ...]


def scale_to_target(winner: Recipe, edit: dict[str, object], target: Target,
                    tokens: int) -> Recipe:
    """``winner``'s training knobs on ``target``'s shape, with enough steps for ``tokens``.

    The batch keeps the winner's sequences per step at the target's context; warmup keeps
    its fraction of the run.
    """
    shape = target.shape.model_copy(update={
        key.split(".", 1)[1]: value for key, value in edit.items() if key in TRANSFERABLE_SHAPE_KNOBS})
    tokens_per_step = winner.batch_size * winner.grad_accum * target.context
    steps = max(1, math.ceil(tokens / tokens_per_step))
    warmup = round(winner.schedule.warmup_steps / winner.steps * steps)
    return Recipe(
        shape=shape, optimizer=winner.optimizer,
        schedule=winner.schedule.model_copy(update={"warmup_steps": warmup}),
        stability=winner.stability,
        batch_size=winner.batch_size, seq_len=target.context, grad_accum=winner.grad_accum,
        precision=winner.precision,
        tokenizer="byte" if shape.vocab_size == BYTE_VOCAB else "bpe",
        seed=winner.seed, steps=steps, eval_bytes=winner.eval_bytes)


def extrapolate(stress: TrialRecord, first_day_step: int) -> Extrapolation:
    points = [p for p in stress.curve if "step" in p and "loss" in p]
    steps = [float(p["step"]) for p in points]
    losses = [float(p["loss"]) for p in points]
    fit = fit_power_law(steps, losses)
    return Extrapolation(
        trial_id=stress.trial_id, parent=stress.parent, fit=fit,
        last_step=int(steps[-1]) if steps else None, last_loss=losses[-1] if losses else None,
        first_day_step=first_day_step,
        first_day_loss=fit(first_day_step) if fit is not None else None)


def recommend(ledger: Ledger, target: Target, rates: CloudRates) -> CloudRunPlan | None:
    """What the campaign's ``ledger`` recommends (:attr:`Ledger.recommended`) priced at
    ``target``, or None before it recommends anything."""
    chosen = ledger.recommended
    if chosen is None:
        return None
    winner, because = chosen
    params = target.params
    tokens = math.ceil(rates.tokens_per_param * params)
    recipe = scale_to_target(Recipe.model_validate(winner.recipe), winner.edit, target, tokens)
    run = cloud_run_cost(recipe.flops_per_token(), tokens, rates)
    flops, gpu_hours = run.flops, run.gpu_hours
    sustained = rates.gpu_peak_flops * rates.mfu
    first_day_tokens = sustained * rates.gpus * SECONDS_PER_DAY / recipe.flops_per_token()
    first_day_step = max(1, min(recipe.steps, int(first_day_tokens // recipe.tokens_per_step)))
    stress = [r for r in ledger.stress if r.curve]
    return CloudRunPlan(
        winner=winner, chosen_because=because, recipe=recipe, params=params, tokens=tokens,
        flops=flops, gpu_hours=gpu_hours, days_on_node=run.days_on_node,
        cost_usd=run.usd, first_day_step=first_day_step,
        extrapolations=tuple(extrapolate(r, first_day_step) for r in stress))
