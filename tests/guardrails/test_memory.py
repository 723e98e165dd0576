"""memory: the analytic peak, its calibration, and the check against device minus reserve."""

from __future__ import annotations

import pytest

from recipelab.guardrails import (
    GIB,
    analytic_peak_bytes,
    calibration_factor,
    check_memory,
    predict_peak_bytes,
)
from recipelab.guardrails.memory import PROCESS_OVERHEAD_BYTES, STATE_BYTES_PER_PARAM
from tests.guardrails.factories import BASELINE, CPU, H100, context, measured

BIG = BASELINE.apply({"batch_size": 64, "seq_len": 512})


def test_the_prediction_holds_overhead_and_optimizer_state_and_grows_with_the_batch() -> None:
    peak = analytic_peak_bytes(BASELINE, CPU)
    floor = PROCESS_OVERHEAD_BYTES["cpu"] + STATE_BYTES_PER_PARAM * BASELINE.param_count()
    assert peak > floor
    doubled = analytic_peak_bytes(BASELINE.apply({"batch_size": 16}), CPU)
    assert doubled - floor == pytest.approx(2 * (peak - floor), rel=1e-9)


def test_gradient_accumulation_costs_no_activation_memory() -> None:
    assert analytic_peak_bytes(BASELINE.apply({"grad_accum": 8}), CPU) == analytic_peak_bytes(
        BASELINE, CPU)


def test_bf16_saves_activation_memory() -> None:
    assert analytic_peak_bytes(BIG.apply({"precision": "bf16"}), CPU) < analytic_peak_bytes(
        BIG, CPU)


def test_unfused_attention_on_cuda_pays_for_the_score_matrix() -> None:
    odd_heads = BIG.apply({"shape.head_dim": 36})  # not a multiple of 8: SDPA's math path
    even_heads = BIG.apply({"shape.head_dim": 40})
    assert analytic_peak_bytes(odd_heads, H100) > analytic_peak_bytes(even_heads, H100)
    assert analytic_peak_bytes(odd_heads, CPU) < analytic_peak_bytes(even_heads, CPU)


def test_gelu_in_fp32_on_the_cpu_counts_the_sigmoid_its_backward_keeps() -> None:
    """The trainer's fp32 CPU GELU saves one more ``ffn_hidden``-wide tensor per layer and
    token; CUDA's fused GELU does not."""
    gelu = BIG.apply({"shape.activation": "gelu"})
    shape = gelu.shape
    extra = shape.n_layer * shape.ffn_hidden * gelu.batch_size * gelu.seq_len * 4
    h100_gpu = analytic_peak_bytes(gelu, H100) - PROCESS_OVERHEAD_BYTES["cuda"]
    assert analytic_peak_bytes(gelu, CPU) - PROCESS_OVERHEAD_BYTES["cpu"] == h100_gpu + extra
    assert (analytic_peak_bytes(BIG, CPU) - PROCESS_OVERHEAD_BYTES["cpu"]
            == analytic_peak_bytes(BIG, H100) - PROCESS_OVERHEAD_BYTES["cuda"])

def test_calibration_factor_is_the_median_measured_over_predicted_ratio() -> None:
    predicted = analytic_peak_bytes(BASELINE, CPU)
    trials = [measured(BASELINE, peak_memory_bytes=round(predicted * r)) for r in (1.2, 1.5, 3.0)]
    assert calibration_factor(trials, CPU) == pytest.approx(1.5, rel=1e-6)
    assert predict_peak_bytes(BIG, CPU, trials) == pytest.approx(
        1.5 * analytic_peak_bytes(BIG, CPU), rel=1e-6)


def test_calibration_without_usable_measurements_is_neutral() -> None:
    assert calibration_factor([], CPU) == 1.0
    assert calibration_factor([measured(BASELINE, with_recipe=False)], CPU) == 1.0
    assert calibration_factor([measured(BASELINE, peak_memory_bytes=0)], CPU) == 1.0
    assert predict_peak_bytes(BIG, CPU) == analytic_peak_bytes(BIG, CPU)


@pytest.mark.parametrize(("ratio", "clamped"), [(100.0, 4.0), (0.01, 0.25)])
def test_calibration_factor_is_clamped(ratio: float, clamped: float) -> None:
    peak = round(analytic_peak_bytes(BASELINE, CPU) * ratio)
    assert calibration_factor([measured(BASELINE, peak_memory_bytes=peak)], CPU) == clamped


def test_a_recipe_over_device_memory_minus_reserve_is_rejected_and_one_under_accepted() -> None:
    peak = predict_peak_bytes(BIG, CPU)
    reserve = CPU.memory_bytes - peak + 1
    (reason,) = check_memory(BIG, context(memory_reserve_bytes=reserve))
    assert reason.startswith(f"predicted peak memory {peak / GIB:.2f} GiB for batch_size 64 x "
                             "seq_len 512 exceeds the")
    assert f"{(CPU.memory_bytes - reserve) / GIB:.2f} GiB available on Test Xeon" in reason
    assert "16.00 GiB minus" in reason and "LLM server" in reason
    assert check_memory(BIG, context(memory_reserve_bytes=reserve - 1)) == []


def test_trials_in_flight_share_the_memory_left_after_the_reserve() -> None:
    """Two trials at once can both reach their peak: each gets half of what is left."""
    peak = predict_peak_bytes(BIG, CPU)
    reserve = CPU.memory_bytes - 2 * peak  # room for exactly two peaks
    assert check_memory(BIG, context(memory_reserve_bytes=reserve, parallel_on_one_device=2)) == []
    (reason,) = check_memory(BIG, context(memory_reserve_bytes=reserve + 2,
                                          parallel_on_one_device=2))
    assert "shared by 2 trials in flight" in reason
    assert "run fewer trials at once (--parallel)" in reason
    assert check_memory(BIG, context(memory_reserve_bytes=reserve + 2)) == []


def test_calibration_can_push_a_recipe_over_the_limit() -> None:
    peak = predict_peak_bytes(BIG, CPU)
    ctx = context(memory_reserve_bytes=CPU.memory_bytes - round(1.5 * peak))
    assert check_memory(BIG, ctx) == []
    hungry = measured(BASELINE, peak_memory_bytes=2 * analytic_peak_bytes(BASELINE, CPU))
    assert check_memory(BIG, context(memory_reserve_bytes=ctx.memory_reserve_bytes,
                                     measurements=(hungry,)))
