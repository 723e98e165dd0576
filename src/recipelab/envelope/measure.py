"""The sweep itself: one short trial per point of batch x sequence x precision.

Each point runs in its own subprocess, through the same executor and trainer entry point as
a campaign, with its first ``warmup`` steps left out of the timing. An OOM, including one
forced by an address-space cap, is a recorded point and the sweep goes on; a precision the
hardware lacks is skipped with the guardrails' reason. A device sampler runs throughout.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from recipelab.envelope.findings import fit_memory, plateau_tokens, with_gains
from recipelab.envelope.points import (
    EnvelopePoint,
    EnvelopeReport,
    PointStatus,
    SweepAxes,
    point_id,
)
from recipelab.guardrails import DeviceInfo, GuardContext, check_hardware
from recipelab.recipe import Precision, Recipe
from recipelab.runner import Executor
from recipelab.targets import Target
from recipelab.trainer.spec import CorpusSpec, TrialResult, TrialSpec
from recipelab.trainer.telemetry import DEFAULT_INTERVAL_S, DeviceSampler

DEFAULT_BATCH_SIZES = (2, 4, 8, 16)
POINT_EVAL_BYTES = 4096
"""A point's closing evaluation only has to complete: a sweep measures speed and memory."""
POINTS_DIR = "points"
TELEMETRY_CSV = "telemetry.csv"

TrialDevice = Literal["auto", "cpu", "cuda"]


def default_seq_lens(base: Recipe) -> tuple[int, int]:
    """The preset's sequence length and twice it (the published sweep: 1024 and 2048)."""
    return base.seq_len, 2 * base.seq_len


def hardware_reasons(precision: Precision, base: Recipe, target: Target,
                     device: DeviceInfo) -> list[str]:
    """Why this device cannot run ``precision`` (the guardrails' hardware check)."""
    ctx = GuardContext(target=target, baseline=base, device=device, param_budget=0)
    return check_hardware(base.apply({"precision": precision}), ctx)


def as_point(recipe: Recipe, result: TrialResult) -> EnvelopePoint:
    common = {"precision": recipe.precision, "batch_size": recipe.batch_size,
              "seq_len": recipe.seq_len, "tokens_per_step": recipe.tokens_per_step}
    if result.status == "complete":
        return EnvelopePoint(**common, status="complete", tokens_per_s=result.tokens_per_s,
                             step_ms=result.step_ms, peak_memory_bytes=result.peak_memory_bytes,
                             timed_steps=result.timed_steps)
    status: PointStatus = "oom" if result.reason == "oom" else "failed"
    return EnvelopePoint(**common, status=status, message=f"{result.reason}: {result.message}")


def run_points(base: Recipe, axes: SweepAxes, target: Target, device: DeviceInfo,
               executor: Executor, out_dir: Path, corpus: CorpusSpec, *,
               trial_device: TrialDevice = "auto", timeout_s: float | None = None,
               telemetry_interval_s: float = DEFAULT_INTERVAL_S,
               on_point: Callable[[EnvelopePoint], None] | None = None) -> list[EnvelopePoint]:
    """Train every point of the sweep, one subprocess each, in order; never raises for one."""
    points: list[EnvelopePoint] = []
    for precision in axes.precisions:
        skip = hardware_reasons(precision, base, target, device)
        for seq_len in axes.seq_lens:
            for batch_size in axes.batch_sizes:
                recipe = base.apply({"batch_size": batch_size, "seq_len": seq_len,
                                     "precision": precision, "steps": axes.steps,
                                     "grad_accum": 1,
                                     "eval_bytes": min(base.eval_bytes, POINT_EVAL_BYTES)})
                if skip:
                    point = EnvelopePoint(precision=precision, batch_size=batch_size,
                                          seq_len=seq_len, tokens_per_step=recipe.tokens_per_step,
                                          status="skipped", message=" ".join(skip))
                else:
                    name = point_id(precision, batch_size, seq_len)
                    spec = TrialSpec(trial_id=name, recipe=recipe, corpus=corpus,
                                     out_dir=str(out_dir / POINTS_DIR / name), device=trial_device,
                                     log_every=axes.steps, timed_warmup_steps=axes.warmup,
                                     telemetry_interval_s=telemetry_interval_s)
                    point = as_point(recipe, executor.wait(executor.submit(spec, timeout_s=timeout_s)))
                points.append(point)
                if on_point is not None:
                    on_point(point)
    return with_gains(points, axes.precisions)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def point_logger(log: Any) -> Callable[[EnvelopePoint], None]:
    """An ``on_point`` callback that logs each finished point as an ``envelope_point`` event."""

    def record(point: EnvelopePoint) -> None:
        log.info("envelope_point", trial_id=point_id(point.precision, point.batch_size, point.seq_len),
                 status=point.status, tokens_per_s=_rounded(point.tokens_per_s),
                 step_ms=_rounded(point.step_ms),
                 peak_memory_bytes=point.peak_memory_bytes, message=point.message)

    return record


def sweep(base: Recipe, axes: SweepAxes, target: Target, device: DeviceInfo, executor: Executor,
          out_dir: Path, corpus: CorpusSpec, *, trial_device: TrialDevice = "auto",
          timeout_s: float | None = None, memory_limit_bytes: int | None = None,
          telemetry_interval_s: float = DEFAULT_INTERVAL_S, save_fit: bool = True,
          on_point: Callable[[EnvelopePoint], None] | None = None) -> EnvelopeReport:
    """Run the whole sweep under the device sampler and analyse it (nothing written but the
    points' trial folders, the telemetry CSV and, with ``save_fit``, the memory model)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sampler = DeviceSampler(telemetry_interval_s, out_dir / TELEMETRY_CSV,
                            gpu=device.kind == "cuda" and trial_device != "cpu")
    with sampler:
        points = run_points(base, axes, target, device, executor, out_dir, corpus,
                            trial_device=trial_device, timeout_s=timeout_s,
                            telemetry_interval_s=telemetry_interval_s, on_point=on_point)
    return EnvelopeReport(
        device={"kind": device.kind, "name": device.name, "memory_bytes": device.memory_bytes},
        recipe=base.model_dump(mode="json"), params=base.param_count(), steps=axes.steps,
        warmup=axes.warmup, memory_limit_bytes=memory_limit_bytes, points=points,
        plateaus={p: plateau_tokens([q for q in points if q.precision == p])
                  for p in axes.precisions},
        fits=fit_memory(base, points, device, save=save_fit), telemetry=sampler.summary())
