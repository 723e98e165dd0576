"""What the width rung costs: for the window planner before the campaign (the baseline on
the rung's two models) and for the rung itself before it launches (the recommendation)."""

from __future__ import annotations

from collections.abc import Sequence

from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.setup.window import TrialTimes
from recipelab.recipe import Recipe, training_flops_per_token
from recipelab.targets import preset_target
from recipelab.trajectory.width_check import WIDTH_RATES, WIDTH_SEEDS
from recipelab.transfer.width import width_targets


def cost(recipe: Recipe, baseline: Recipe) -> float:
    """``recipe``'s training compute in proxy trials: its tokens × its FLOPs per token,
    over the baseline's."""
    return (recipe.tokens * training_flops_per_token(recipe.shape, recipe.seq_len)
            / (baseline.tokens * training_flops_per_token(baseline.shape, baseline.seq_len)))


def seconds(times: TrialTimes, baseline: Recipe, recipes: Sequence[Recipe]) -> float:
    """The runs' expected seconds at the proxy's measured pace (:func:`cost`)."""
    return sum(times.fixed_s + times.per_step_s * baseline.steps * cost(recipe, baseline)
               for recipe in recipes)


def planned_recipes(settings: CampaignSettings) -> list[Recipe]:
    """The rung's runs as planned before the recommendation is known: the baseline on its two
    models at the top rung's tokens, and on both once more as the control (the edit barely
    moves their cost or size), at each of the rung's seeds, and on both at each other rate of
    the rate family; none when the rung is off or there is no top rung."""
    ladder = settings.ladder
    if not ladder.width_rung or ladder.promote == 0:
        return []
    baseline = settings.baseline()
    tokens = ladder.stress_steps * baseline.tokens_per_step
    sizes = width_targets(baseline.shape, preset_target(settings.preset, settings.target))
    narrow, wide = (baseline.model_copy(update={"shape": size.shape, "seq_len": size.context}
                                        ).at_tokens(tokens) for size in sizes)
    return [narrow, wide, narrow, wide] * WIDTH_SEEDS + [narrow, wide] * len(WIDTH_RATES)


def planned_seconds(times: TrialTimes, settings: CampaignSettings) -> float:
    """What the window planner reserves for the rung (:func:`planned_recipes`)."""
    return seconds(times, settings.baseline(), planned_recipes(settings))
