"""The books of a campaign after faults: what was lost, duplicated or left in disagreement.

Shared by the fault-injection tests and ``bench/soak.py``. A trial counts as *lost* when the
campaign's events show it started but the trajectory holds no terminal record of it; as
*duplicated* when its id has two terminal records, or when one candidate (fingerprint) was
trained to the end twice. An interrupted trial must have been re-run (once: a re-run that is
interrupted again is not re-run again).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipelab.eventlog import EVENTS_FILE, read_events
from recipelab.trajectory import TrajectoryStore

TRAINED = ("complete", "failed")


@dataclass(frozen=True)
class Audit:
    records: list[dict[str, Any]]
    lost: list[str]
    duplicated: list[str]
    disagreements: list[str]
    running: list[str]
    interrupted_without_rerun: list[str]

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.disagreements or self.running
                    or self.interrupted_without_rerun)

    def trained(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == kind and r["status"] in TRAINED]


def audit(directory: Path, campaign: str) -> Audit:
    lines = (directory / "trajectory.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    ids = Counter(r["trial_id"] for r in records)
    fingerprints = Counter(r["fingerprint"] for r in records
                           if r["status"] in TRAINED and r["kind"] == "proxy")
    started = {e["trial_id"] for e in read_events(directory / EVENTS_FILE)
               if e.get("event") == "trial_started"}
    reruns = {r["retry_of"] for r in records if r.get("retry_of")}
    with TrajectoryStore(directory, campaign, readonly=True) as store:
        disagreements = store.check()
        running = [r.trial_id for r in store.records(status="running")]
    return Audit(
        records=records,
        lost=sorted(started - set(ids)),
        duplicated=sorted([i for i, n in ids.items() if n > 1]
                          + [f for f, n in fingerprints.items() if n > 1]),
        disagreements=disagreements,
        running=running,
        interrupted_without_rerun=sorted(r["trial_id"] for r in records
                                         if r["status"] == "interrupted" and not r["retry_of"]
                                         and r["trial_id"] not in reruns),
    )
