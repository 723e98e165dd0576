"""Specification of the device sampler: what it measures, and what it does when it cannot."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import psutil
import pytest

from recipelab.agent.executor import LocalExecutor
from recipelab.agent.records import result_fields
from recipelab.recipe import proxy_recipe
from recipelab.trainer.spec import CorpusSpec, TrialSpec
from recipelab.trainer.telemetry import CSV_COLUMNS, DeviceSampler, counter_delta

RECORDED_KEYS = {"samples", "duration_s", "cpu_util_mean", "cpu_util_peak", "rss_peak_bytes",
                 "gpu_util_mean", "gpu_util_peak", "gpu_power_w_mean", "gpu_power_w_peak",
                 "gpu_memory_peak_bytes", "gpu_temp_c_peak", "energy_j", "energy_source"}
BUSY_CHILD = "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass"


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_cpu_sampler_sees_a_busy_child_process_and_writes_every_sample(tmp_path: Path) -> None:
    path = tmp_path / "telemetry.csv"
    with DeviceSampler(0.1, path, gpu=False):
        subprocess.run([sys.executable, "-c", BUSY_CHILD], timeout=60, check=True)
    sampler_rows = read_csv(path)

    assert len(sampler_rows) >= 5 and list(sampler_rows[0]) == list(CSV_COLUMNS)
    one_core = 100 / (psutil.cpu_count() or 1)
    peak = max(float(row["cpu_util"]) for row in sampler_rows if row["cpu_util"])
    assert peak > 0.25 * one_core, "a busy child must show in the process tree's utilization"
    rss_peak = max(int(row["rss_bytes"]) for row in sampler_rows)
    assert rss_peak > psutil.Process().memory_info().rss, "the child's memory counts too"
    assert all(row["gpu_util"] == "" for row in sampler_rows)


def test_the_summary_gives_mean_peak_and_duration_and_none_for_what_was_not_measured(
        tmp_path: Path) -> None:
    sampler = DeviceSampler(0.05, gpu=False)
    with sampler:
        time.sleep(0.3)
    summary = sampler.summary()
    assert summary.samples is not None and summary.samples >= 3
    assert summary.duration_s is not None and summary.duration_s >= 0.3
    assert summary.cpu_util_mean is not None and summary.cpu_util_peak is not None
    assert summary.cpu_util_peak >= summary.cpu_util_mean
    assert summary.rss_peak_bytes is not None and summary.rss_peak_bytes > 0
    assert (summary.gpu_util_mean, summary.gpu_power_w_peak, summary.gpu_memory_peak_bytes,
            summary.gpu_temp_c_peak) == (None, None, None, None)
    assert summary.gpu_unavailable == "the work runs on the CPU"


def test_without_pynvml_the_sampler_measures_the_cpu_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes `import pynvml` raise ImportError, exactly as on a
    # machine without nvidia-ml-py, even where the package happens to be installed.
    monkeypatch.setitem(sys.modules, "pynvml", None)
    sampler = DeviceSampler(0.05, gpu=True)
    with sampler:
        time.sleep(0.15)
    summary = sampler.summary()
    assert summary.gpu_unavailable is not None and "pynvml is not installed" in summary.gpu_unavailable
    assert summary.gpu_util_peak is None and summary.cpu_util_peak is not None


class NVMLError(Exception):
    pass


class NVMLErrorNotSupported(NVMLError):
    pass


def fake_pynvml(*, energy_counter: bool) -> types.ModuleType:
    """An NVML that, like a GB10, does not support memory info (and optionally lacks the
    energy counter). No GPU here can produce NVMLError_NotSupported, hence this module."""
    module = types.ModuleType("pynvml")
    energy_mj = iter(range(10_000, 10_000_000, 500))  # +0.5 J per query

    def unsupported(*_args: Any) -> Any:
        raise NVMLErrorNotSupported("Not Supported")

    calls: dict[str, Any] = {
        "NVMLError": NVMLError, "NVMLError_NotSupported": NVMLErrorNotSupported,
        "NVML_TEMPERATURE_GPU": 0,
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 1, "nvmlDeviceGetHandleByIndex": lambda i: f"gpu{i}",
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(gpu=90, memory=10),
        "nvmlDeviceGetPowerUsage": lambda h: 50_000,  # milliwatts
        "nvmlDeviceGetMemoryInfo": unsupported,
        "nvmlDeviceGetTemperature": lambda h, sensor: 61,
        "nvmlDeviceGetTotalEnergyConsumption": (lambda h: next(energy_mj)) if energy_counter
        else unsupported,
    }
    for name, value in calls.items():
        setattr(module, name, value)
    return module


def test_an_nvml_call_the_device_does_not_support_records_none_and_sampling_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(energy_counter=False))
    path = tmp_path / "gpu.csv"
    sampler = DeviceSampler(0.05, path)
    with sampler:
        time.sleep(0.3)
    summary = sampler.summary()

    assert summary.gpu_unavailable is None
    assert (summary.gpu_util_peak, summary.gpu_power_w_peak, summary.gpu_temp_c_peak) == (90, 50, 61)
    assert summary.gpu_memory_peak_bytes is None
    assert summary.energy_source == "nvml-power-integral"
    assert summary.duration_s is not None
    assert summary.energy_j == pytest.approx(50 * summary.duration_s, rel=0.2)
    rows = read_csv(path)
    assert len(rows) >= 3 and all(row["gpu_memory_bytes"] == "" for row in rows)


def test_the_nvml_energy_counter_is_preferred_to_integrating_power(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(energy_counter=True))
    sampler = DeviceSampler(60.0)  # only the start and stop samples
    with sampler:
        pass
    summary = sampler.summary()
    assert summary.samples == 2
    assert (summary.energy_source, summary.energy_j) == ("nvml-energy-counter", 0.5)


def test_rapl_counters_are_read_across_their_wrap_around(tmp_path: Path) -> None:
    assert counter_delta(100, 250, 1000) == 150
    assert counter_delta(990, 5, 1000) == 16  # 990 → 1000, wrap to 0, → 5
    package = tmp_path / "intel-rapl:0"
    subzone = tmp_path / "intel-rapl:0:0"  # counted inside its package: must not add twice
    for zone, energy in ((package, 990), (subzone, 500)):
        zone.mkdir()
        (zone / "max_energy_range_uj").write_text("1000\n")
        (zone / "energy_uj").write_text(f"{energy}\n")
    sampler = DeviceSampler(60.0, gpu=False, powercap=tmp_path)
    with sampler:
        (package / "energy_uj").write_text("5\n")
        (subzone / "energy_uj").write_text("900\n")
    summary = sampler.summary()
    assert summary.energy_source == "rapl"
    assert summary.energy_j == pytest.approx(16e-6)


def test_unreadable_rapl_counters_leave_the_energy_unknown(tmp_path: Path) -> None:
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "max_energy_range_uj").write_text("1000\n")  # energy_uj missing, as without root
    sampler = DeviceSampler(60.0, gpu=False, powercap=tmp_path)
    with sampler:
        pass
    assert (sampler.summary().energy_j, sampler.summary().energy_source) == (None, None)


def test_a_real_trial_hands_its_telemetry_summary_to_its_record(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    recipe = proxy_recipe("tiny").apply({"steps": 6})
    spec = TrialSpec(trial_id="telemetry", recipe=recipe, corpus=corpus,
                     out_dir=str(tmp_path / "trial"), device="cpu", telemetry_interval_s=0.1)
    executor = LocalExecutor(warm=False)
    try:
        result = executor.wait(executor.submit(spec, timeout_s=240))
    finally:
        executor.close()
    assert result.status == "complete", result.message

    fields = result_fields(result, recipe, wall_s=1.0, fallback_provenance={})
    telemetry = fields["metrics"]["telemetry"]
    assert set(telemetry) >= RECORDED_KEYS
    assert telemetry["samples"] >= 2 and telemetry["duration_s"] > 0
    assert telemetry["rss_peak_bytes"] > 0 and telemetry["cpu_util_peak"] > 0
    assert telemetry["gpu_util_peak"] is None
