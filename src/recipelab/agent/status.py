"""What ``recipelab status`` shows, computed from the store alone (no lock, no writes)."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from recipelab.agent.seeds import Winner, name_winner, rank_finalists
from recipelab.agent.settings import CampaignSettings
from recipelab.trajectory.noise import BASELINE_PROPOSER, NoiseFloor, noise_floor
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
        minutes = left * statistics.median(walls) / 60 / settings.parallel
        eta = f", ETA {minutes:.1f} min for the proxy trials"
    budget = f"/{settings.iterations}" if settings.iterations is not None else ""
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    headline = (f"campaign {settings.name}: {len(trained)}{budget} proxy trials trained "
                f"({summary or 'nothing yet'}){eta}")
    running = "; ".join(f"{r.trial_id} ({r.kind}, started {r.started_at})"
                        for r in records if r.status == "running") or None
    verdicts = {r.parent: r.verdict for r in records
                if r.kind == "stress" and r.parent and r.verdict}
    floor = noise_floor(proxies)
    marks = {r.trial_id: floor.describe(r.val_bpb) for r in complete
             if floor is not None and r.val_bpb is not None and r.proposer != BASELINE_PROPOSER}
    winner = name_winner(rank_finalists(proxies, settings.promote), proxies, floor)
    return StatusView(headline=headline, running=running, best=complete[:BEST_SHOWN],
                      stress_verdicts=verdicts, noise=floor, marks=marks, winner=winner)
