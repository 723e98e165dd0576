"""What a report needs beyond the records (:mod:`recipelab.report.context`): the cloud rates
the run is priced at (defaults, then the environment, each value checked and named when
wrong) and the context a report is built in (its campaign, target, rates, calibration and,
while the campaign runs, its live status)."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from recipelab.report.context import (
    H100_BF16_DENSE_FLOPS,
    RATE_ENVVARS,
    CloudRates,
    LiveStatus,
    ReportContext,
)
from recipelab.targets import get_target


def test_the_default_rates_are_an_8_h100_node_at_2_50_per_gpu_hour() -> None:
    rates = CloudRates()
    assert rates.gpu_peak_flops == H100_BF16_DENSE_FLOPS == 989e12
    assert (rates.mfu, rates.usd_per_gpu_hour, rates.gpus) == (0.4, 2.50, 8)
    assert rates.tokens_per_param == 20.0  # Chinchilla-optimal


def test_rates_come_from_the_environment_and_bad_values_are_named() -> None:
    rates = CloudRates.from_environment({"RECIPELAB_GPU_PEAK_TFLOPS": "500", "RECIPELAB_MFU": "0.3",
                                         "RECIPELAB_COST_GPUS_PER_NODE": "4"})
    assert rates.gpu_peak_flops == 5e14 and rates.mfu == 0.3 and rates.gpus == 4
    assert CloudRates.from_environment({}) == CloudRates()
    with pytest.raises(ValueError, match="RECIPELAB_MFU"):
        CloudRates.from_environment({"RECIPELAB_MFU": "lots"})


@pytest.mark.parametrize(("field", "variable"), sorted(RATE_ENVVARS.items()))
def test_each_rate_variable_sets_its_own_rate_and_no_other(field: str, variable: str) -> None:
    rates = CloudRates.from_environment({variable: "0.5" if field == "mfu" else "3"})
    expected = {"gpu_peak_flops": 3e12,  # the variable is in TFLOP/s
                "mfu": 0.5, "usd_per_gpu_hour": 3.0, "gpus": 3}[field]
    assert getattr(rates, field) == expected
    assert rates.model_dump(exclude={field}) == CloudRates().model_dump(exclude={field})


def test_a_blank_variable_is_unset_and_surrounding_blanks_are_ignored() -> None:
    assert CloudRates.from_environment({"RECIPELAB_MFU": "  "}) == CloudRates()
    assert CloudRates.from_environment({"RECIPELAB_MFU": " 0.25\n"}).mfu == 0.25


def test_a_rate_that_is_not_a_number_names_the_variable_and_what_it_held() -> None:
    with pytest.raises(ValueError) as raised:
        CloudRates.from_environment({"RECIPELAB_COST_GPUS_PER_NODE": "eight"})
    assert str(raised.value) == "RECIPELAB_COST_GPUS_PER_NODE='eight' is not a number"


@pytest.mark.parametrize(("variable", "value", "named"), [
    ("RECIPELAB_MFU", "1.5", "mfu"), ("RECIPELAB_MFU", "0", "mfu"),
    ("RECIPELAB_COST_GPUS_PER_NODE", "0", "gpus"), ("RECIPELAB_COST_GPUS_PER_NODE", "4.5", "gpus"),
    ("RECIPELAB_COST_H100_USD_PER_HOUR", "-1", "usd_per_gpu_hour"),
    ("RECIPELAB_GPU_PEAK_TFLOPS", "0", "gpu_peak_flops"),
])
def test_an_impossible_rate_is_refused_with_the_rate_named(variable: str, value: str,
                                                           named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        CloudRates.from_environment({variable: value})


def test_rates_are_strict_an_unknown_rate_is_an_error() -> None:
    with pytest.raises(ValidationError, match="gpu_count"):
        CloudRates.model_validate({"gpu_count": 4})


def test_without_a_mapping_the_rates_come_from_the_process_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECIPELAB_COST_H100_USD_PER_HOUR", "4")
    assert CloudRates.from_environment().usd_per_gpu_hour == 4.0


def test_a_context_prices_at_the_default_rates_and_is_not_live_unless_told() -> None:
    """A report written after the campaign is the finished one: no live status, no
    calibration unless the campaign had one, the default rates."""
    ctx = ReportContext("nightly", get_target("toy"), "tiny")
    assert ctx.rates == CloudRates() and ctx.horizon_fits == () and ctx.live is None
    live = LiveStatus(updated="02:13:05 UTC", running="p0004", ends="at 07:00")
    assert live.last_lines == () and live.curves == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.live = live  # type: ignore[misc]
