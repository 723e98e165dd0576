"""What the campaign's guardrails know: the one builder of its :class:`GuardContext`.

The preflight judges the baseline before the night, the memory planner prices the
baseline's peak, and the campaign judges every candidate. All three build the context here,
so a check never sees one campaign differently before the night than during it.
"""

from __future__ import annotations

from collections.abc import Iterable

from recipelab.agent.setup.settings import CampaignSettings
from recipelab.guardrails import DeviceInfo, GuardContext, Measurement
from recipelab.guardrails.memory_fit import MemoryModel, memory_model_path, read_for_guardrail
from recipelab.recipe import Recipe
from recipelab.units import GIB


def guard_context(settings: CampaignSettings, baseline: Recipe, device: DeviceInfo, *,
                  memory: tuple[MemoryModel | None, str | None] | None = None,
                  seen: Iterable[str] = (), measurements: Iterable[Measurement] = ()
                  ) -> GuardContext:
    """The context of ``settings``' campaign on ``device``. ``memory`` is the memory model
    and why it is unusable (default: read from where the campaign reads it); ``seen`` the
    fingerprints already run or queued, ``measurements`` the trials measured so far."""
    model, problem = memory if memory is not None else read_for_guardrail(memory_model_path())
    return GuardContext(
        target=settings.target_spec(), baseline=baseline, device=device,
        param_budget=settings.param_budget, searchable=frozenset(settings.searchable),
        seen=frozenset(seen), measurements=tuple(measurements),
        memory_reserve_bytes=int(settings.executor.memory_reserve_gib * GIB),
        parallel_on_one_device=settings.executor.parallel_on_one_device,
        timeout_s=settings.window.trial_timeout_s, memory_model=model,
        memory_model_problem=problem)
