"""The budget guard of a long run: what it has cost, what it will cost, and when to stop.

The money of a cloud run is wall time × the price of the nodes, from the moment the job
starts (setup and evaluation are billed too), summed over every resume. The projection adds
the steps still to go at the step time measured since the first timed step. Two limits:
a projection over the cap stops the run gracefully (after a checkpoint, so it can resume
with a larger cap); spending over the cap stops it at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from recipelab.fsutil import atomic_write_text

BUDGET_FILE = "budget.json"
SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class BudgetStatus:
    step: int
    total_steps: int
    elapsed_s: float
    spent_usd: float
    projected_total_usd: float | None  # None until a step has been timed
    rate_usd_per_hour: float
    cap_usd: float | None
    alert_at_usd: float | None
    seconds_per_step: float | None


class BudgetGuard:
    """Wall-clock spending of one run (across resumes) against a cap and an alert level."""

    def __init__(self, price_per_hour: float, cap_usd: float | None, alert_at_usd: float | None,
                 total_steps: int, elapsed_before_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if price_per_hour < 0:
            raise ValueError(f"--price-per-hour must be >= 0, got {price_per_hour}")
        if cap_usd is not None and cap_usd <= 0:
            raise ValueError(f"--budget-cap-usd must be > 0, got {cap_usd}")
        self.price, self.cap, self.alert_at = price_per_hour, cap_usd, alert_at_usd
        self.total_steps = total_steps
        self.before = elapsed_before_s
        self.clock = clock
        self.started = clock()
        self.timed_from: tuple[int, float] | None = None
        # a resumed run that had already reached the alert level has already said so
        self.alerted = (alert_at_usd is not None
                        and price_per_hour * elapsed_before_s / SECONDS_PER_HOUR >= alert_at_usd)

    def start_timing(self, step: int) -> None:
        """Steps from here on set the step time (the first steps pay for warm-up)."""
        self.timed_from = (step, self.clock())

    def status(self, step: int) -> BudgetStatus:
        now = self.clock()
        elapsed = self.before + now - self.started
        spent = self.price * elapsed / SECONDS_PER_HOUR
        per_step = projected = None
        if self.timed_from is not None and step > self.timed_from[0]:
            per_step = (now - self.timed_from[1]) / (step - self.timed_from[0])
            remaining = max(0, self.total_steps - step) * per_step
            projected = spent + self.price * remaining / SECONDS_PER_HOUR
        return BudgetStatus(step=step, total_steps=self.total_steps, elapsed_s=elapsed,
                            spent_usd=spent, projected_total_usd=projected,
                            rate_usd_per_hour=self.price, cap_usd=self.cap,
                            alert_at_usd=self.alert_at, seconds_per_step=per_step)

    def spent_over_cap(self, status: BudgetStatus) -> bool:
        return self.cap is not None and status.spent_usd > self.cap

    def projected_over_cap(self, status: BudgetStatus) -> bool:
        return (self.cap is not None and status.projected_total_usd is not None
                and status.projected_total_usd > self.cap)

    def alert_due(self, status: BudgetStatus) -> bool:
        """True once, the first time spending reaches the alert level."""
        if self.alert_at is None or self.alerted or status.spent_usd < self.alert_at:
            return False
        self.alerted = True
        return True


def write_budget(out_dir: Path, status: BudgetStatus, stop_reason: str | None = None) -> None:
    atomic_write_text(out_dir / BUDGET_FILE,
                      json.dumps({**asdict(status), "stop_reason": stop_reason}, indent=2) + "\n")


def read_elapsed(out_dir: Path) -> float:
    """The wall time a previous invocation of this run already spent (0 for a new run)."""
    path = out_dir / BUDGET_FILE
    if not path.exists():
        return 0.0
    return float(json.loads(path.read_text()).get("elapsed_s", 0.0))
