"""Per-iteration overhead of the campaign loop, as a share of iteration wall time.

Runs a real campaign (default: the ``cpu`` preset, 1 baseline + 10 proposals, no stress
runs) in a temporary directory and reads its events and records back. An iteration starts
at one ``proposal`` event and ends at the next (the last at ``campaign_finished``); the
trainer's own time is its ``train_s + eval_s``; everything else is overhead: proposing,
guarding, writing specs and records, process start-up, data and model set-up, polling.

Target: overhead <= 3% of iteration wall time.

    python bench/loop_overhead.py [--preset cpu] [--iterations 11]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
from datetime import datetime
from pathlib import Path

from rich.console import Console

from recipelab.agent.campaign import Campaign
from recipelab.agent.events import EVENTS_FILE, read_events
from recipelab.agent.settings import CampaignSettings
from recipelab.trajectory import TrajectoryStore

TARGET_SHARE = 0.03


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--iterations", type=int, default=11)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        settings = CampaignSettings(name="overhead", preset=args.preset,
                                    iterations=args.iterations, promote=0)
        Campaign(settings, directory, console=Console(stderr=True, quiet=True)).run()
        events = list(read_events(directory / EVENTS_FILE))
        with TrajectoryStore(directory, "overhead", readonly=True) as store:
            records = {r.trial_id: r for r in store.records()}

    marks = [(e["event"], e.get("trial_id"), datetime.fromisoformat(e["timestamp"]))
             for e in events if e["event"] in ("proposal", "campaign_finished")]
    rows = []
    for (_, trial_id, start), (_, _, end) in itertools.pairwise(marks):
        record = records[str(trial_id)]
        wall = (end - start).total_seconds()
        own = (record.metrics.get("train_s") or 0.0) + (record.metrics.get("eval_s") or 0.0)
        rows.append((trial_id, wall, own, record.metrics.get("setup_s") or 0.0))

    total_wall = sum(r[1] for r in rows)
    total_own = sum(r[2] for r in rows)
    share = (total_wall - total_own) / total_wall
    print(f"{'trial':8} {'wall s':>8} {'train+eval s':>13} {'setup s':>8} {'overhead s':>11}")
    for trial_id, wall, own, setup in rows:
        print(f"{trial_id:8} {wall:8.2f} {own:13.2f} {setup:8.2f} {wall - own:11.3f}")
    print(f"\niterations: {len(rows)}   median iteration: {statistics.median(r[1] for r in rows):.2f} s")
    print(f"median overhead per iteration: {statistics.median(r[1] - r[2] for r in rows):.3f} s")
    verdict = "target met" if share <= TARGET_SHARE else "target missed"
    print(f"loop overhead share: {100 * share:.2f}% of iteration wall time "
          f"(target <= {100 * TARGET_SHARE:.0f}%): {verdict}")


if __name__ == "__main__":
    main()
