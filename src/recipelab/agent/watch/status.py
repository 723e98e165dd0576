"""What ``recipelab status`` shows, computed from the store alone (no lock, no writes)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.setup.window import split_text
from recipelab.eventlog import EVENTS_FILE, read_events
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.noise import NoiseFloor
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.verdict import Winner

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
    verdict: str | None = None  # Ledger.winner_line, once a candidate has trained
    ladder: str | None = None  # the rungs reached so far
    lost: tuple[str, ...] = ()  # each interrupted trial: where it was lost and its re-run

    def noise_line(self) -> str | None:
        """The noise floor in words, or None before it is measured."""
        if self.noise is None:
            return None
        return self.noise.summary()

    def winner_line(self) -> str | None:
        """The campaign's winner line (see :meth:`Ledger.winner_line`)."""
        return self.verdict


def ladder_line(ledger: Ledger) -> str | None:
    """The rungs reached so far: ``ladder: 60 steps (245,760 tokens) ×12 → 180 ×5 → 1000 ×4
    at 2 seeds`` (the baseline counted at every rung; a rung's steps are the baseline's, its
    budget their tokens); None before any run above the proxy."""
    levels = ledger.rung_levels
    if not levels:
        return None
    first = ledger.proxies[0] if ledger.proxies else None
    proxy = (f"{first.budget_steps} steps ({first.tokens:,} tokens)" if first is not None
             else f"{ledger.top_rung().steps} steps")
    parts = [f"{proxy} ×{len(ledger.ranked_at_proxy)}"]
    for steps in levels:
        runs = [r for r in (*ledger.ranking_runs, *ledger.stress)
                if r.budget_steps == steps and r.trained]
        recipes = {r.parent for r in runs}
        seeds = {int(r.recipe.get("seed", 0)) for r in runs}
        parts.append(f"{steps} ×{len(recipes)}" + (f" at {len(seeds)} seeds" if len(seeds) > 1 else ""))
    return "ladder: " + " → ".join(parts) + " (recipes per rung, the baseline included)"


def progress_line(settings: CampaignSettings, ledger: Ledger) -> str:
    """Trained proxy trials against ``--iterations``, each counted once and where it belongs.

    A finalist's seed re-runs are part of promotion, so they are shown apart and never
    against the budget; an interrupted trial is counted as interrupted, and its one re-run
    (when trained) among the trained; rung runs and stress runs are counted on their own.
    """
    c = ledger.counts()
    details = [f"{c.failed} failed"] if c.failed else []
    details += [f"+{c.seed_reruns} seed re-run{'s' if c.seed_reruns != 1 else ''}"] if c.seed_reruns else []
    details += [f"{c.interrupted_rerun} interrupted and re-run"] if c.interrupted_rerun else []
    details += [f"{c.interrupted_pending} interrupted, to re-run"] if c.interrupted_pending else []
    details += ([f"{c.interrupted_again} re-run{'s' if c.interrupted_again != 1 else ''} "
                 "interrupted again, not run a third time"] if c.interrupted_again else [])
    budget = f"/{settings.window.iterations}" if settings.window.iterations is not None else ""
    line = f"{c.trained}{budget} proxy trials trained"
    line += f" ({', '.join(details)})" if details else ""
    line += f", {c.rejected} rejected" if c.rejected else ""
    line += (f", +{c.rung_trained} rung run{'s' if c.rung_trained != 1 else ''}"
             if c.rung_trained else "")
    line += (f", {c.stress_trained} stress run{'s' if c.stress_trained != 1 else ''}"
             if c.stress_total else "")
    line += f", {c.running} running" if c.running else ""
    if c.llm_asked or settings.proposer.name() != "classical":
        line += f"; {c.llm_line()}"
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
    runs, rung = event.get("stress_runs"), event.get("rung_runs")
    if not isinstance(runs, int):
        return split
    rung_text = f"{rung} rung runs, " if isinstance(rung, int) and rung else ""
    return f"{split} ({rung_text}{runs} stress runs planned)"


def lost_lines(ledger: Ledger) -> tuple[str, ...]:
    """One line per interrupted trial: the node it was lost on (when a cluster ran it) and
    the trial that re-ran it, so a person watching a cluster sees a dead node at once."""
    reruns = {r.retry_of: r for r in ledger.records if r.retry_of}
    pending = {r.trial_id for r in ledger.pending_retries("proxy")}  # the one re-run rule
    lines = []
    for record in (r for r in ledger.records if r.status == "interrupted"):
        if (rerun := reruns.get(record.trial_id)) is not None:
            then = f": re-run as {rerun.trial_id} ({rerun.status})"
        elif record.trial_id in pending:
            then = ": to re-run"
        elif record.kind == "proxy":
            then = ": a re-run lost again, not run a third time"
        else:
            then = ""
        node = record.measured.node
        lines.append(f"{record.trial_id} ({record.kind}) interrupted"
                     + (f" on node {node}" if node else "") + then)
    return tuple(lines)


def campaign_status(settings: CampaignSettings, records: list[TrialRecord],
                    window: str | None = None) -> StatusView:
    ledger = settings.ladder.ledger(records)
    walls = [wall for r in ledger.search_trials if (wall := r.measured.wall_s) is not None]
    eta = ""
    left = max(0, (settings.window.iterations or 0) - len(ledger.search_trials))
    if left and walls:
        in_flight = settings.executor.parallel if isinstance(settings.executor.parallel, int) else 1
        minutes = left * statistics.median(walls) / 60 / in_flight
        eta = f", ETA {minutes:.1f} min for the proxy trials"
    headline = f"campaign {settings.name}: {progress_line(settings, ledger)}{eta}"
    running = "; ".join(f"{r.trial_id} ({r.kind}, started {r.started_at})"
                        for r in records if r.status == "running") or None
    verdicts = {r.parent: r.verdict for r in ledger.stress if r.parent and r.verdict}
    floor = ledger.noise
    complete = ledger.ranked_at_proxy  # seed re-runs are evidence about a candidate, not rows of their own
    marks = {r.trial_id: gain.describe() for r in complete  # the report's label, seeds and all
             if (gain := ledger.proxy_gain(r)) is not None}
    return StatusView(headline=headline, running=running, best=complete[:BEST_SHOWN],
                      stress_verdicts=verdicts, noise=floor, marks=marks, winner=ledger.winner,
                      window=window, verdict=ledger.winner_line() if ledger.ranked_at_proxy else None,
                      ladder=ladder_line(ledger), lost=lost_lines(ledger))
