"""The vocabulary every guardrail check speaks (:mod:`recipelab.guardrails.base`): a device,
a campaign's context and a verdict are frozen values a check can only read, a context given
only the campaign's essentials describes a fresh night of one trial at a time, and memory in
a reason reads in GiB."""

from __future__ import annotations

import dataclasses

import pytest

from recipelab.guardrails.base import GuardContext, Verdict, gib
from recipelab.units import GIB
from tests.guardrails.factories import BASELINE, BUDGET, CPU, TARGET


def test_memory_in_a_reason_is_gibibytes_to_two_decimals() -> None:
    assert gib(3.25 * GIB) == "3.25 GiB"
    assert gib(GIB / 3) == "0.33 GiB"
    assert gib(0) == "0.00 GiB"
    assert gib(80 * GIB) == "80.00 GiB"


def test_a_gib_is_two_to_the_thirty_bytes_not_a_billion() -> None:
    """Device memory is reported in binary units (an 80 GB H100 shows 79.xx GiB of 2**30)."""
    assert gib(10**9) == "0.93 GiB"
    assert gib(2**30) == "1.00 GiB"


def test_a_context_given_only_the_campaigns_essentials_is_a_fresh_night_of_one_trial() -> None:
    ctx = GuardContext(target=TARGET, baseline=BASELINE, device=CPU, param_budget=BUDGET)
    assert ctx.searchable == frozenset() and ctx.seen == frozenset()  # no shape edits, no repeats
    assert ctx.memory_reserve_bytes == 0 and ctx.parallel_on_one_device == 1  # the device is all its own
    assert ctx.timeout_s is None and ctx.measurements == ()
    assert ctx.memory_model is None and ctx.memory_model_problem is None  # analytic memory only


def test_devices_contexts_and_verdicts_are_values_a_check_cannot_change() -> None:
    """Checks are pure functions of (recipe, context): nothing they are handed can be edited
    (a campaign makes a new context with ``dataclasses.replace`` instead)."""
    ctx = GuardContext(target=TARGET, baseline=BASELINE, device=CPU, param_budget=BUDGET)
    verdict = Verdict(accepted=True, recipe=BASELINE, reasons=(), checks=())
    for value, field in ((CPU, "memory_bytes"), (ctx, "parallel_on_one_device"), (verdict, "accepted")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, 0)
