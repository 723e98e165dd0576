"""``recipelab cost``: the published arithmetic from its defaults, inputs from flags and the
environment, and a campaign's measured figures in place of the assumptions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from recipelab.agent.setup.settings import CampaignSettings, save
from recipelab.cli import app
from recipelab.report.cost import CostInputs, compute_cost
from recipelab.targets import proxy_recipe
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord

PUBLISHED_CAMPAIGN = {"spark_electricity_only": 0.08, "spark_total_cost_of_use": 1.01,
                      "h100_single_proxy": 6.11, "h100_8gpu_node_proxy": 48.89,
                      "h100_8gpu_node_target_scale": 2933.33}
PUBLISHED_EXPECTED_VALUE = {"wrong_pick_rate": 0.5, "expected_loss_from_blind_booking_usd": 1680.0,
                            "spark_recipe_search_cost_usd": 1.01,
                            "expected_savings_per_campaign_usd": 1678.99,
                            "ratio_savings_to_spark_cost": 1670.0}


def cost(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["cost", *args], env=env)
    assert result.exit_code == 0, result.output
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_the_defaults_reproduce_the_published_figures_exactly() -> None:
    printed = cost()
    assert printed["campaign_100_iters_usd"] == PUBLISHED_CAMPAIGN
    assert printed["expected_value_argument"] == PUBLISHED_EXPECTED_VALUE
    assert printed["campaign_hours"] == pytest.approx(100 * 88 / 3600, abs=1e-4)
    assert set(printed["sources"].values()) == {"default"}


def test_the_ratio_is_computed_unrounded_and_shown_to_three_significant_figures() -> None:
    # 1678.99356 / 1.00644 = 1668.2 -> 1670; from the rounded cents it would be 1662.4
    assert compute_cost(CostInputs()).expected_value_argument.ratio_savings_to_spark_cost == 1670.0


def test_flags_change_the_inputs() -> None:
    printed = cost("--h100-usd-per-hour", "3", "--iterations", "50", "--gpus-per-node", "4")
    assert printed["campaign_50_iters_usd"]["h100_single_proxy"] == round(50 * 88 / 3600 * 3, 2)
    assert printed["campaign_50_iters_usd"]["h100_8gpu_node_proxy"] == round(50 * 88 / 3600 * 3 * 4, 2)
    assert printed["sources"]["iterations"] == "given" and printed["sources"]["spark_power_w"] == "default"


def test_environment_variables_change_the_inputs_and_flags_win_over_them() -> None:
    env = {"RECIPELAB_COST_SPARK_WATTS": "480", "RECIPELAB_COST_WRONG_PICK_RATE": "0.25",
           "RECIPELAB_COST_SMALL_CAMPAIGN_USD": "1000"}
    printed = cost(env=env)
    assert printed["inputs"]["spark_power_w"] == 480.0
    electricity = round(0.48 * 100 * 88 / 3600 * 0.13, 2)
    assert printed["campaign_100_iters_usd"]["spark_electricity_only"] == electricity
    assert printed["expected_value_argument"]["expected_loss_from_blind_booking_usd"] == 250.0
    assert cost("--wrong-pick-rate", "1", env=env)["expected_value_argument"][
        "expected_loss_from_blind_booking_usd"] == 1000.0


def test_an_impossible_input_is_refused_with_its_name() -> None:
    result = CliRunner().invoke(app, ["cost", "--wrong-pick-rate", "2"])
    assert result.exit_code == 2
    assert "wrong_pick_rate" in result.output and "less than or equal to 1" in result.output


def measured_campaign(directory: Path, *, energy: bool, shared_by: int | None = None) -> None:
    """A campaign of ten trained proxy trials of 36 s (one failed), 3,600 J each when measured
    (the energy of a GPU ``shared_by`` processes at once, when given), plus a rejected
    candidate and a stress run that are not proxy iterations."""
    save(CampaignSettings(name="measured", preset="tiny"), directory)
    recipe = proxy_recipe("tiny").model_dump(mode="json")
    with TrajectoryStore(directory, "measured") as store:
        for i in range(12):
            kind, status = ("stress", "complete") if i == 11 else ("proxy", (
                "rejected" if i == 10 else "failed" if i == 3 else "complete"))
            metrics: dict[str, Any] = {} if status == "rejected" else {"wall_s": 36.0}
            if energy and metrics:
                metrics["telemetry"] = {"energy_j": 3600.0, "energy_source": "rapl"}
                if shared_by is not None:
                    metrics["telemetry"] |= {"energy_source": "nvml-energy-counter",
                                             "energy_scope": "device", "gpu_shared_by": shared_by}
            store.append(TrialRecord(campaign="measured", trial_id=f"p{i:04d}", iteration=i, kind=kind,
                                     status=status, recipe=recipe, metrics=metrics,
                                     reason="crash" if status == "failed" else None))


def test_a_campaign_s_measured_iterations_time_and_energy_replace_the_defaults(tmp_path: Path) -> None:
    measured_campaign(tmp_path, energy=True)
    printed = cost(str(tmp_path))
    assert printed["inputs"]["iterations"] == 10 and printed["inputs"]["seconds_per_iteration"] == 36.0
    assert printed["inputs"]["measured_energy_j"] == 36_000.0
    assert printed["sources"]["iterations"] == "campaign"
    assert printed["sources"]["spark_price_usd"] == "default"
    usd = printed["campaign_10_iters_usd"]
    assert printed["campaign_hours"] == 0.1 and printed["spark_energy_kwh"] == 0.01
    assert usd["spark_electricity_only"] == 0.0  # 0.01 kWh at $0.13
    assert usd["h100_single_proxy"] == 0.25 and usd["h100_8gpu_node_proxy"] == 2.0
    assert usd["h100_8gpu_node_target_scale"] == 120.0


def test_without_telemetry_a_campaign_s_energy_is_power_times_time(tmp_path: Path) -> None:
    measured_campaign(tmp_path, energy=False)
    printed = cost(str(tmp_path), "--spark-watts", "100")
    assert printed["inputs"]["measured_energy_j"] is None
    assert printed["spark_energy_kwh"] == 0.01  # 100 W for 0.1 h


def test_the_energy_of_a_gpu_trials_shared_is_not_summed_as_theirs(tmp_path: Path) -> None:
    # Trials overlapping on one GPU each recorded the device's energy: a sum counts it twice.
    measured_campaign(tmp_path, energy=True, shared_by=2)
    printed = cost(str(tmp_path), "--spark-watts", "100")
    assert printed["inputs"]["measured_energy_j"] is None
    assert printed["spark_energy_kwh"] == 0.01  # 100 W for 0.1 h


def test_a_campaign_with_nothing_trained_is_refused_with_what_to_do(tmp_path: Path) -> None:
    save(CampaignSettings(name="empty", preset="tiny"), tmp_path)
    result = CliRunner().invoke(app, ["cost", str(tmp_path)])
    assert result.exit_code == 2 and "no trained proxy trial" in result.output


def test_cost_and_the_report_price_the_cloud_run_the_same(finished_campaign: Path,
                                                          tmp_path: Path) -> None:
    """One cost model: the cloud run ``recipelab cost CAMPAIGN`` prices is the report's."""
    from recipelab.report.context import CloudRates
    from recipelab.report.recommend import recommend
    from recipelab.report.sections import _about
    from recipelab.targets import get_target

    campaign = tmp_path / "nightly"
    shutil.copytree(finished_campaign, campaign)
    rates = ["--gpu-peak-tflops", "0.001", "--mfu", "0.3"]  # slow GPUs: a bill worth reading
    printed = cost(str(campaign), *rates, "--h100-usd-per-hour", "3")
    report = CliRunner().invoke(app, ["report", str(campaign), *rates, "--usd-per-gpu-hour", "3"])
    assert report.exit_code == 0, report.output
    with TrajectoryStore(campaign, "nightly", readonly=True) as store:
        found = recommend(Ledger(store.records()), get_target("toy"),
                          CloudRates(gpu_peak_flops=1e9, mfu=0.3, usd_per_gpu_hour=3.0))
    assert found is not None and found.cost_usd > 1000
    run = printed["cloud_run"]
    assert run["usd"] == round(found.cost_usd, 2) and run["gpu_hours"] == round(found.gpu_hours, 2)
    assert run["inputs"]["mfu"] == 0.3 and run["inputs"]["usd_per_gpu_hour"] == 3.0
    text = (campaign / "report" / "report.md").read_text()
    assert f"${_about(run['usd'])} at $3.00 per GPU-hour" in text


def test_the_scenarios_show_each_campaign_size_and_wrong_pick_rate_with_their_inputs() -> None:
    printed = cost("--campaigns-per-month", "2")
    rows = printed["scenarios"]["rows"]
    assert {r["campaign"] for r in rows} == {"small", "medium (llama2-7b)", "70B (llama3-70b)"}
    assert {r["filtered_wrong_pick_rate"] for r in rows} == {0.1, 0.2}
    small = next(r for r in rows if r["campaign"] == "small" and r["filtered_wrong_pick_rate"] == 0.1)
    search = compute_cost(CostInputs()).campaign_usd.spark_total_cost_of_use
    saving = (0.5 - 0.1) * 3360 - search
    assert small["expected_saving_per_campaign_usd"] == round(saving, 2)
    assert small["spark_payback_months"] == round(5000 / (saving * 2), 2)
    assert 3360 == 8 * 2.50 * 168  # the seeds' small campaign is one node-week
    assert printed["cloud_run"]["usd"] == pytest.approx(printed["cloud_run"]["gpu_hours"] * 2.5,
                                                        abs=0.02)
