"""Shared test fixtures as plain values: the tiny proxy of the toy target and some devices."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from recipelab.guardrails import GIB, DeviceInfo, GuardContext, Measurement
from recipelab.recipe import Recipe
from recipelab.targets import PROXY_PRESETS, get_target, proxy_recipe

TARGET = get_target("toy")
BASELINE = proxy_recipe("tiny")
BUDGET = PROXY_PRESETS["tiny"].budget

CPU = DeviceInfo(kind="cpu", name="Test Xeon", memory_bytes=16 * GIB, compute_capability=None,
                 has_transformer_engine=False, native_bf16=True)
OLD_CPU = replace(CPU, name="Test Core i5", native_bf16=False)
H100 = DeviceInfo(kind="cuda", name="NVIDIA H100", memory_bytes=80 * GIB,
                  compute_capability=(9, 0), has_transformer_engine=True, native_bf16=True)
A100 = replace(H100, name="NVIDIA A100", compute_capability=(8, 0))


def context(**changes: Any) -> GuardContext:
    """A campaign on the tiny proxy of the toy target, on a roomy CPU, with ``changes``."""
    fields: dict[str, Any] = {
        "target": TARGET, "baseline": BASELINE, "device": CPU, "param_budget": BUDGET}
    fields.update(changes)
    return GuardContext(**fields)


def unvalidated(recipe: Recipe = BASELINE, **shape_changes: Any) -> Recipe:
    """``recipe`` with shape knobs changed *without* validation, as model_construct allows."""
    return recipe.model_copy(update={"shape": recipe.shape.model_copy(update=shape_changes)})


def measured(recipe: Recipe, *, tokens_per_s: float = 10_000.0, peak_memory_bytes: int = GIB,
             overhead_s: float = 0.0, with_recipe: bool = True) -> Measurement:
    """A measurement of one completed trial of ``recipe`` with the given throughput."""
    return Measurement(
        params=recipe.param_count(), tokens_per_step=recipe.tokens_per_step,
        flops_per_token=recipe.flops_per_token(), tokens_per_s=tokens_per_s,
        peak_memory_bytes=peak_memory_bytes,
        wall_s=recipe.steps * recipe.tokens_per_step / tokens_per_s + overhead_s,
        steps=recipe.steps, recipe=recipe if with_recipe else None,
    )
