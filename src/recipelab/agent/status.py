"""What ``recipelab status`` shows, computed from the store alone (no lock, no writes)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from recipelab.agent.events import EVENTS_FILE, read_events
from recipelab.agent.seeds import Winner, name_winner, rank_finalists, search_trials
from recipelab.agent.settings import CampaignSettings
from recipelab.agent.window import split_text
from recipelab.recipe import BASELINE_PROPOSER
from recipelab.trajectory.noise import (
    SEED_RERUN_PROPOSER,
    NoiseFloor,
    noise_floor,
)
from recipelab.trajectory.record import TrialRecord

BEST_SHOWN = 10


@dataclass(frozen=True)
class StatusView:
    headline: str
    running: str | None
    best: list[TrialRecord]
    stress_verdicts: dict[str, str]  # proxy trial id -> its stress run's verdict
    noise: NoiseFloor | None = None
    marks: dict[str, str] = field(default_factory=dict)  # trial id -> "noise" or its gain
    winner: Winner | None = None
    window: str | None = None  # the planned split of a --hours/--until window

    def noise_line(self) -> str | None:
        """The noise floor in words, or None before it is measured."""
        if self.noise is None:
            return None
        seeds = ", ".join(str(s) for s in self.noise.seeds)
        return (f"noise floor: baseline val_bpb {self.noise.mean:.4f} ± spread "
                f"{self.noise.spread:.4f} over seeds {seeds}; gains within it are marked noise")

    def winner_line(self) -> str | None:
        if self.winner is None:
            return None
        w = self.winner
        mark = " (within noise of the baseline)" if w.within_noise else ""
        return (f"winner: {w.record.trial_id}, mean val_bpb {w.mean_val_bpb:.4f} over "
                f"{w.seeds} seed{'s' if w.seeds != 1 else ''}{mark}")


def progress_line(settings: CampaignSettings, records: list[TrialRecord]) -> str:
    """Trained proxy trials against ``--iterations``, each counted once and where it belongs.

    A finalist's seed re-runs are part of promotion, so they are shown apart and never
    against the budget; an interrupted trial is counted as interrupted, and its one re-run
    (when trained) among the trained; stress runs are counted on their own.
    """
    proxies = [r for r in records if r.kind == "proxy"]
    trained = search_trials(proxies)
    reruns = sum(r.proposer == SEED_RERUN_PROPOSER and r.trained
                 for r in proxies)
    retried = {r.retry_of for r in records if r.retry_of}
    lost = [r for r in proxies if r.status == "interrupted"]
    requeued = sum(r.trial_id in retried for r in lost)
    details = [f"{n} failed" for n in [sum(r.status == "failed" for r in trained)] if n]
    details += [f"+{reruns} seed re-run{'s' if reruns != 1 else ''}"] if reruns else []
    details += [f"{requeued} interrupted and re-run"] if requeued else []
    details += [f"{len(lost) - requeued} interrupted, to re-run"] if len(lost) > requeued else []
    budget = f"/{settings.iterations}" if settings.iterations is not None else ""
    line = f"{len(trained)}{budget} proxy trials trained"
    line += f" ({', '.join(details)})" if details else ""
    rejected = sum(r.status == "rejected" for r in proxies)
    stress = [r for r in records if r.kind == "stress"]
    stress_done = sum(r.trained for r in stress)
    running = sum(r.status == "running" for r in records)
    line += f", {rejected} rejected" if rejected else ""
    line += f", {stress_done} stress run{'s' if stress_done != 1 else ''}" if stress else ""
    line += f", {running} running" if running else ""
    return line


def latest_window(directory: Path) -> str | None:
    """The last planned split of the campaign's window (``window_planned`` events)."""
    path = directory / EVENTS_FILE
    plan: str | None = None
    if path.exists():
        for event in read_events(path):
            if event.get("event") == "window_planned":
                plan = _plan_text(event)
            elif event.get("event") == "campaign_started":
                plan = None  # a resumed campaign may have another deadline
    return plan


def _plan_text(event: dict[str, Any]) -> str | None:
    """The split in the reader's local time (the orchestrator's may differ)."""
    try:
        split = split_text(datetime.fromisoformat(str(event["search_until"])),
                           datetime.fromisoformat(str(event["deadline"])))
    except (KeyError, ValueError):
        return None
    runs = event.get("stress_runs")
    return f"{split} ({runs} stress runs planned)" if isinstance(runs, int) else split


def campaign_status(settings: CampaignSettings, records: list[TrialRecord],
                    window: str | None = None) -> StatusView:
    proxies = [r for r in records if r.kind == "proxy"]
    trained = search_trials(proxies)
    complete = sorted((r for r in proxies if r.status == "complete" and r.val_bpb is not None),
                      key=lambda r: (r.val_bpb, r.trial_id))
    walls = [r.metrics["wall_s"] for r in trained if r.metrics.get("wall_s") is not None]
    eta = ""
    left = max(0, (settings.iterations or 0) - len(trained))
    if left and walls:
        minutes = left * statistics.median(walls) / 60 / settings.parallel
        eta = f", ETA {minutes:.1f} min for the proxy trials"
    headline = f"campaign {settings.name}: {progress_line(settings, records)}{eta}"
    running = "; ".join(f"{r.trial_id} ({r.kind}, started {r.started_at})"
                        for r in records if r.status == "running") or None
    verdicts = {r.parent: r.verdict for r in records
                if r.kind == "stress" and r.parent and r.verdict}
    floor = noise_floor(proxies)
    marks = {r.trial_id: floor.describe(r.val_bpb) for r in complete
             if floor is not None and r.val_bpb is not None and r.proposer != BASELINE_PROPOSER}
    winner = name_winner(rank_finalists(proxies, settings.promote), proxies, floor)
    return StatusView(headline=headline, running=running, best=complete[:BEST_SHOWN],
                      stress_verdicts=verdicts, noise=floor, marks=marks, winner=winner,
                      window=window)
