"""What the device can run: precision support, and detection of the device itself.

A precision the hardware lacks either fails at the first step (fp8 without TransformerEngine
or without FP8 tensor cores) or silently runs hundreds of times slower (bf16 on a CPU
without bf16 instructions, where PyTorch emulates it). Both are rejected before training,
and so is an fp8 recipe whose shapes TransformerEngine's FP8 GEMMs refuse
(:mod:`recipelab.guardrails.fp8`), which would fail at its first step too.

CUDA paths here cannot run on a CPU-only machine, so they are kept to a few obviously
correct lines, and torch is imported only inside :func:`detect_device`.
"""

from __future__ import annotations

import importlib.util
import platform
from pathlib import Path
from typing import Any, get_args

import psutil

from recipelab.guardrails.base import DeviceInfo, GuardContext
from recipelab.guardrails.fp8 import fp8_shape_reasons
from recipelab.recipe import Precision, Recipe
from recipelab.targets import Target

FP8_MIN_CAPABILITY = (8, 9)
"""FP8 tensor cores arrived with Ada (8.9) and Hopper (9.0)."""

BF16_MIN_CAPABILITY = (8, 0)
"""bf16 tensor cores arrived with Ampere (8.0)."""

BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
"""x86 ``flags`` (AVX512-BF16, AMX-BF16) or the aarch64 ``Features`` entry (BFMMLA, e.g. Grace)."""

CPUINFO = Path("/proc/cpuinfo")


def check_hardware(recipe: Recipe, ctx: GuardContext) -> list[str]:
    """Reject a precision the device cannot run, or can run only uselessly slowly."""
    device = ctx.device
    if recipe.precision == "fp8":
        return _fp8_reasons(device) + fp8_shape_reasons(recipe)
    if recipe.precision == "bf16" and device.kind == "cpu" and not device.native_bf16:
        return [
            f"precision 'bf16' is too slow on this CPU ({device.name}): it has no native bf16 "
            "instructions (avx512_bf16 or amx_bf16), so bf16 matmuls run hundreds of times "
            "slower than fp32; use fp32 on this CPU."
        ]
    return []


def cpu_native_bf16(flags: frozenset[str]) -> bool:
    """Whether a CPU with these ``/proc/cpuinfo`` flags computes bf16 in hardware (AVX-512
    BF16, AMX-BF16, aarch64 BF16): there bf16 trains about 1.5x faster than fp32, elsewhere
    PyTorch emulates it hundreds of times slower."""
    return bool(flags & BF16_CPU_FLAGS)


def cuda_native_bf16(capability: tuple[int, int] | None) -> bool:
    """Whether a CUDA GPU of this compute capability has bf16 tensor cores (Ampere on)."""
    return capability is not None and capability >= BF16_MIN_CAPABILITY


def campaign_precision(requested: str, device: DeviceInfo) -> Precision:
    """The precision ``--precision`` asks every trial of a campaign to train in: ``auto`` is
    bf16 where ``device`` computes it natively and fp32 elsewhere (fp8 is never chosen for
    the user: it needs TransformerEngine and changes the numerics most); an explicit one is
    returned as is, for the guardrails to judge."""
    if requested == "auto":
        return "bf16" if device.native_bf16 else "fp32"
    if requested not in get_args(Precision):
        raise ValueError(f"unknown precision {requested!r}: use auto, fp32, bf16 or fp8")
    return requested  # type: ignore[return-value]  # one of Precision, checked above


def supported_precisions(base: Recipe, target: Target, device: DeviceInfo) -> tuple[Precision, ...]:
    """The precisions ``device`` can train ``base`` in: those :func:`check_hardware` passes."""
    ctx = GuardContext(target=target, baseline=base, device=device, param_budget=0)
    return tuple(p for p in get_args(Precision)
                 if not check_hardware(base.apply({"precision": p}), ctx))


def _fp8_reasons(device: DeviceInfo) -> list[str]:
    if device.kind != "cuda":
        fallback = "bf16 or fp32" if device.native_bf16 else "fp32"
        return [
            "precision 'fp8' needs a CUDA GPU with compute capability >= 8.9 (Ada, Hopper, "
            f"Blackwell) and TransformerEngine, but this device is a CPU ({device.name}); "
            f"use {fallback}."
        ]
    reasons: list[str] = []
    capability = device.compute_capability
    if capability is None or capability < FP8_MIN_CAPABILITY:
        shown = "an unknown" if capability is None else f"{capability[0]}.{capability[1]}"
        reasons.append(
            f"precision 'fp8' needs compute capability >= 8.9 (FP8 tensor cores), but "
            f"{device.name} has {shown} compute capability; use bf16."
        )
    if not device.has_transformer_engine:
        reasons.append(
            "precision 'fp8' needs TransformerEngine, which is not installed on this machine "
            "(pip install 'recipelab[fp8]'); use bf16."
        )
    return reasons


def detect_device() -> DeviceInfo:
    """The device trials will run on: the first CUDA GPU if there is one, else the CPU."""
    import torch  # lazily: the agent and the tests of other checks need no torch

    has_te = importlib.util.find_spec("transformer_engine") is not None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        capability = (props.major, props.minor)
        return DeviceInfo("cuda", props.name, gpu_memory_bytes(props), capability, has_te,
                          native_bf16=cuda_native_bf16(capability))
    return cpu_device(has_te)


def cpu_device(has_transformer_engine: bool) -> DeviceInfo:
    """This machine's CPU as trials see it: its name, RAM and whether it has native bf16."""
    cpuinfo = CPUINFO.read_text() if CPUINFO.exists() else ""
    return DeviceInfo("cpu", cpu_model_name(cpuinfo), psutil.virtual_memory().total, None,
                      has_transformer_engine, native_bf16=cpu_native_bf16(cpu_flags(cpuinfo)))


def gpu_memory_bytes(props: Any) -> int:
    """The memory a CUDA device can allocate, from its ``torch.cuda.get_device_properties``.

    On unified-memory parts (GB10) the GPU allocates from system RAM, so the RAM counts, not
    the small carve-out ``total_memory`` reports.
    """
    return int(psutil.virtual_memory().total if props.is_integrated else props.total_memory)


def resolve_device(requested: str = "auto") -> DeviceInfo:
    """The device trials asked for with ``--device`` (``auto``, ``cpu`` or ``cuda``) will run
    on, so the guardrails judge that one and not whatever else this machine has.

    Raises ValueError, saying what to do, for ``cuda`` where torch sees no CUDA GPU (or an
    unknown name): trials would fail at their first step.
    """
    if requested == "auto":
        return detect_device()
    if requested == "cpu":
        return cpu_device(importlib.util.find_spec("transformer_engine") is not None)
    if requested == "cuda":
        import torch  # lazily, as in detect_device

        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
            raise ValueError(
                f"--device cuda was asked, but torch {torch.__version__} ({build}) sees no CUDA "
                "GPU on this machine: use --device cpu (or auto), or install the CUDA build of "
                "torch and check that nvidia-smi lists the GPU")
        return detect_device()
    raise ValueError(f"unknown device {requested!r}: use auto, cpu or cuda")


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The instruction-set flags in ``/proc/cpuinfo`` text (x86 ``flags``, aarch64 ``Features``)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_model_name(cpuinfo: str) -> str:
    """The CPU's marketing name, falling back to what :mod:`platform` knows."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"
