"""What a report needs beyond the records: the campaign, its target and the cloud rates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import Field

from recipelab import environment
from recipelab.recipe import StrictModel
from recipelab.targets import Target
from recipelab.trajectory.horizon import HorizonFit

H100_BF16_DENSE_FLOPS = 989e12  # H100 SXM, dense BF16 tensor-core peak

# The environment variables `recipelab report` and the report a campaign writes both read.
RATE_ENVVARS = {
    "gpu_peak_flops": "RECIPELAB_GPU_PEAK_TFLOPS",
    "mfu": "RECIPELAB_MFU",
    "usd_per_gpu_hour": "RECIPELAB_COST_H100_USD_PER_HOUR",
    "gpus": "RECIPELAB_COST_GPUS_PER_NODE",
}


class CloudRates(StrictModel):
    """What the cloud run is priced at (defaults: an 8xH100 node at $2.50 per GPU-hour)."""

    gpu_peak_flops: float = Field(default=H100_BF16_DENSE_FLOPS, gt=0)
    mfu: float = Field(default=0.4, gt=0, le=1)
    usd_per_gpu_hour: float = Field(default=2.50, ge=0)
    gpus: int = Field(default=8, ge=1)
    tokens_per_param: float = Field(default=20.0, gt=0)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> CloudRates:
        """Defaults overridden by the ``RATE_ENVVARS`` that are set (peak given in TFLOP/s)."""
        given: dict[str, float] = {}
        for name, var in RATE_ENVVARS.items():
            if (text := environment.read(var, environ)) is not None:
                try:
                    value = float(text)
                except ValueError:
                    raise ValueError(f"{var}={text!r} is not a number") from None
                given[name] = value * 1e12 if name == "gpu_peak_flops" else value
        return cls.model_validate(given)  # a fractional GPU count is refused, not truncated


@dataclass(frozen=True)
class RunningCurve:
    """The training loss a trial in flight has logged so far."""

    trial_id: str
    steps: tuple[int, ...]
    losses: tuple[float, ...]


@dataclass(frozen=True)
class LiveStatus:
    """What a report written while the campaign runs says first: when it was written, what
    is training and its loss so far, when the night ends, and the console's last lines."""

    updated: str  # e.g. "02:13:05 UTC"
    running: str  # the trials in flight, or "" between trials
    ends: str  # the deadline, or how many proxy trials are left
    last_lines: tuple[str, ...] = ()
    curves: tuple[RunningCurve, ...] = ()


@dataclass(frozen=True)
class ReportContext:
    """``horizon_fits`` are the calibration campaigns' horizon-rule fits, which the ladder's
    section states the rule with. ``live`` is set while the campaign runs: the page then says
    so and reloads itself."""

    campaign: str
    target: Target
    preset: str
    rates: CloudRates = field(default_factory=CloudRates)
    horizon_fits: tuple[HorizonFit, ...] = ()
    live: LiveStatus | None = None
    corpus: str | None = None  # what the campaign trained on, beside what the bench verified
