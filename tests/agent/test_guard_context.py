"""The guardrails' context: one builder for the preflight, the memory planner and the
campaign, so a candidate is judged before the night as it is during it."""

from __future__ import annotations

import pytest

from recipelab.agent.guard_context import guard_context
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.guardrails import DeviceInfo
from recipelab.units import GIB

DEVICE = DeviceInfo("cpu", "test cpu", 16 * GIB, None, False, False)


def test_the_context_holds_the_campaigns_target_budget_and_memory_share(
        tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={"parallel": 2, "memory_reserve_gib": 1.0,
                                                "budget": 150_000})
    context = guard_context(settings, settings.baseline(), DEVICE, memory=(None, None))

    assert (context.target.name, context.param_budget) == ("toy", 150_000)
    assert (context.parallel_on_one_device, context.memory_reserve_bytes) == (2, GIB)
    assert context.timeout_s == settings.window.trial_timeout_s


@pytest.mark.parametrize(("update", "sharing"), [
    ({"parallel": "auto"}, 1),  # not resolved yet: no share assumed
    ({"executor": "ray", "parallel": 4}, 1),  # a Ray task has a device of its own
    ({"parallel": 3}, 3),
])
def test_trials_share_a_devices_memory_only_when_local(
        tiny_settings: CampaignSettings, update: dict[str, object], sharing: int) -> None:
    assert tiny_settings.model_copy(update=update).executor.parallel_on_one_device == sharing
