"""The cost arithmetic: what a night of recipe search costs here, and what it saves.

The published figures (README, "Why a desk box") are this arithmetic on its defaults: 100
proxy iterations of 88 s on a DGX Spark drawing 240 W at $0.13/kWh, the $5,000 box
amortised over 1.5 years, against the same iterations rented on H100s at $2.50 per
GPU-hour, on one GPU, on an 8-GPU node, and at target scale (60x slower per iteration). The
expected-value argument: a team that books a $3,360 small campaign blind picks a recipe
that does not hold up half of the time.

The cloud run itself (``cloud_run``) is one function, :func:`cloud_run_cost`, which the
report's recommendation and ``recipelab cost`` both call: training FLOPs (FLOPs per token ×
tokens) at a GPU's peak × MFU, priced per GPU-hour. The scenarios put the expected-value
argument on three campaign sizes (the seeds' small campaign, one node-week; a 7B and a 70B
target at their token budget) and on the wrong-pick rate after the proxy's filter (10% and
20%), with the months a Spark takes to pay for itself at a stated number of campaigns a month.

Rounding: every dollar figure is rounded to cents *for display only*; each derived figure
is computed from the unrounded ones (1678.99 = 1680 - 1.00644, not 1680 - 1.01). The ratio
of savings to the Spark's cost is unrounded 1668.2, shown to three significant figures as
1670 (the rounded figures would give 1662).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import Field

from recipelab.recipe import StrictModel
from recipelab.report.context import CloudRates
from recipelab.targets import Target
from recipelab.trajectory.record import TrialRecord

HOURS_PER_YEAR = 365 * 24
JOULES_PER_KWH = 3.6e6
RATIO_SIGNIFICANT_FIGURES = 3


class CostInputs(StrictModel):
    """Every figure the arithmetic starts from (defaults: the published assumptions)."""

    iterations: int = Field(default=100, ge=0)
    seconds_per_iteration: float = Field(default=88.0, ge=0)
    h100_usd_per_gpu_hour: float = Field(default=2.50, ge=0)
    gpus_per_node: int = Field(default=8, ge=1)
    target_scale_factor: float = Field(default=60.0, gt=0)
    spark_power_w: float = Field(default=240.0, ge=0)
    electricity_usd_per_kwh: float = Field(default=0.13, ge=0)
    spark_price_usd: float = Field(default=5000.0, ge=0)
    spark_amortisation_years: float = Field(default=1.5, gt=0)
    wrong_pick_rate: float = Field(default=0.5, ge=0, le=1)
    small_campaign_usd: float = Field(default=3360.0, ge=0)
    measured_energy_j: float | None = Field(default=None, ge=0)  # replaces power x time when known


class CampaignCost(StrictModel):
    spark_electricity_only: float
    spark_total_cost_of_use: float
    h100_single_proxy: float
    h100_8gpu_node_proxy: float
    h100_8gpu_node_target_scale: float


class ExpectedValue(StrictModel):
    wrong_pick_rate: float
    expected_loss_from_blind_booking_usd: float
    spark_recipe_search_cost_usd: float
    expected_savings_per_campaign_usd: float
    ratio_savings_to_spark_cost: float | None  # None when the search cost nothing


class CostReport(StrictModel):
    inputs: CostInputs
    sources: dict[str, str]  # input name -> "default", "given" (flag or env) or "campaign"
    campaign_hours: float
    spark_energy_kwh: float
    campaign_usd: CampaignCost
    expected_value_argument: ExpectedValue

    def published(self) -> dict[str, object]:
        """The JSON ``recipelab cost`` prints: the arithmetic under its published key names."""
        data = self.model_dump(mode="json")
        campaign = data.pop("campaign_usd")
        evidence = data.pop("expected_value_argument")
        return {**data, f"campaign_{self.inputs.iterations}_iters_usd": campaign,
                "expected_value_argument": evidence}


def _cents(value: float) -> float:
    return round(value, 2)


def _significant(value: float, figures: int) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, figures - 1 - math.floor(math.log10(abs(value))))


def compute_cost(inputs: CostInputs, sources: dict[str, str] | None = None) -> CostReport:
    """The arithmetic, from unrounded intermediates; see the module docstring for rounding."""
    hours = inputs.iterations * inputs.seconds_per_iteration / 3600
    kwh = (inputs.measured_energy_j / JOULES_PER_KWH if inputs.measured_energy_j is not None
           else inputs.spark_power_w / 1000 * hours)
    electricity = kwh * inputs.electricity_usd_per_kwh
    amortisation = inputs.spark_price_usd / (inputs.spark_amortisation_years * HOURS_PER_YEAR) * hours
    spark_total = electricity + amortisation
    h100_single = hours * inputs.h100_usd_per_gpu_hour
    h100_node = h100_single * inputs.gpus_per_node
    expected_loss = inputs.wrong_pick_rate * inputs.small_campaign_usd
    savings = expected_loss - spark_total
    ratio = _significant(savings / spark_total, RATIO_SIGNIFICANT_FIGURES) if spark_total > 0 else None
    return CostReport(
        inputs=inputs,
        sources=sources or {name: "default" for name in CostInputs.model_fields},
        campaign_hours=round(hours, 4),
        spark_energy_kwh=round(kwh, 4),
        campaign_usd=CampaignCost(
            spark_electricity_only=_cents(electricity),
            spark_total_cost_of_use=_cents(spark_total),
            h100_single_proxy=_cents(h100_single),
            h100_8gpu_node_proxy=_cents(h100_node),
            h100_8gpu_node_target_scale=_cents(h100_node * inputs.target_scale_factor)),
        expected_value_argument=ExpectedValue(
            wrong_pick_rate=inputs.wrong_pick_rate,
            expected_loss_from_blind_booking_usd=_cents(expected_loss),
            spark_recipe_search_cost_usd=_cents(spark_total),
            expected_savings_per_campaign_usd=_cents(savings),
            ratio_savings_to_spark_cost=ratio))


def measured_inputs(records: Iterable[TrialRecord]) -> dict[str, float | int]:
    """What a campaign measured, to replace the assumed iteration count, time and energy.

    Iterations are the trained proxy trials (complete or failed); the time per iteration is
    their mean ``wall_s``. Energy is the sum of the trials' telemetry ``energy_j`` when every
    trained trial has it; with only some measured it stays unset (power x time is used),
    since a partial sum would understate the night.
    """
    trained = [r for r in records if r.kind == "proxy" and r.trained]
    walls = [float(r.metrics["wall_s"]) for r in trained if r.metrics.get("wall_s") is not None]
    found: dict[str, float | int] = {}
    if not trained:
        return found
    found["iterations"] = len(trained)
    if walls:
        found["seconds_per_iteration"] = sum(walls) / len(walls)
    energies = [_energy_j(r) for r in trained]
    if all(e is not None for e in energies):
        found["measured_energy_j"] = sum(e for e in energies if e is not None)
    return found


def _energy_j(record: TrialRecord) -> float | None:
    """The trial's measured energy; None when unknown, or when it is a GPU's energy that
    other processes shared (parallel trials overlap in time, so a sum counts it twice)."""
    telemetry = record.metrics.get("telemetry")
    if not isinstance(telemetry, dict):
        return None
    shared_by = telemetry.get("gpu_shared_by")
    if isinstance(shared_by, int) and shared_by > 1:
        return None
    energy = telemetry.get("energy_j")
    return float(energy) if isinstance(energy, (int, float)) and not isinstance(energy, bool) else None


def resolve_inputs(given: dict[str, float | int], measured: dict[str, float | int] | None = None
                   ) -> tuple[CostInputs, dict[str, str]]:
    """Inputs from, in order of precedence: what was given (flags, env), what a campaign
    measured, the published defaults; with where each came from."""
    measured = measured or {}
    values = {**measured, **given}
    sources = {name: "given" if name in given else "campaign" if name in measured else "default"
               for name in CostInputs.model_fields}
    return CostInputs.model_validate(values), sources


# --- the cloud run and the scenarios --------------------------------------------------------

SMALL_CAMPAIGN_NODE_HOURS = 168.0  # the seeds' small campaign: one 8-GPU node for a week
FILTERED_WRONG_PICK_RATES = (0.10, 0.20)


@dataclass(frozen=True)
class CloudRunCost:
    """One training run in the cloud, priced from its FLOPs."""

    flops_per_token: float
    tokens: int
    flops: float
    gpu_hours: float
    days_on_node: float
    usd: float

    def published(self, rates: CloudRates, what: str) -> dict[str, object]:
        return {
            "what": what,
            "inputs": {"flops_per_token": self.flops_per_token, "tokens": self.tokens,
                       "gpu_peak_flops": rates.gpu_peak_flops, "mfu": rates.mfu,
                       "usd_per_gpu_hour": rates.usd_per_gpu_hour, "gpus": rates.gpus},
            "formula": "gpu_hours = flops_per_token × tokens / (gpu_peak_flops × mfu) / 3600; "
                       "usd = gpu_hours × usd_per_gpu_hour",
            "flops": self.flops, "gpu_hours": round(self.gpu_hours, 2),
            "days_on_node": round(self.days_on_node, 3), "usd": _cents(self.usd),
        }


def cloud_run_cost(flops_per_token: float, tokens: int, rates: CloudRates) -> CloudRunCost:
    """The one cost model of a cloud run (the report's and ``recipelab cost``'s)."""
    flops = float(flops_per_token) * tokens
    gpu_hours = flops / (rates.gpu_peak_flops * rates.mfu) / 3600
    return CloudRunCost(flops_per_token=float(flops_per_token), tokens=tokens, flops=flops,
                        gpu_hours=gpu_hours, days_on_node=gpu_hours / rates.gpus / 24,
                        usd=gpu_hours * rates.usd_per_gpu_hour)


def target_run_cost(target: Target, rates: CloudRates) -> CloudRunCost:
    """``target`` trained for ``rates.tokens_per_param`` tokens per parameter at its context."""
    from recipelab.recipe import training_flops_per_token

    tokens = math.ceil(rates.tokens_per_param * target.params)
    return cloud_run_cost(training_flops_per_token(target.shape, target.context), tokens, rates)


def scenarios(inputs: CostInputs, rates: CloudRates, runs: dict[str, CloudRunCost],
              campaigns_per_month: float) -> dict[str, object]:
    """The expected-value argument on each campaign size and post-filter wrong-pick rate.

    ``saving = (blind rate - filtered rate) × campaign $ - the search's cost on a Spark``;
    ``months to pay for a Spark = Spark price / (saving × campaigns a month)``.
    """
    search = compute_cost(inputs).campaign_usd.spark_total_cost_of_use
    sizes: dict[str, tuple[float, str]] = {
        "small": (inputs.small_campaign_usd, "small_campaign_usd (default 3360 = one 8-GPU node "
                  f"× {SMALL_CAMPAIGN_NODE_HOURS:g} h × $2.50 per GPU-hour)")}
    for name, run in runs.items():
        sizes[name] = (run.usd, f"cloud_run_cost of {name} at {rates.tokens_per_param:g} tokens "
                                "per parameter (see cloud_run.formula)")
    rows = []
    for name, (usd, how) in sizes.items():
        for rate in FILTERED_WRONG_PICK_RATES:
            saving = (inputs.wrong_pick_rate - rate) * usd - search
            months = (inputs.spark_price_usd / (saving * campaigns_per_month)
                      if saving > 0 and campaigns_per_month > 0 else None)
            rows.append({"campaign": name, "campaign_usd": _cents(usd), "campaign_usd_from": how,
                         "blind_wrong_pick_rate": inputs.wrong_pick_rate,
                         "filtered_wrong_pick_rate": rate,
                         "expected_saving_per_campaign_usd": _cents(saving),
                         "spark_payback_months": None if months is None else round(months, 2)})
    return {"inputs": {"spark_search_cost_usd": round(search, 2),
                       "spark_price_usd": inputs.spark_price_usd,
                       "campaigns_per_month": campaigns_per_month},
            "formula": "saving = (blind - filtered wrong-pick rate) × campaign_usd - spark search "
                       "cost; payback months = spark_price_usd / (saving × campaigns_per_month)",
            "rows": rows}
