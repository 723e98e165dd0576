"""The throughput envelope: sweep batch x sequence x precision for one proxy on this machine.

Before a night of search a user wants to know where throughput peaks, where it plateaus and
what each token of a step costs in memory. Each point of the sweep is a short trial in its
own subprocess (through the same :class:`~recipelab.agent.executor.LocalExecutor` and
trainer entry point as a campaign), with its first ``warmup`` steps left out of the timing.
An OOM, including one forced by an address-space cap, is a recorded point and the sweep goes
on; a precision the hardware lacks is skipped with the guardrails' reason.

From the completed points the sweep fits peak memory = a x tokens + b per precision (see
:mod:`recipelab.guardrails.memory_fit`) and saves it, so the memory guardrail can predict
an OOM without trying it. A device sampler runs throughout.

The *plateau* of a precision is the smallest tokens-per-step after which throughput never
grows by 5% or more; when only the largest point qualifies, throughput was still growing
and no plateau is reported.
"""

from __future__ import annotations

import csv
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rich.table import Table

from recipelab.agent.executor import Executor
from recipelab.guardrails import DeviceInfo, GuardContext, check_hardware
from recipelab.guardrails.memory_fit import (
    KIB,
    MIB,
    MemoryModelError,
    fit_line,
    held_out_errors,
    recipe_family,
    record_peaks,
)
from recipelab.recipe import Precision, Recipe, StrictModel, Target
from recipelab.trainer.spec import CorpusSpec, TrialResult, TrialSpec
from recipelab.trainer.telemetry import DEFAULT_INTERVAL_S, DeviceSampler, TelemetrySummary

PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "fp8")
DEFAULT_BATCH_SIZES = (2, 4, 8, 16)
PLATEAU_GROWTH = 0.05
POINT_EVAL_BYTES = 4096
"""A point's closing evaluation only has to complete: a sweep measures speed and memory."""
POINTS_DIR = "points"
TABLE_CSV, TABLE_JSON, PLOT_PNG = "envelope.csv", "envelope.json", "envelope.png"
TELEMETRY_CSV, TELEMETRY_JSON = "telemetry.csv", "telemetry.json"

PointStatus = Literal["complete", "oom", "failed", "skipped"]
TrialDevice = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True)
class SweepAxes:
    batch_sizes: tuple[int, ...]
    seq_lens: tuple[int, ...]
    precisions: tuple[Precision, ...]
    steps: int = 20
    warmup: int = 5

    def __post_init__(self) -> None:
        if not (self.batch_sizes and self.seq_lens and self.precisions):
            raise ValueError("the sweep needs at least one batch size, sequence length and precision")
        if self.steps <= self.warmup:
            raise ValueError(f"steps ({self.steps}) must exceed warmup ({self.warmup}) so that "
                             "at least one step is timed")


def default_seq_lens(base: Recipe) -> tuple[int, int]:
    """The preset's sequence length and twice it (the published sweep: 1024 and 2048)."""
    return base.seq_len, 2 * base.seq_len


def hardware_reasons(precision: Precision, base: Recipe, target: Target,
                     device: DeviceInfo) -> list[str]:
    """Why this device cannot run ``precision`` (the guardrails' hardware check)."""
    ctx = GuardContext(target=target, baseline=base, device=device, param_budget=0)
    return check_hardware(base.apply({"precision": precision}), ctx)


def supported_precisions(base: Recipe, target: Target, device: DeviceInfo) -> tuple[Precision, ...]:
    return tuple(p for p in PRECISIONS if not hardware_reasons(p, base, target, device))


class EnvelopePoint(StrictModel):
    precision: Precision
    batch_size: int
    seq_len: int
    tokens_per_step: int
    status: PointStatus
    message: str | None = None
    tokens_per_s: float | None = None
    step_ms: float | None = None
    peak_memory_bytes: int | None = None
    timed_steps: int | None = None
    gain: float | None = None  # tokens/s over the first precision's at the same batch and seq


class PrecisionFit(StrictModel):
    """The memory line of one precision's completed points, and how well it predicts each
    point when that point is left out of the fit."""

    precision: Precision
    family: str
    a_bytes_per_token: float
    b_bytes: float
    points: int
    held_out_max_error: float | None
    held_out_mean_error: float | None
    saved_to: str | None = None


class EnvelopeReport(StrictModel):
    device: dict[str, Any]
    recipe: dict[str, Any]
    params: int
    steps: int
    warmup: int
    memory_limit_bytes: int | None
    points: list[EnvelopePoint]
    plateaus: dict[str, int | None]  # precision -> tokens per step where throughput plateaus
    fits: list[PrecisionFit]
    telemetry: TelemetrySummary | None = None


def point_id(precision: str, batch_size: int, seq_len: int) -> str:
    return f"{precision}-b{batch_size}-s{seq_len}"


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


def with_gains(points: Sequence[EnvelopePoint], precisions: Sequence[str]) -> list[EnvelopePoint]:
    """Each point with its throughput relative to the first precision's at the same geometry."""
    first = {(p.batch_size, p.seq_len): p.tokens_per_s for p in points
             if p.precision == precisions[0] and p.tokens_per_s}
    gained = []
    for point in points:
        reference = first.get((point.batch_size, point.seq_len))
        gain = point.tokens_per_s / reference if point.tokens_per_s and reference else None
        gained.append(point.model_copy(update={"gain": gain}))
    return gained


def plateau_tokens(points: Sequence[EnvelopePoint]) -> int | None:
    """Where one precision's throughput plateaus (see the module docstring), or None."""
    best: dict[int, float] = {}
    for point in points:
        if point.status == "complete" and point.tokens_per_s:
            best[point.tokens_per_step] = max(best.get(point.tokens_per_step, 0.0),
                                              point.tokens_per_s)
    tokens = sorted(best)
    for index, size in enumerate(tokens):
        later = [best[t] for t in tokens[index + 1:]]
        if later and max(later) < (1 + PLATEAU_GROWTH) * best[size]:
            return size
    return None


def fit_memory(base: Recipe, points: Sequence[EnvelopePoint], device: DeviceInfo, *,
               save: bool) -> list[PrecisionFit]:
    """Fit each precision's memory line; with ``save``, add the peaks to the memory model."""
    fits = []
    for precision in dict.fromkeys(p.precision for p in points):
        measured = [(p.tokens_per_step, p.peak_memory_bytes) for p in points
                    if p.precision == precision and p.status == "complete" and p.peak_memory_bytes]
        line = fit_line(measured)
        if line is None:
            continue
        recipe = base.apply({"precision": precision})
        errors = held_out_errors(measured)
        saved = None
        if save:
            try:
                record_peaks(recipe, device, measured)
                saved = "memory model"
            except (MemoryModelError, OSError) as error:
                saved = f"not saved: {error}"
        fits.append(PrecisionFit(
            precision=precision, family=recipe_family(recipe),
            a_bytes_per_token=line.a_bytes_per_token, b_bytes=line.b_bytes, points=line.points,
            held_out_max_error=max(errors) if errors else None,
            held_out_mean_error=statistics.mean(errors) if errors else None, saved_to=saved))
    return fits


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


# --- output -----------------------------------------------------------------------------------


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48] or "device"


def default_out_dir(device: DeviceInfo, preset: str) -> Path:
    return Path("envelope") / f"{slug(f'{device.kind}-{device.name}')}-{preset}"


def _fmt(value: float | None, pattern: str) -> str:
    return "" if value is None else format(value, pattern)


def table_rows(report: EnvelopeReport) -> list[dict[str, str]]:
    rows = []
    for p in report.points:
        rows.append({
            "precision": p.precision, "batch": str(p.batch_size), "seq_len": str(p.seq_len),
            "tokens/step": str(p.tokens_per_step), "status": p.status,
            "tokens/s": _fmt(p.tokens_per_s, ",.0f"), "step ms": _fmt(p.step_ms, ".1f"),
            "peak MiB": _fmt(None if p.peak_memory_bytes is None else p.peak_memory_bytes / MIB,
                             ",.0f"),
            "gain": "" if p.gain is None else f"{p.gain:.2f}x",
            "note": p.message or ("plateau" if report.plateaus.get(p.precision) == p.tokens_per_step
                                  else ""),
        })
    return rows


NOTE_WIDTH = 48


def render_table(report: EnvelopeReport) -> Table:
    """The table for a terminal: long notes (skip and OOM reasons) cut short; the CSV and JSON
    keep them whole."""
    table = Table(title=f"throughput envelope: {report.params:,}-parameter proxy on "
                  f"{report.device['name']} ({report.steps} steps, {report.warmup} untimed)")
    rows = table_rows(report)
    for column in rows[0] if rows else ():
        table.add_column(column, justify="left" if column in ("precision", "status", "note")
                         else "right", no_wrap=column != "note")
    for row in rows:
        note = row["note"]
        row["note"] = note if len(note) <= NOTE_WIDTH else note[: NOTE_WIDTH - 1] + "…"
        table.add_row(*row.values())
    return table


def describe_fits(report: EnvelopeReport) -> list[str]:
    lines = []
    for fit in report.fits:
        error = ("" if fit.held_out_max_error is None else
                 f"; held-out error max {100 * fit.held_out_max_error:.1f}%, mean "
                 f"{100 * (fit.held_out_mean_error or 0):.1f}%")
        lines.append(f"{fit.precision}: peak memory = {fit.a_bytes_per_token / KIB:.2f} KiB per "
                     f"token x tokens per step + {fit.b_bytes / MIB:,.0f} MiB over {fit.points} "
                     f"points{error} ({fit.saved_to or 'not saved'})")
    for precision, tokens in report.plateaus.items():
        if any(p.precision == precision and p.status == "complete" for p in report.points):
            lines.append(f"{precision}: throughput plateaus at {tokens:,} tokens per step"
                         if tokens else f"{precision}: throughput still grows at the largest point")
    return lines


def write_outputs(report: EnvelopeReport, out_dir: Path) -> list[Path]:
    """The table as CSV and JSON (with fits, plateaus and telemetry) and the plot."""
    from recipelab.agent.envelope_plot import plot_envelope  # matplotlib only when writing

    out_dir.mkdir(parents=True, exist_ok=True)
    table_csv = out_dir / TABLE_CSV
    with table_csv.open("w", newline="") as handle:  # raw numbers, for other tools
        writer = csv.DictWriter(handle, fieldnames=[*EnvelopePoint.model_fields, "plateau"])
        writer.writeheader()
        for point in report.points:
            writer.writerow({**point.model_dump(), "plateau": report.plateaus.get(
                point.precision) == point.tokens_per_step})
    table_json = out_dir / TABLE_JSON
    table_json.write_text(report.model_dump_json(indent=2))
    telemetry_json = out_dir / TELEMETRY_JSON
    telemetry_json.write_text(report.telemetry.model_dump_json(indent=2) if report.telemetry
                              else "null")
    plot = out_dir / PLOT_PNG
    plot_envelope(report, plot)
    return [table_csv, table_json, plot, out_dir / TELEMETRY_CSV, telemetry_json]


# --- command-line values ------------------------------------------------------------------------

SIZE_UNITS = {"": 1, "b": 1, "k": KIB, "kib": KIB, "m": MIB, "mib": MIB, "g": 1024**3,
              "gib": 1024**3}


def parse_ints(text: str, option: str) -> tuple[int, ...]:
    """``"2,4,8"`` as ``(2, 4, 8)``; anything else is an error naming ``option``."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{option} takes comma-separated whole numbers such as 2,4,8; "
                         f"got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{option} needs positive whole numbers such as 2,4,8; got {text!r}")
    return values


def parse_precisions(text: str) -> tuple[Precision, ...]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in PRECISIONS]
    if unknown or not names:
        raise ValueError(f"--precision takes a comma-separated list of {', '.join(PRECISIONS)}; "
                         f"got {text!r}")
    chosen: list[Precision] = [p for name in dict.fromkeys(names) for p in PRECISIONS if p == name]
    return tuple(chosen)  # in the user's order: gains are relative to the first


def parse_bytes(text: str) -> int:
    """``"6GiB"``, ``"512MiB"`` or a plain number of bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in SIZE_UNITS:
        raise ValueError(f"--memory-limit takes a size such as 6GiB, 512MiB or a number of "
                         f"bytes; got {text!r}")
    return int(float(match.group(1)) * SIZE_UNITS[unit])
