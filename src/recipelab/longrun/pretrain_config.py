"""What one long run is given (:class:`PretrainConfig`), what it ends with
(:class:`PretrainResult`), the files it writes, and the budget projection ``--dry-run-budget``
prints from a few measured steps."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from recipelab.longrun.budget import (
    BudgetGuard,
    BudgetStatus,
    SidecarSpend,
    budget_action,
    cost_file,
)
from recipelab.recipe import Recipe, StrictModel
from recipelab.trainer.spec import CorpusSpec
from recipelab.transfer.micro_batch import ShardingChoice

METRICS_FILE = "metrics.csv"
METRICS_LONG_FILE = "metrics-long.csv"
EVENTS_FILE = "events.jsonl"
MANIFEST_FILE = "manifest.json"
FINAL_FILE = "final.safetensors"
POSTMORTEM_FILE = "spike-postmortem.md"
CHECKPOINT_DIR = "checkpoints"

StopReason = Literal["complete", "preempted", "budget_projection", "diverged", "budget_spent"]
STOP_CODES: tuple[StopReason, ...] = ("complete", "preempted", "budget_projection", "diverged",
                                      "budget_spent")
"""Ordered by severity: when ranks ask for different stops, the most severe one wins."""
CHECKPOINTED_STOPS = frozenset({"preempted", "budget_projection"})
EXIT_CODES: dict[StopReason, int] = {"complete": 0, "budget_projection": 3, "budget_spent": 3,
                                     "diverged": 4, "preempted": 128 + signal.SIGTERM}
EXIT_BUDGET = 3


class PretrainConfig(StrictModel):
    """Everything one long run is given."""

    recipe: Recipe
    out_dir: str
    corpus: CorpusSpec = CorpusSpec()
    device: Literal["auto", "cpu", "cuda"] = "auto"
    campaign: str = "pretrain"
    log_every: int = Field(default=10, ge=1)
    eval_every: int = Field(default=100, ge=1)
    checkpoint_every: int = Field(default=100, ge=0)
    keep_last: int = Field(default=3, ge=1)
    resume_from_latest: bool = False
    compile: bool | None = None  # None: on CUDA, where it pays for itself within a long run
    price_per_hour: float | None = Field(default=None, ge=0)
    budget_cap_usd: float | None = Field(default=None, gt=0)
    alert_at_usd: float | None = Field(default=None, ge=0)
    budget_curr_cost_uri: str | None = None
    budget_poll_s: float = Field(default=30.0, ge=0)
    budget_stale_after_s: float = Field(default=600.0, gt=0)
    dry_run_budget: bool = False
    dry_run_steps: int = Field(default=5, ge=2)
    divergence_factor: float = Field(default=2.0, gt=1.0)
    min_mfu: float | None = Field(default=None, gt=0, le=1)
    min_tokens_per_s: float | None = Field(default=None, gt=0)
    peak_tflops: float | None = Field(default=None, gt=0)
    inject_spike_at_step: int | None = Field(default=None, ge=1)
    spike_steps: int = Field(default=3, ge=1)
    threads: int | None = Field(default=None, ge=1)
    mlflow_uri: str | None = None
    sharding: ShardingChoice = "auto"

    def budget_guard(self, elapsed_before_s: float = 0.0) -> BudgetGuard:
        """The guard this run's budget options describe; raises a
        :class:`~recipelab.longrun.budget.BudgetOptionError` naming the option to fix (a
        cap with no way to know the spend among them)."""
        sidecar = (SidecarSpend(cost_file(self.budget_curr_cost_uri), self.budget_poll_s,
                                self.budget_stale_after_s)
                   if self.budget_curr_cost_uri else None)
        return BudgetGuard(self.price_per_hour, self.budget_cap_usd, self.alert_at_usd,
                           self.recipe.steps, elapsed_before_s, sidecar=sidecar)


@dataclass
class PretrainResult:
    stop_reason: StopReason
    steps_done: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    budget: BudgetStatus | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.stop_reason]


def dry_run_report(config: PretrainConfig, result: PretrainResult) -> dict[str, Any]:
    """The projection ``--dry-run-budget`` prints, from the steps it measured, and what each
    of the budget's paths (the alert, the two stops) would do and at which step, found by
    the same :func:`budget_action` the run uses."""
    status = result.budget
    assert status is not None
    per_step = status.seconds_per_step
    total = config.recipe.steps
    rate = status.rate_usd_per_hour
    hours = per_step * total / 3600 if per_step is not None else None
    report: dict[str, Any] = {
        "measured_steps": result.steps_done, "seconds_per_step": per_step,
        "total_steps": total, "projected_hours": hours, "spend_source": status.source,
        "price_per_hour": rate, "budget_cap_usd": config.budget_cap_usd,
        "alert_at_usd": config.alert_at_usd}
    if per_step is None:
        return {**report, "projected_total_usd": None, "over_cap": False, "paths": {}}
    setup_s = max(0.0, status.elapsed_s - per_step * status.step)

    def at(step: int) -> BudgetStatus:
        elapsed = setup_s + per_step * step
        spent = rate * elapsed / 3600
        return BudgetStatus(step=step, total_steps=total, elapsed_s=elapsed, spent_usd=spent,
                            projected_total_usd=spent + rate * per_step * (total - step) / 3600,
                            rate_usd_per_hour=rate, cap_usd=config.budget_cap_usd,
                            alert_at_usd=config.alert_at_usd, seconds_per_step=per_step,
                            source=status.source)

    def first(test: Callable[[BudgetStatus], bool]) -> int | None:
        """The first step (1..total) at which ``test`` holds: spending only grows."""
        if not test(at(total)):
            return None
        low, high = 1, total
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if test(at(middle)) else (middle + 1, high)
        return low

    spent_step = first(lambda s: budget_action(s) == "stop_at_once")
    over = first(lambda s: budget_action(s) != "continue")  # the projection is checked at log steps
    projection_step = (min(-(-over // config.log_every) * config.log_every, total)
                       if over is not None else None)
    if projection_step is not None and spent_step is not None and spent_step <= projection_step:
        projection_step = None  # spending passes the cap first
    alert = config.alert_at_usd
    paths = {
        "alert": {"step": first(lambda s: alert is not None and s.spent_usd >= alert),
                  "does": "a budget_alert event, once"},
        "projection_over_cap": {"step": projection_step,
                                "does": f"checkpoint, then exit {EXIT_BUDGET}"},
        "spent_over_cap": {"step": spent_step,
                           "does": f"exit {EXIT_BUDGET} at once, no checkpoint"},
    }
    projected = at(0).projected_total_usd
    return {**report, "projected_total_usd": projected,
            "over_cap": config.budget_cap_usd is not None and projected is not None
            and projected > config.budget_cap_usd, "paths": paths}
