"""Iteration timing of a finished campaign, read back from its events and records.

An iteration starts at one ``proposal`` event and ends at the next (the last one at
``campaign_finished``). The trainer's own time is its ``train_s + eval_s``; the rest of an
iteration is loop overhead: proposing, guarding, writing specs and records, process
start-up, data and model set-up, polling.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from recipelab.eventlog import EVENTS_FILE, read_events
from recipelab.trajectory import TrajectoryStore


@dataclass(frozen=True)
class Iteration:
    trial_id: str
    wall_s: float
    trainer_s: float  # train + eval, as the trainer measured it
    setup_s: float

    @property
    def overhead_s(self) -> float:
        return self.wall_s - self.trainer_s


def iterations(directory: Path, campaign: str) -> list[Iteration]:
    marks = [(str(e.get("trial_id")), datetime.fromisoformat(e["timestamp"]))
             for e in read_events(directory / EVENTS_FILE)
             if e["event"] in ("proposal", "campaign_finished")]
    with TrajectoryStore(directory, campaign, readonly=True) as store:
        records = {r.trial_id: r for r in store.records()}
    rows = []
    for (trial_id, start), (_, end) in itertools.pairwise(marks):
        metrics = records[trial_id].metrics
        rows.append(Iteration(
            trial_id=trial_id, wall_s=(end - start).total_seconds(),
            trainer_s=(metrics.get("train_s") or 0.0) + (metrics.get("eval_s") or 0.0),
            setup_s=metrics.get("setup_s") or 0.0))
    return rows
