"""The device sampler: utilization, memory, power, temperature and energy while work runs.

One :class:`DeviceSampler` serves both a single trial (inside the trainer process) and the
envelope sweep (in the launcher, over its trial subprocesses). A background thread takes a
sample every ``interval_s`` seconds, plus one at start and one at stop so that even a trial
shorter than the interval has a mean and a peak.

- On a GPU with NVML (package ``nvidia-ml-py``, imported lazily): utilization, power,
  memory used, temperature, and the total-energy counter. Every NVML call is guarded on its
  own: a call the device does not support (a GB10 has no memory info) records ``None`` for
  that quantity and the sampler goes on.
- The GPU sampled is the trial's own: NVML numbers devices physically and ignores
  ``CUDA_VISIBLE_DEVICES``, so the first visible entry (an index, or a ``GPU-``/``MIG-``
  UUID, whole or a unique prefix as CUDA accepts) picks the NVML handle. Ray sets that
  variable for a task it gives a GPU, so a Ray trial samples the GPU Ray assigned.
- Everything NVML reports (power, energy, utilization, memory) is the device's, not a
  process's. When other processes use the GPU at the same time (parallel trials, the LLM
  server on the same GPU), the summary says so: ``gpu_shared_by`` is the most processes seen
  on it at once (or the executor's count of trials sharing it, ``RECIPELAB_PARALLEL_ON_DEVICE``,
  when larger), and ``energy_scope`` is ``device`` rather than ``trial``. The energy is not
  divided by a guess: it is the device's energy over the trial's time, named as such.
- Always, through psutil: CPU utilization and resident memory of this process and its
  children (the trainer subprocesses of a sweep).
- On CPU, energy from the RAPL counters in ``/sys/class/powercap`` where they are readable
  (often only by root), with their wrap-around handled.

Nothing here ever raises because a quantity is missing: it is ``None`` in the summary.
"""

from __future__ import annotations

import contextlib
import csv
import importlib
import itertools
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Literal

import psutil

from recipelab import environment
from recipelab.errors import RecipelabError
from recipelab.recipe import StrictModel

DEFAULT_INTERVAL_S = 2.0
POWERCAP = Path("/sys/class/powercap")
CSV_COLUMNS = ("t_s", "cpu_util", "rss_bytes", "gpu_util", "gpu_power_w", "gpu_memory_bytes",
               "gpu_temp_c", "gpu_energy_mj", "gpu_processes", "rapl_energy_uj")
VISIBLE_DEVICES_ENV = environment.VISIBLE_DEVICES
PARALLEL_ON_DEVICE_ENV = environment.PARALLEL_ON_DEVICE
EnergyScope = Literal["trial", "device"]


class TelemetrySummary(StrictModel):
    """Mean and peak of each sampled quantity and the energy used; ``None`` where unknown.

    ``cpu_util`` is a percentage of the whole machine (all cores = 100), like ``gpu_util``
    of the whole GPU. ``energy_source`` says where ``energy_j`` came from:
    ``nvml-energy-counter``, ``nvml-power-integral`` or ``rapl``.
    """

    samples: int | None = None
    duration_s: float | None = None
    cpu_util_mean: float | None = None
    cpu_util_peak: float | None = None
    rss_peak_bytes: int | None = None
    gpu_util_mean: float | None = None
    gpu_util_peak: float | None = None
    gpu_power_w_mean: float | None = None
    gpu_power_w_peak: float | None = None
    gpu_memory_peak_bytes: int | None = None
    gpu_temp_c_peak: float | None = None
    energy_j: float | None = None
    energy_source: str | None = None
    # "trial": the GPU was the trial's alone; "device": the whole device's energy over the
    # trial's time (shared GPU, or RAPL's CPU package), not the trial's share of it.
    energy_scope: EnergyScope | None = None
    gpu_device: str | None = None  # the GPU sampled: its CUDA_VISIBLE_DEVICES entry, or "0"
    gpu_shared_by: int | None = None  # the most processes on that GPU at once, when known
    gpu_unavailable: str | None = None  # why no GPU was sampled, when none was


# --- RAPL ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RaplZone:
    """One top-level RAPL package zone; its ``energy_uj`` wraps at ``max_energy_range_uj``."""

    energy_path: Path
    max_range_uj: int

    def read(self) -> int:
        return int(self.energy_path.read_text())


def rapl_zones(root: Path = POWERCAP) -> list[RaplZone]:
    """The readable package zones (``intel-rapl:N``; sub-zones would count energy twice)."""
    zones = []
    for zone in sorted(root.glob("intel-rapl:*")):
        if zone.name.count(":") != 1:
            continue
        try:
            found = RaplZone(zone / "energy_uj", int((zone / "max_energy_range_uj").read_text()))
            found.read()
        except (OSError, ValueError):
            continue  # unreadable without root on most kernels since 2020
        zones.append(found)
    return zones


def counter_delta(before: int, after: int, max_range: int) -> int:
    """How far a counter that wraps to 0 after ``max_range`` advanced from ``before`` to
    ``after``, assuming at most one wrap in between (RAPL wraps after minutes at the least)."""
    return after - before if after >= before else after + max_range + 1 - before


# --- NVML ------------------------------------------------------------------------------------


class NoVisibleGpu(RecipelabError):
    """``CUDA_VISIBLE_DEVICES`` leaves the trial no GPU NVML can find; the message says why."""


def visible_device(env: Mapping[str, str]) -> str:
    """The trial's logical device 0 as ``CUDA_VISIBLE_DEVICES`` names it (``"0"`` when unset)."""
    visible = env.get(VISIBLE_DEVICES_ENV)
    if visible is None:
        return "0"
    first = visible.split(",", 1)[0].strip()
    if not first or first.startswith("-"):
        raise NoVisibleGpu(f"{VISIBLE_DEVICES_ENV}={visible!r} hides every GPU")
    return first


def _uuid(pynvml: ModuleType, handle: Any) -> str:
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)  # bytes in old nvidia-ml-py


def nvml_handle(pynvml: ModuleType, device: str) -> Any:
    """The NVML handle of ``device``, an entry of ``CUDA_VISIBLE_DEVICES``.

    An index is a physical index, as NVML's are (CUDA_DEVICE_ORDER=PCI_BUS_ID assumed, as
    NVML orders by PCI bus). A UUID (``GPU-...`` or ``MIG-...``) is looked up by NVML; a
    prefix of one, which CUDA also accepts, is matched against every device's UUID.
    """
    if device.isdigit():
        count = pynvml.nvmlDeviceGetCount()
        if int(device) >= count:
            raise NoVisibleGpu(f"{VISIBLE_DEVICES_ENV} names GPU {device}, but NVML sees "
                               f"{count} GPU(s)")
        return pynvml.nvmlDeviceGetHandleByIndex(int(device))
    if not device.startswith(("GPU-", "MIG-")):
        raise NoVisibleGpu(f"{VISIBLE_DEVICES_ENV} entry {device!r} is neither an index nor a "
                           "GPU-/MIG- UUID")
    with contextlib.suppress(Exception):  # NVMLError_NotFound: perhaps a prefix
        return pynvml.nvmlDeviceGetHandleByUUID(device)
    matches = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        if _uuid(pynvml, handle).startswith(device):
            matches.append(handle)
    if len(matches) != 1:
        raise NoVisibleGpu(f"{VISIBLE_DEVICES_ENV} entry {device!r} matches "
                           f"{len(matches)} GPUs NVML sees, not one")
    return matches[0]


def load_nvml(env: Mapping[str, str] | None = None) -> tuple[ModuleType | None, Any, str | None]:
    """``(pynvml, handle of the trial's GPU, None)``, or ``(None, None, reason)`` when NVML
    is unusable or no GPU is visible to the trial."""
    env = os.environ if env is None else env
    try:
        pynvml = importlib.import_module("pynvml")
    except ImportError:
        return None, None, "pynvml is not installed (pip install 'recipelab[gpu]')"
    try:
        pynvml.nvmlInit()
    except Exception as error:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return None, None, f"NVML is unavailable: {type(error).__name__}: {error}"
    try:
        if pynvml.nvmlDeviceGetCount() < 1:
            raise NoVisibleGpu("NVML sees no GPU")
        return pynvml, nvml_handle(pynvml, visible_device(env)), None
    except Exception as error:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
        if isinstance(error, NoVisibleGpu):
            return None, None, str(error)
        return None, None, f"NVML is unavailable: {type(error).__name__}: {error}"


def parallel_on_one_device(env: Mapping[str, str]) -> int | None:
    """The executor's count of trials sharing this GPU (``RECIPELAB_PARALLEL_ON_DEVICE``), if any."""
    try:
        value = int(env.get(PARALLEL_ON_DEVICE_ENV, ""))
    except ValueError:
        return None
    return value if value >= 1 else None


def _process_count(nvml: ModuleType, handle: Any) -> int | None:
    """Distinct processes computing on the GPU now (the trial's own included)."""
    query = getattr(nvml, "nvmlDeviceGetComputeRunningProcesses", None)
    processes = None if query is None else _guarded(query, handle)
    return None if processes is None else len({p.pid for p in processes})


def _guarded(call: Any, *args: Any) -> Any:
    """One NVML query, or None when the device does not support it (or it fails otherwise)."""
    try:
        return call(*args)
    except Exception:  # NVMLError_NotSupported above all: never let one quantity stop sampling
        return None


@dataclass
class Sample:
    t_s: float
    cpu_util: float | None = None
    rss_bytes: int | None = None
    gpu_util: float | None = None
    gpu_power_w: float | None = None
    gpu_memory_bytes: int | None = None
    gpu_temp_c: float | None = None
    gpu_energy_mj: int | None = None
    gpu_processes: int | None = None
    rapl_energy_uj: int | None = None  # accumulated since start, wrap-around resolved


@dataclass
class _CpuTree:
    """CPU utilization and RSS of a process and all its descendants."""

    root: psutil.Process
    known: dict[int, psutil.Process] = field(default_factory=dict)

    def sample(self) -> tuple[float | None, int | None]:
        """Utilization since the previous call (None on the first, which has no interval)
        and the resident memory now."""
        first = not self.known
        try:
            processes = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return None, None
        busy, rss = 0.0, 0
        for process in processes:
            # cpu_percent measures since the previous call on the same Process object, so
            # processes are kept; a new one reports 0 on its first sample.
            tracked = self.known.setdefault(process.pid, process)
            with contextlib.suppress(psutil.Error):
                busy += tracked.cpu_percent(None)
                rss += tracked.memory_info().rss
        alive = {p.pid for p in processes}
        self.known = {pid: p for pid, p in self.known.items() if pid in alive}
        return (None if first else busy / (psutil.cpu_count() or 1)), rss


class DeviceSampler:
    """Sample the device in a background thread; use as a context manager, then
    :meth:`summary`. ``gpu=False`` skips NVML (a trial pinned to the CPU)."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, csv_path: Path | None = None,
                 *, gpu: bool = True, pid: int | None = None,
                 powercap: Path = POWERCAP, env: Mapping[str, str] | None = None) -> None:
        if interval_s <= 0:
            raise ValueError(f"the sampling interval must be positive, got {interval_s} s")
        self.interval_s = interval_s
        self.csv_path = csv_path
        self.gpu_wanted = gpu
        self.cpu = _CpuTree(psutil.Process(pid))
        self.powercap = powercap
        self.env = os.environ if env is None else env
        self.gpu_device: str | None = None
        self.samples: list[Sample] = []
        self.gpu_unavailable: str | None = None
        self._nvml: ModuleType | None = None
        self._handle: Any = None
        self._rapl: list[RaplZone] = []
        self._rapl_last: list[int] = []
        self._rapl_total = 0
        self._started = 0.0
        self._stopped: float | None = None
        self._stop = threading.Event()
        self._running = False
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> DeviceSampler:
        if self.gpu_wanted:
            self._nvml, self._handle, self.gpu_unavailable = load_nvml(self.env)
            if self._nvml is not None:
                self.gpu_device = visible_device(self.env)
        else:
            self.gpu_unavailable = "the work runs on the CPU"
        self._rapl = rapl_zones(self.powercap)
        self._rapl_last = [self._read_zone(zone) or 0 for zone in self._rapl]
        self._started = time.monotonic()
        self._take()
        self._running = True
        thread = threading.Thread(target=self._run, name="device-sampler", daemon=True)
        try:
            thread.start()
            self._thread = thread
        except RuntimeError:  # no room for a thread stack (a tight RLIMIT_AS): ends only
            self._thread = None
        return self

    def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._take()
        self._stopped = time.monotonic()
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
        if self.csv_path is not None:
            self.write_csv(self.csv_path)

    def __enter__(self) -> DeviceSampler:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(Exception):  # a failed sample must not end the sampling
                self._take()

    # -- one sample --------------------------------------------------------------------------

    @staticmethod
    def _read_zone(zone: RaplZone) -> int | None:
        try:
            return zone.read()
        except (OSError, ValueError):
            return None

    def _rapl_energy(self) -> int | None:
        if not self._rapl:
            return None
        for index, zone in enumerate(self._rapl):
            now = self._read_zone(zone)
            if now is None:
                continue
            self._rapl_total += counter_delta(self._rapl_last[index], now, zone.max_range_uj)
            self._rapl_last[index] = now
        return self._rapl_total

    def _take(self) -> None:
        sample = Sample(t_s=time.monotonic() - self._started)
        sample.cpu_util, sample.rss_bytes = self.cpu.sample()
        sample.rapl_energy_uj = self._rapl_energy()
        nvml, handle = self._nvml, self._handle
        if nvml is not None:
            rates = _guarded(nvml.nvmlDeviceGetUtilizationRates, handle)
            sample.gpu_util = None if rates is None else float(rates.gpu)
            power_mw = _guarded(nvml.nvmlDeviceGetPowerUsage, handle)
            sample.gpu_power_w = None if power_mw is None else power_mw / 1000
            memory = _guarded(nvml.nvmlDeviceGetMemoryInfo, handle)
            sample.gpu_memory_bytes = None if memory is None else int(memory.used)
            temperature = _guarded(nvml.nvmlDeviceGetTemperature, handle,
                                   getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
            sample.gpu_temp_c = None if temperature is None else float(temperature)
            sample.gpu_energy_mj = _guarded(nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
            sample.gpu_processes = _process_count(nvml, handle)
        self.samples.append(sample)

    # -- results -----------------------------------------------------------------------------

    def write_csv(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(CSV_COLUMNS)
            for sample in self.samples:
                writer.writerow(["" if (v := getattr(sample, c)) is None else v
                                 for c in CSV_COLUMNS])

    def summary(self) -> TelemetrySummary:
        samples = self.samples
        end = self._stopped if self._stopped is not None else time.monotonic()
        energy, source = self._energy()
        shared_by = self._shared_by()
        scope: EnergyScope | None = None
        if source is not None:
            alone = source.startswith("nvml") and shared_by is not None and shared_by <= 1
            scope = "trial" if alone else "device"
        return TelemetrySummary(
            samples=len(samples), duration_s=round(end - self._started, 3) if samples else 0.0,
            cpu_util_mean=_mean(s.cpu_util for s in samples),
            cpu_util_peak=_peak(s.cpu_util for s in samples),
            rss_peak_bytes=_int(_peak(s.rss_bytes for s in samples)),
            gpu_util_mean=_mean(s.gpu_util for s in samples),
            gpu_util_peak=_peak(s.gpu_util for s in samples),
            gpu_power_w_mean=_mean(s.gpu_power_w for s in samples),
            gpu_power_w_peak=_peak(s.gpu_power_w for s in samples),
            gpu_memory_peak_bytes=_int(_peak(s.gpu_memory_bytes for s in samples)),
            gpu_temp_c_peak=_peak(s.gpu_temp_c for s in samples),
            energy_j=energy, energy_source=source, energy_scope=scope,
            gpu_device=self.gpu_device, gpu_shared_by=shared_by,
            gpu_unavailable=self.gpu_unavailable,
        )

    def _shared_by(self) -> int | None:
        """How many processes used the GPU at once: what NVML saw, or what the executor
        says, whichever is more; None without a GPU or when neither is known."""
        if self._nvml is None:
            return None
        seen = [s.gpu_processes for s in self.samples if s.gpu_processes is not None]
        known = [n for n in (max(seen, default=None), parallel_on_one_device(self.env)) if n is not None]
        return max(known) if known else None

    def _energy(self) -> tuple[float | None, str | None]:
        """Joules from the best source: NVML's counter, NVML power over time, then RAPL."""
        counters = [(s.t_s, s.gpu_energy_mj) for s in self.samples if s.gpu_energy_mj is not None]
        if len(counters) >= 2:
            return (counters[-1][1] - counters[0][1]) / 1000, "nvml-energy-counter"
        powers = [(s.t_s, s.gpu_power_w) for s in self.samples if s.gpu_power_w is not None]
        if len(powers) >= 2:
            joules = sum((t1 - t0) * (p0 + p1) / 2
                         for (t0, p0), (t1, p1) in itertools.pairwise(powers))
            return joules, "nvml-power-integral"
        rapl = [s.rapl_energy_uj for s in self.samples if s.rapl_energy_uj is not None]
        if len(rapl) >= 2:
            return (rapl[-1] - rapl[0]) / 1e6, "rapl"
        return None, None


def _present(values: Any) -> list[float]:
    return [v for v in values if v is not None]


def _mean(values: Any) -> float | None:
    found = _present(values)
    return round(sum(found) / len(found), 3) if found else None


def _peak(values: Any) -> float | None:
    found = _present(values)
    return max(found) if found else None


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
