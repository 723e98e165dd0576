"""The budget guard of a long run: what it has cost, what it will cost, and when to stop.

Two ways to know the spend. The reference lab's contract is a *sidecar*: a process outside
the trainer (it knows the provider's bill) keeps ``{spent_usd, rate_usd_per_hr,
hours_elapsed, projected_total_usd, last_update_utc}`` in a JSON file that the trainer reads
on a period (``--budget-curr-cost-uri``). Without one the trainer *estimates*: wall time ×
``--price-per-hour``, from the moment the job starts (setup and evaluation are billed too),
summed over every invocation of the run. A cap with neither is refused before anything runs:
a guard that cannot see the spend would never fire.

Three limits, one decision (:func:`budget_action`), used by the run and by
``--dry-run-budget`` alike: spending past the alert level is an event; a projection over the
cap stops the run gracefully (after a checkpoint, so it can resume with a larger cap);
spending over the cap stops it at once, with no checkpoint.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

from recipelab.errors import RecipelabError
from recipelab.fsutil import atomic_write_text

__all__ = [
    "BUDGET_FILE",
    "BudgetAction",
    "BudgetGuard",
    "BudgetStatus",
    "BudgetUnknowable",
    "SidecarSpend",
    "budget_action",
    "cost_file",
    "read_elapsed",
    "write_budget",
]

BUDGET_FILE = "budget.json"
SECONDS_PER_HOUR = 3600.0
SIDECAR_FIELDS = ("spent_usd", "rate_usd_per_hr", "hours_elapsed", "projected_total_usd",
                  "last_update_utc")

BudgetAction = Literal["continue", "stop_after_checkpoint", "stop_at_once"]
SpendSource = Literal["sidecar", "estimate", "none"]


class BudgetOptionError(RecipelabError, ValueError):
    """A budget option that cannot be honoured; the message names the option to fix."""


class BudgetUnknowable(BudgetOptionError):
    """A cap or an alert level with no way to know the spend."""


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
    source: SpendSource = "estimate"
    stale_s: float | None = None  # how old the sidecar's figures are, when too old
    problem: str | None = None  # why the sidecar's file could not be read, when it could not


def budget_action(status: BudgetStatus) -> BudgetAction:
    """What the spend asks of the run now: spending over the cap stops it at once; a
    projection over the cap stops it after a checkpoint."""
    cap = status.cap_usd
    if cap is None:
        return "continue"
    if status.spent_usd > cap:
        return "stop_at_once"
    if status.projected_total_usd is not None and status.projected_total_usd > cap:
        return "stop_after_checkpoint"
    return "continue"


def cost_file(uri: str) -> Path:
    """The local file a ``--budget-curr-cost-uri`` names: a path or a ``file://`` URI."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path) if parsed.scheme else uri)
    raise BudgetOptionError(
        f"--budget-curr-cost-uri {uri!r}: only a local file (a path or file:///path) can be "
        "read on every step's period; have the sidecar write to a local path or a mounted one")


@dataclass(frozen=True)
class _Reading:
    spent_usd: float
    rate_usd_per_hr: float
    hours_elapsed: float
    projected_total_usd: float | None
    last_update: datetime


class SidecarSpend:
    """The sidecar's spend file, re-read at most every ``period_s`` seconds.

    A file that is missing, half-written or malformed keeps the last good reading and says
    why in ``problem``: a billed run is never stopped by a sidecar's hiccup, only warned.
    """

    def __init__(self, path: Path, period_s: float = 30.0, stale_after_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic,
                 utc_now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.path, self.period_s, self.stale_after_s = path, period_s, stale_after_s
        self.clock, self.utc_now = clock, utc_now
        self.reading: _Reading | None = None
        self.problem: str | None = None
        self._read_at: float | None = None

    def read(self) -> _Reading | None:
        now = self.clock()
        if self._read_at is None or now - self._read_at >= self.period_s:
            self._read_at = now
            try:
                self.reading, self.problem = self._parse(self.path.read_text()), None
            except (OSError, ValueError, TypeError, KeyError) as error:
                self.problem = f"{self.path}: {error}"
        return self.reading

    @staticmethod
    def _parse(text: str) -> _Reading:
        data = json.loads(text)
        missing = [name for name in SIDECAR_FIELDS if name not in data]
        if missing:
            raise KeyError(f"missing {', '.join(missing)}")
        projected = data["projected_total_usd"]
        updated = datetime.fromisoformat(str(data["last_update_utc"]).replace("Z", "+00:00"))
        if updated.tzinfo is None:
            updated = updated.replace(tzinfo=timezone.utc)
        return _Reading(float(data["spent_usd"]), float(data["rate_usd_per_hr"]),
                        float(data["hours_elapsed"]),
                        None if projected is None else float(projected), updated)

    def age_s(self) -> float | None:
        """Seconds since the sidecar's last update, when that is older than ``stale_after_s``."""
        if self.reading is None:
            return None
        age = (self.utc_now() - self.reading.last_update).total_seconds()
        return age if age > self.stale_after_s else None


class BudgetGuard:
    """The spending of one run (across every invocation) against a cap and an alert level."""

    def __init__(self, price_per_hour: float | None, cap_usd: float | None,
                 alert_at_usd: float | None, total_steps: int, elapsed_before_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic,
                 sidecar: SidecarSpend | None = None) -> None:
        if price_per_hour is not None and price_per_hour < 0:
            raise BudgetOptionError(f"--price-per-hour must be >= 0, got {price_per_hour}")
        if cap_usd is not None and cap_usd <= 0:
            raise BudgetOptionError(f"--budget-cap-usd must be > 0, got {cap_usd}")
        if (cap_usd is not None or alert_at_usd is not None) and price_per_hour is None \
                and sidecar is None:
            raise BudgetUnknowable(
                "a budget cap or alert needs a way to know the spend: give "
                "--budget-curr-cost-uri FILE (a sidecar's spend file) or --price-per-hour "
                "(the trainer's own estimate)")
        self.price, self.cap, self.alert_at = price_per_hour, cap_usd, alert_at_usd
        self.total_steps = total_steps
        self.before = elapsed_before_s
        self.clock = clock
        self.sidecar = sidecar
        self.started = clock()
        self.timed_from: tuple[int, float] | None = None
        self.paused_s = 0.0
        # a resumed run that had already reached the alert level has already said so
        self.alerted = (alert_at_usd is not None and price_per_hour is not None
                        and price_per_hour * elapsed_before_s / SECONDS_PER_HOUR >= alert_at_usd)

    def start_timing(self, step: int) -> None:
        """Steps from here on set the step time (the first steps pay for warm-up)."""
        self.timed_from = (step, self.clock())

    def status(self, step: int) -> BudgetStatus:
        now = self.clock()
        elapsed = self.before + now - self.started
        per_step = None
        if self.timed_from is not None and step > self.timed_from[0]:
            per_step = (now - self.timed_from[1]) / (step - self.timed_from[0])
        remaining_h = (max(0, self.total_steps - step) * per_step / SECONDS_PER_HOUR
                       if per_step is not None else None)
        reading = self.sidecar.read() if self.sidecar is not None else None
        if reading is not None:
            assert self.sidecar is not None
            projected = reading.projected_total_usd
            if projected is None and remaining_h is not None:
                projected = reading.spent_usd + reading.rate_usd_per_hr * remaining_h
            return self._status(step, reading.hours_elapsed * SECONDS_PER_HOUR,
                                reading.spent_usd, projected, reading.rate_usd_per_hr, per_step,
                                "sidecar", self.sidecar.age_s(), self.sidecar.problem)
        problem = self.sidecar.problem if self.sidecar is not None else None
        if self.price is None:
            return self._status(step, elapsed, 0.0, None, 0.0, per_step, "none", None, problem)
        spent = self.price * elapsed / SECONDS_PER_HOUR
        projected = spent + self.price * remaining_h if remaining_h is not None else None
        return self._status(step, elapsed, spent, projected, self.price, per_step, "estimate",
                            None, problem)

    def _status(self, step: int, elapsed: float, spent: float, projected: float | None,
                rate: float, per_step: float | None, source: SpendSource,
                stale_s: float | None, problem: str | None) -> BudgetStatus:
        return BudgetStatus(step=step, total_steps=self.total_steps, elapsed_s=elapsed,
                            spent_usd=spent, projected_total_usd=projected,
                            rate_usd_per_hour=rate, cap_usd=self.cap, alert_at_usd=self.alert_at,
                            seconds_per_step=per_step, source=source, stale_s=stale_s,
                            problem=problem)

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
    """The wall time earlier invocations of this run already spent (0 for a new run)."""
    path = out_dir / BUDGET_FILE
    if not path.exists():
        return 0.0
    try:
        elapsed = float(json.loads(path.read_text()).get("elapsed_s", 0.0))
    except (OSError, ValueError, AttributeError):
        return 0.0
    return elapsed if math.isfinite(elapsed) else 0.0
