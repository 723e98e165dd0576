"""The memory model: predict a trial's peak memory before it runs, reject what cannot fit.

An out-of-memory trial costs its setup time and, on a DGX Spark whose unified memory the
LLM server shares, can take the server down with it. The model is analytic and deliberately
simple, then calibrated against peaks measured on this device.

Analytic peak, in bytes (P parameters, micro-batch tokens N = batch_size * seq_len, since
gradient accumulation frees activations between micro-batches)::

    overhead                            CPU: 400 MiB (Python + torch); CUDA: 500 MiB context
  + 16 * P                              fp32 weights, grads, AdamW exp_avg and exp_avg_sq
  + 2 * P            (bf16/fp8 only)    autocast's cached low-precision weight copies
  + N * (n_layer * A + 2 * d) * b       activations saved for backward; b = 4 (fp32) or 2
  + N * vocab_size * 4 * 3              fp32 logits, their softmax and their gradient

where A, the elements one block saves per token (d = d_model, a = n_head * head_dim,
k = n_kv_head * head_dim, h = ffn_hidden, H = n_head, T = seq_len), is::

    A = 4d                              block input and norm output, attention and FFN
      + 4a + 3k                         q/k/v, rotated q and k, attention output, its reshape
      + 4h | 2h | 3h                    FFN: swiglu (gate+up, silu, product) | gelu and
                                        gelu_exact (up, activation) | relu2
                                        (gelu 3h in fp32 on the CPU, whose written-out
                                        backward keeps the sigmoid)
      + 2 * H * T   (unfused only)      attention scores and probabilities

The (B, H, T, T) scores exist only when SDPA falls back to its math path: PyTorch's CPU
flash kernel takes any head_dim, CUDA's flash and memory-efficient kernels need head_dim a
multiple of 8.

Once this device has measured peaks for the recipe's family (``recipelab envelope``, or the
trials of earlier campaigns), the fitted line of :mod:`recipelab.guardrails.memory_fit`
replaces this formula; a rejection says which of the two predicted it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from recipelab.guardrails.base import DeviceInfo, GuardContext, Measurement, gib
from recipelab.guardrails.memory_fit import fitted_line, micro_batch_tokens
from recipelab.recipe import Recipe, Shape
from recipelab.units import MIB

PROCESS_OVERHEAD_BYTES = {"cpu": 400 * MIB, "cuda": 500 * MIB}
STATE_BYTES_PER_PARAM = 16
CAST_BYTES_PER_PARAM = 2
ACTIVATION_BYTES = {"fp32": 4, "bf16": 2, "fp8": 2}
LOGIT_BYTES = 4
LOGIT_COPIES = 3
FFN_SAVED_PER_HIDDEN = {"swiglu": 4, "gelu": 2, "gelu_exact": 2, "relu2": 3}
CPU_FP32_GELU_EXTRA = 1  # the sigmoid kept by the trainer's fp32 CPU GELU
CUDA_FUSED_HEAD_DIM_MULTIPLE = 8
CALIBRATION_MIN, CALIBRATION_MAX = 0.25, 4.0
"""A calibration factor outside these bounds says the measurements are wrong, not the model."""


def activation_elements_per_token(shape: Shape, seq_len: int, fused_attention: bool,
                                  cpu_fp32: bool = False) -> int:
    """Elements one transformer block saves for backward per token (``A`` above)."""
    ffn = FFN_SAVED_PER_HIDDEN[shape.activation]
    if cpu_fp32 and shape.activation == "gelu":
        ffn += CPU_FP32_GELU_EXTRA
    saved = (4 * shape.d_model + 4 * shape.attn_width + 3 * shape.kv_width
             + ffn * shape.ffn_hidden)
    if not fused_attention:
        saved += 2 * shape.n_head * seq_len
    return saved


@dataclass(frozen=True)
class PeakBreakdown:
    """The analytic peak's terms, so a message can say which one does not fit."""

    overhead: int
    states: int
    activations: int
    logits: int

    @property
    def total(self) -> int:
        return self.overhead + self.states + self.activations + self.logits


def peak_breakdown(recipe: Recipe, device: DeviceInfo) -> PeakBreakdown:
    """The terms of the uncalibrated peak-memory prediction (the module docstring's formula)."""
    shape = recipe.shape
    params = recipe.param_count()
    tokens = recipe.batch_size * recipe.seq_len
    fused = device.kind == "cpu" or shape.head_dim % CUDA_FUSED_HEAD_DIM_MULTIPLE == 0
    states = STATE_BYTES_PER_PARAM * params
    if recipe.precision != "fp32":
        states += CAST_BYTES_PER_PARAM * params
    cpu_fp32 = device.kind == "cpu" and recipe.precision == "fp32"
    per_token = shape.n_layer * activation_elements_per_token(shape, recipe.seq_len, fused,
                                                              cpu_fp32)
    activations = tokens * (per_token + 2 * shape.d_model) * ACTIVATION_BYTES[recipe.precision]
    logits = tokens * shape.vocab_size * LOGIT_BYTES * LOGIT_COPIES
    return PeakBreakdown(PROCESS_OVERHEAD_BYTES[device.kind], states, activations, logits)


def analytic_peak_bytes(recipe: Recipe, device: DeviceInfo) -> int:
    """The uncalibrated peak-memory prediction (the formula in the module docstring)."""
    return peak_breakdown(recipe, device).total


def calibration_factor(measurements: Sequence[Measurement], device: DeviceInfo) -> float:
    """Median of measured / predicted peak over past trials on ``device``, clamped.

    Only measurements that carry their recipe and a positive peak can be compared with a
    prediction; without any, the factor is 1 (the analytic model as is).
    """
    ratios = [m.peak_memory_bytes / analytic_peak_bytes(m.recipe, device)
              for m in measurements if m.recipe is not None and m.peak_memory_bytes > 0]
    if not ratios:
        return 1.0
    return min(max(statistics.median(ratios), CALIBRATION_MIN), CALIBRATION_MAX)


def predict_peak_bytes(recipe: Recipe, device: DeviceInfo,
                       measurements: Sequence[Measurement] = ()) -> int:
    """The calibrated peak-memory prediction for one trial of ``recipe`` on ``device``."""
    return round(analytic_peak_bytes(recipe, device) * calibration_factor(measurements, device))


def predict_with_model(recipe: Recipe, ctx: GuardContext) -> tuple[int, str]:
    """The peak-memory prediction and which model made it: the line fitted to this device's
    measured peaks for the recipe's family when ``ctx`` has one, else the analytic model
    calibrated by ``ctx``'s measurements."""
    device = ctx.device
    line = fitted_line(ctx.memory_model, recipe, device) if ctx.memory_model else None
    if line is not None:
        return (line.predict(micro_batch_tokens(recipe)),
                f"the memory line fitted on this device ({line.describe()})")
    factor = calibration_factor(ctx.measurements, device)
    note = (f"; the fitted model is unusable: {ctx.memory_model_problem}"
            if ctx.memory_model_problem else "")
    return (round(analytic_peak_bytes(recipe, device) * factor),
            f"the analytic memory model (calibration factor {factor:.2f}){note}")


def check_memory(recipe: Recipe, ctx: GuardContext) -> list[str]:
    """Reject a candidate predicted to need more memory than the device has left for trials."""
    device = ctx.device
    predicted, model = predict_with_model(recipe, ctx)
    available = trial_memory_bytes(ctx)
    if predicted <= available:
        return []
    room = f"the {gib(available)} available on {device.name}"
    if ctx.memory_reserve_bytes or ctx.parallel_on_one_device > 1:
        room += f" ({gib(device.memory_bytes)}"
        if ctx.memory_reserve_bytes:
            room += f" minus {gib(ctx.memory_reserve_bytes)} kept free for the LLM server"
        if ctx.parallel_on_one_device > 1:
            room += f", shared by {ctx.parallel_on_one_device} trials in flight"
        room += ")"
    fewer = " or run fewer trials at once (--parallel)" if ctx.parallel_on_one_device > 1 else ""
    return [
        f"predicted peak memory {gib(predicted)} for batch_size {recipe.batch_size} x seq_len "
        f"{recipe.seq_len} exceeds {room}; lower batch_size or seq_len (raise grad_accum to "
        f"keep the tokens per step), shrink the model{fewer}. Predicted by {model}."
    ]


def trial_memory_bytes(ctx: GuardContext) -> int:
    """The memory one trial may use: the device's, less the reserve, shared equally by the
    trials in flight (they can all reach their peak at once)."""
    return (ctx.device.memory_bytes - ctx.memory_reserve_bytes) // max(1, ctx.parallel_on_one_device)
