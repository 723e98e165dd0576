"""What ``--parallel auto`` and ``--precision auto`` become on the machine trials run on.

A night's yield is trials per hour, and two defaults decide most of it:

* **Trials in flight.** On a CPU, trials of one thread each, one per core, finish 1.86x as
  many trials per hour as one trial using every core (``bench/thread_policy.py``: 206
  against 111 on two cores): a proxy's small matmuls do not scale across cores, and the
  per-trial setup and evaluation run on one core anyway. So ``auto`` is one trial per
  physical core, bounded by the memory the trials would take together. On one GPU it is
  one trial (trials sharing a GPU have not been measured to pay); with Ray, as many as the
  cluster has GPUs (or CPUs, on a CPU-only cluster), one per Ray task.
* **Precision.** bf16 where the device computes it natively (the hardware guardrail's one
  detection, :func:`recipelab.guardrails.hardware.campaign_precision`), else fp32; the
  baseline included, so one ranking never mixes two numerics.

:func:`resolve` is the one step that decides them, once per command: ``recipelab run`` calls
it before its preflight, and the settings saved in the campaign directory, the preflight and
the campaign all read its :class:`Resolved` (``tests/agent/setup/test_machine.py`` fails when
``auto`` is resolved anywhere else).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from recipelab.agent.setup.settings import AUTO, CampaignSettings, SettingsError
from recipelab.cores import usable_cores
from recipelab.guardrails.base import DeviceInfo
from recipelab.guardrails.hardware import campaign_precision, resolve_device
from recipelab.units import GIB

if TYPE_CHECKING:
    from recipelab.runner.base import Executor

CPU_TRIALS_PER_CORE = 1
"""Trials in flight per physical core on a CPU, each with one thread: the thread policy's
measured winner (bench/thread_policy.py)."""

AUTO_MEMORY_HEADROOM = 2.0
"""``auto`` keeps this many times the baseline's predicted peak free per trial: the search
space doubles the batch, so a candidate can need twice the baseline's activations."""


def auto_parallel(device: DeviceInfo, *, cores: int, peak_bytes: int, reserve_bytes: int = 0,
                  executor_slots: int | None = None) -> tuple[int, str]:
    """Trials in flight for ``--parallel auto``, and why, in words for the log.

    ``executor_slots`` is what a Ray cluster can run at once (None for local trials);
    ``peak_bytes`` the baseline's predicted peak memory; ``reserve_bytes`` what is kept
    free for an LLM server.
    """
    if executor_slots is not None:
        return max(1, executor_slots), f"the Ray cluster runs {executor_slots} trial(s) at once"
    if device.kind == "cuda":
        return 1, ("one GPU: one trial at a time (give --parallel N to share it; trials per "
                   "GPU have not been measured to pay)")
    by_cores = cores * CPU_TRIALS_PER_CORE
    room = max(0, device.memory_bytes - reserve_bytes)
    by_memory = int(room // max(1, round(peak_bytes * AUTO_MEMORY_HEADROOM)))
    trials = max(1, min(by_cores, by_memory))
    why = f"one 1-thread trial per core on {cores} core(s)"
    if by_memory < by_cores:
        why += (f", bounded by memory: {room / GIB:.1f} GiB holds {by_memory} trial(s) of "
                f"{AUTO_MEMORY_HEADROOM:g} x the baseline's predicted {peak_bytes / GIB:.2f} GiB")
    return trials, why


@dataclass(frozen=True)
class Resolved:
    """A campaign's settings with nothing left for the machine to decide: ``auto`` became
    numbers (``notes`` says why, one line each) and ``device`` is where trials run.

    ``executor`` is the Ray cluster's connection when trials run there, opened to ask the
    cluster its device and size; the preflight and the campaign use it rather than connect
    again. None for local trials."""

    settings: CampaignSettings
    device: DeviceInfo
    notes: tuple[str, ...] = ()
    executor: Executor | None = None


def resolve(settings: CampaignSettings, executor: Executor | None = None, *,
            device: DeviceInfo | None = None) -> Resolved:
    """``settings`` resolved for where ``executor`` runs trials (this machine when None):
    the device (``device`` when the caller already knows it), then ``parallel`` and
    ``precision``. Raises SettingsError, saying what to do, when the device does not exist."""
    device = device or trial_device(settings, executor)
    resolved, notes = resolve_auto(settings, device,
                                   executor_slots=executor.slots() if executor else None)
    return Resolved(resolved, device, tuple(notes), executor)


def trial_device(settings: CampaignSettings, executor: Executor | None) -> DeviceInfo:
    """The device ``--device`` asks trials to run on, as the executor's workers see it (this
    machine's for local trials): the one the guardrails judge."""
    try:
        return ((executor.device(settings.executor.device) if executor else None)
                or resolve_device(settings.executor.device))
    except ValueError as error:
        raise SettingsError(str(error)) from None


def resolve_auto(settings: CampaignSettings, device: DeviceInfo, *,
                 executor_slots: int | None = None, cores: int | None = None,
                 peak_bytes: int | None = None) -> tuple[CampaignSettings, list[str]]:
    """``settings`` with ``precision`` and ``parallel`` resolved for ``device``, and one
    line per value ``auto`` chose, saying why. Explicit values are kept as given. Called by
    :func:`resolve` only.

    ``peak_bytes`` defaults to the memory model's prediction for the baseline in the
    resolved precision; ``cores`` to :func:`usable_cores`.
    """
    notes: list[str] = []
    if settings.precision == AUTO:
        precision = campaign_precision(AUTO, device)
        native = "computes bf16 natively" if device.native_bf16 else "has no native bf16"
        notes.append(f"precision auto: {precision} ({device.name} {native})")
        settings = settings.model_copy(update={"precision": precision})
    if settings.executor.parallel == AUTO:
        if peak_bytes is None:
            peak_bytes = predicted_baseline_peak(settings, device)
        trials, why = auto_parallel(
            device, cores=cores or usable_cores(), peak_bytes=peak_bytes,
            reserve_bytes=int(settings.executor.memory_reserve_gib * GIB), executor_slots=executor_slots)
        notes.append(f"parallel auto: {trials} ({why})")
        settings = settings.model_copy(update={"parallel": trials})
    return settings, notes


def predicted_baseline_peak(settings: CampaignSettings, device: DeviceInfo) -> int:
    """The baseline's peak memory as the memory guardrail predicts it on ``device``."""
    from recipelab.agent.guard_context import guard_context
    from recipelab.guardrails.memory import predict_with_model

    baseline = settings.baseline()
    return predict_with_model(baseline, guard_context(settings, baseline, device))[0]
