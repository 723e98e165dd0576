"""hardware: precision against the device; detect_device() on this machine; the device
``--device`` names (a campaign judges it: tests/agent/test_campaign.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from recipelab.guardrails import DeviceInfo, check_hardware, detect_device
from recipelab.guardrails.hardware import (
    CPUINFO,
    campaign_precision,
    cpu_flags,
    cpu_model_name,
    cpu_native_bf16,
    cuda_native_bf16,
    resolve_device,
)
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


AVX2_ONLY = "flags\t\t: fpu sse avx2 fma\n"
AVX512_NO_BF16 = "flags\t\t: fpu sse avx512f avx512bw avx512_vnni\n"
ZEN4 = "flags\t\t: fpu sse avx512f avx512_bf16\n"
SAPPHIRE_AMX_ONLY = "flags\t\t: fpu sse avx512f amx_bf16 amx_tile\n"


@pytest.mark.parametrize(("cpuinfo", "native"), [
    (X86, True), (ZEN4, True), (SAPPHIRE_AMX_ONLY, True), (ARM, True),
    (AVX512_NO_BF16, False), (AVX2_ONLY, False), ("", False),
])
def test_a_cpu_has_native_bf16_with_avx512_bf16_amx_bf16_or_the_aarch64_bf16_feature(
    cpuinfo: str, native: bool,
) -> None:
    assert cpu_native_bf16(cpu_flags(cpuinfo)) is native


@pytest.mark.parametrize(("capability", "native"), [
    ((7, 0), False), ((7, 5), False), ((8, 0), True), ((8, 9), True), ((12, 1), True),
    (None, False),
])
def test_a_cuda_gpu_has_native_bf16_from_ampere_on(capability: tuple[int, int] | None,
                                                  native: bool) -> None:
    assert cuda_native_bf16(capability) is native


V100 = replace(H100, name="Tesla V100", compute_capability=(7, 0), native_bf16=False)


@pytest.mark.parametrize(("device", "precision"), [
    (CPU, "bf16"), (OLD_CPU, "fp32"), (H100, "bf16"), (A100, "bf16"), (V100, "fp32"),
])
def test_auto_precision_is_bf16_where_the_device_computes_it_natively_else_fp32(
    device: DeviceInfo, precision: str,
) -> None:
    assert campaign_precision("auto", device) == precision


@pytest.mark.parametrize("requested", ["fp32", "bf16", "fp8"])
def test_an_explicit_precision_is_kept_for_the_guardrails_to_judge(requested: str) -> None:
    assert campaign_precision(requested, OLD_CPU) == requested


def test_an_unknown_precision_names_the_ones_there_are() -> None:
    with pytest.raises(ValueError, match="unknown precision 'fp16': use auto, fp32, bf16 or fp8"):
        campaign_precision("fp16", CPU)


def test_this_machines_detected_bf16_follows_its_cpuinfo_flags() -> None:
    """One detection: what detect_device reports is the flag rule applied to /proc/cpuinfo."""
    cpuinfo = CPUINFO.read_text() if CPUINFO.exists() else ""
    assert detect_device().native_bf16 is cpu_native_bf16(cpu_flags(cpuinfo))


def test_device_cpu_is_judged_as_the_cpu() -> None:
    device = resolve_device("cpu")
    assert device.kind == "cpu" and device.compute_capability is None
