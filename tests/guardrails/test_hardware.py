"""hardware: precision against the device; detect_device() on this machine."""

from __future__ import annotations

from dataclasses import replace

import pytest

from recipelab.guardrails import DeviceInfo, check_hardware, detect_device
from recipelab.guardrails.hardware import cpu_flags, cpu_model_name
from tests.guardrails.factories import A100, BASELINE, CPU, H100, OLD_CPU, context


def hardware(precision: str, device: DeviceInfo) -> list[str]:
    return check_hardware(BASELINE.apply({"precision": precision}), context(device=device))


@pytest.mark.parametrize("device", [CPU, OLD_CPU, H100])
def test_fp32_runs_everywhere(device: DeviceInfo) -> None:
    assert hardware("fp32", device) == []


def test_fp8_on_a_cpu_names_what_it_needs() -> None:
    (reason,) = hardware("fp8", CPU)
    assert reason.startswith("precision 'fp8' needs a CUDA GPU with compute capability >= 8.9")
    assert "TransformerEngine" in reason and "Test Xeon" in reason
    assert reason.endswith("use bf16 or fp32.")
    assert hardware("fp8", OLD_CPU)[0].endswith("use fp32.")


def test_fp8_on_a_gpu_before_ada_is_rejected_for_its_compute_capability() -> None:
    (reason,) = hardware("fp8", A100)
    assert "compute capability >= 8.9" in reason and "NVIDIA A100 has 8.0" in reason


def test_fp8_without_transformer_engine_is_rejected() -> None:
    (reason,) = hardware("fp8", replace(H100, has_transformer_engine=False))
    assert "TransformerEngine, which is not installed" in reason


def test_fp8_on_hopper_with_transformer_engine_is_accepted() -> None:
    assert hardware("fp8", H100) == []


def test_bf16_on_a_cpu_without_native_bf16_is_too_slow() -> None:
    (reason,) = hardware("bf16", OLD_CPU)
    assert reason.startswith("precision 'bf16' is too slow on this CPU (Test Core i5)")
    assert reason.endswith("use fp32 on this CPU.")


@pytest.mark.parametrize("device", [CPU, A100])
def test_bf16_with_native_support_is_accepted(device: DeviceInfo) -> None:
    assert hardware("bf16", device) == []


def test_detect_device_on_this_machine_is_a_cpu_with_memory() -> None:
    device = detect_device()
    assert device.kind == "cpu"
    assert device.memory_bytes > 0
    assert device.compute_capability is None
    assert device.name


X86 = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse avx512f avx512_bf16 amx_bf16 amx_tile
"""
ARM = """processor\t: 0
Features\t: fp asimd sve bf16 i8mm
CPU implementer\t: 0x41
"""


def test_cpuinfo_flags_are_read_on_x86_and_aarch64() -> None:
    assert {"avx512_bf16", "amx_bf16"} <= cpu_flags(X86)
    assert "bf16" in cpu_flags(ARM)
    assert cpu_flags("") == frozenset()


def test_cpu_model_name_falls_back_when_cpuinfo_has_none() -> None:
    assert cpu_model_name(X86) == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu_model_name(ARM)  # aarch64 cpuinfo has no model name; platform still knows
