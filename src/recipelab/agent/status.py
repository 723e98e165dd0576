"""What ``recipelab status`` shows, computed from the store alone (no lock, no writes)."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

from recipelab.agent.settings import CampaignSettings
from recipelab.trajectory.record import TrialRecord

BEST_SHOWN = 10


@dataclass(frozen=True)
class StatusView:
    headline: str
    running: str | None
    best: list[TrialRecord]
    stress_verdicts: dict[str, str]  # proxy trial id -> its stress run's verdict


def campaign_status(settings: CampaignSettings, records: list[TrialRecord]) -> StatusView:
    proxies = [r for r in records if r.kind == "proxy"]
    trained = [r for r in proxies if r.status in ("complete", "failed")]
    counts = Counter(r.status for r in records)
    complete = sorted((r for r in proxies if r.status == "complete" and r.val_bpb is not None),
                      key=lambda r: (r.val_bpb, r.trial_id))
    walls = [r.metrics["wall_s"] for r in trained if r.metrics.get("wall_s") is not None]
    eta = ""
    left = max(0, (settings.iterations or 0) - len(trained))
    if left and walls:
        eta = f", ETA {left * statistics.median(walls) / 60:.1f} min for the proxy trials"
    budget = f"/{settings.iterations}" if settings.iterations is not None else ""
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    headline = (f"campaign {settings.name}: {len(trained)}{budget} proxy trials trained "
                f"({summary or 'nothing yet'}){eta}")
    running = next((f"{r.trial_id} ({r.kind}, started {r.started_at})"
                    for r in records if r.status == "running"), None)
    verdicts = {r.parent: r.verdict for r in records
                if r.kind == "stress" and r.parent and r.verdict}
    return StatusView(headline=headline, running=running, best=complete[:BEST_SHOWN],
                      stress_verdicts=verdicts)
