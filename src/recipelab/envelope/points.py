"""What a sweep is made of: its axes, its points, the fitted lines and the whole report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from recipelab.recipe import Precision, StrictModel
from recipelab.trainer.telemetry import TelemetrySummary

PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "fp8")

PointStatus = Literal["complete", "oom", "failed", "skipped"]


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
