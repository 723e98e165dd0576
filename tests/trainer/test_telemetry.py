"""Specification of the device sampler: what it measures, and what it does when it cannot."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import psutil
import pytest

from recipelab.agent.records import result_fields
from recipelab.runner import LocalExecutor
from recipelab.targets import proxy_recipe
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


# --- which GPU, and whose energy ---------------------------------------------------------------


class NVMLErrorInvalidArgument(NVMLError):
    pass


class NVMLErrorNotFound(NVMLError):
    pass


class Handle:
    """An opaque NVML device handle: only the functions below can make or read one."""

    def __init__(self, index: int, uuid: str) -> None:
        self.index, self.uuid = index, uuid


UUIDS = ("GPU-0a6b8c2d-1111-4e5f-8a9b-000000000000", "GPU-5f3e2d1c-2222-4e5f-8a9b-111111111111",
         "GPU-9c8b7a6f-3333-4e5f-8a9b-222222222222")
MIG_UUID = "MIG-7d1e2f3a-4444-5b6c-9d0e-333333333333"  # a MIG instance of physical GPU 2


def gpu_power_w(index: int) -> int:
    return 100 * (index + 1)  # tells the devices apart in a summary: GPU 0 → 100 W, ...


def multi_gpu_pynvml(processes: dict[int, list[int]] | None = None) -> types.ModuleType:
    """NVML on a three-GPU machine, keeping NVML's rules: handles only by physical index
    (CUDA_VISIBLE_DEVICES means nothing to NVML) or by an exact, whole UUID string; an index
    past the count is an error; every query takes a handle, never an index."""
    module = types.ModuleType("pynvml")
    handles = [Handle(i, uuid) for i, uuid in enumerate(UUIDS)]
    mig = Handle(2, MIG_UUID)
    on_gpu = processes or {}

    def unsupported() -> Any:
        raise NVMLErrorNotSupported("Not Supported")  # so the energy is integrated power

    def handle_of(handle: Any) -> Handle:
        if not isinstance(handle, Handle):
            raise NVMLErrorInvalidArgument("Invalid Argument")
        return handle

    def by_index(index: int) -> Handle:
        if not isinstance(index, int) or not 0 <= index < len(handles):
            raise NVMLErrorInvalidArgument("Invalid Argument")
        return handles[index]

    def by_uuid(uuid: str) -> Handle:
        found = [h for h in [*handles, mig] if h.uuid == uuid]
        if not isinstance(uuid, str) or not found:
            raise NVMLErrorNotFound("Not Found")
        return found[0]

    calls: dict[str, Any] = {
        "NVMLError": NVMLError, "NVML_TEMPERATURE_GPU": 0,
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: len(handles),
        "nvmlDeviceGetHandleByIndex": by_index, "nvmlDeviceGetHandleByUUID": by_uuid,
        "nvmlDeviceGetUUID": lambda h: handle_of(h).uuid,
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(
            gpu=10 * handle_of(h).index, memory=0),
        "nvmlDeviceGetPowerUsage": lambda h: gpu_power_w(handle_of(h).index) * 1000,
        "nvmlDeviceGetMemoryInfo": lambda h: types.SimpleNamespace(used=handle_of(h).index),
        "nvmlDeviceGetTemperature": lambda h, sensor: 40 + handle_of(h).index,
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: handle_of(h) and unsupported(),
        "nvmlDeviceGetComputeRunningProcesses": lambda h: [
            types.SimpleNamespace(pid=pid, usedGpuMemory=1 << 20)
            for pid in on_gpu.get(handle_of(h).index, [])],
    }
    for name, value in calls.items():
        setattr(module, name, value)
    return module


def sampled(monkeypatch: pytest.MonkeyPatch, visible: str | None,
            processes: dict[int, list[int]] | None = None) -> Any:
    monkeypatch.setitem(sys.modules, "pynvml", multi_gpu_pynvml(processes))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.delenv("RECIPELAB_PARALLEL_ON_DEVICE", raising=False)
    sampler = DeviceSampler(60.0)
    with sampler:
        pass
    return sampler.summary()


@pytest.mark.parametrize(("visible", "physical"), [
    (None, 0),
    ("1", 1),
    ("2,0", 2),
    (" 1 , 2", 1),
    (UUIDS[1], 1),
    (f"{UUIDS[2]},{UUIDS[0]}", 2),
    ("GPU-5f3e2d1c", 1),  # a unique prefix, which CUDA accepts
    (MIG_UUID, 2),
])
def test_the_sampler_reads_the_gpu_cuda_visible_devices_gives_the_trial(
        monkeypatch: pytest.MonkeyPatch, visible: str | None, physical: int) -> None:
    summary = sampled(monkeypatch, visible)
    assert summary.gpu_unavailable is None
    assert summary.gpu_power_w_peak == gpu_power_w(physical)
    assert summary.gpu_device == (visible or "0").split(",")[0].strip()


@pytest.mark.parametrize(("visible", "reason"), [
    ("", "hides every GPU"),
    ("-1", "hides every GPU"),
    ("7", "names GPU 7, but NVML sees 3 GPU(s)"),
    ("GPU-ffffffff", "matches 0 GPUs"),
    ("GPU-", "matches 3 GPUs"),
    ("gpu0", "neither an index nor a GPU-/MIG- UUID"),
])
def test_a_gpu_the_trial_cannot_see_is_not_sampled_and_the_summary_says_why(
        monkeypatch: pytest.MonkeyPatch, visible: str, reason: str) -> None:
    summary = sampled(monkeypatch, visible)
    assert summary.gpu_unavailable is not None and reason in summary.gpu_unavailable
    assert summary.gpu_power_w_peak is None and summary.cpu_util_peak is not None


def test_a_gpu_the_trial_has_alone_gives_the_trials_energy(monkeypatch: pytest.MonkeyPatch) -> None:
    summary = sampled(monkeypatch, "1", processes={1: [4242], 0: [1, 2, 3]})
    assert (summary.gpu_shared_by, summary.energy_scope) == (1, "trial")
    assert summary.energy_source == "nvml-power-integral"


def test_a_shared_gpu_gives_the_devices_energy_named_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    # two trials (or a trial and the LLM server) computing on physical GPU 1 at once
    summary = sampled(monkeypatch, "1", processes={1: [4242, 4343]})
    assert (summary.gpu_shared_by, summary.energy_scope) == (2, "device")


def test_the_executors_count_of_sharers_counts_when_nvml_cannot_list_processes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    module = multi_gpu_pynvml()
    del module.nvmlDeviceGetComputeRunningProcesses  # as on a device without the query
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("RECIPELAB_PARALLEL_ON_DEVICE", "3")
    sampler = DeviceSampler(60.0)
    with sampler:
        pass
    summary = sampler.summary()
    assert (summary.gpu_shared_by, summary.energy_scope) == (3, "device")
    monkeypatch.delenv("RECIPELAB_PARALLEL_ON_DEVICE")
    with (sampler := DeviceSampler(60.0)):
        pass
    unknown = sampler.summary()
    assert (unknown.gpu_shared_by, unknown.energy_scope) == (None, "device")


def test_a_ray_task_given_a_gpu_samples_the_gpu_ray_assigned(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ray tells a task its GPU through CUDA_VISIBLE_DEVICES; a CPU machine can declare GPUs
    # to Ray, so the variable a real Ray task receives is read here, then sampled.
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=1, num_gpus=3, include_dashboard=False,
             log_to_driver=False, configure_logging=False, _node_ip_address="127.0.0.1")
    try:
        def gpu_given() -> tuple[str, list[Any]]:
            return os.environ["CUDA_VISIBLE_DEVICES"], ray.get_gpu_ids()

        one_gpu = {"num_gpus": 1, "num_cpus": 0}
        another = ray.remote(**one_gpu)(gpu_given)

        def assigned(others: int) -> list[tuple[str, list[Any]]]:
            # holding its own GPU, so the others are given the next ones
            found: list[tuple[str, list[Any]]] = ray.get([another.remote() for _ in range(others)])
            return [*found, gpu_given()]

        given = ray.get(ray.remote(**one_gpu)(assigned).remote(1))
    finally:
        ray.shutdown()
    assert len({visible for visible, _ in given}) == 2, "two GPUs given at once"
    for visible, ids in given:
        summary = sampled(monkeypatch, visible)
        assert summary.gpu_power_w_peak == gpu_power_w(int(ids[0]))
