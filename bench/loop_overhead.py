"""Per-iteration overhead of the campaign loop, as a share of iteration wall time.

Runs a real campaign (default: the ``cpu`` preset, 1 baseline + 10 proposals, no stress
runs) in a temporary directory and reads its events and records back (see ``timing.py``
for what counts as overhead). Target: overhead <= 3% of iteration wall time.

    python bench/loop_overhead.py [--preset cpu] [--iterations 11]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from rich.console import Console

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings, LadderSettings, WindowSettings
from timing import iterations

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
                                    window=WindowSettings(iterations=args.iterations),
                                    ladder=LadderSettings(promote=0))
        Campaign(settings, directory, console=Console(stderr=True, quiet=True)).run()
        rows = iterations(directory, "overhead")

    print(f"{'trial':8} {'wall s':>8} {'train+eval s':>13} {'setup s':>8} {'overhead s':>11}")
    for row in rows:
        print(f"{row.trial_id:8} {row.wall_s:8.2f} {row.trainer_s:13.2f} {row.setup_s:8.2f} "
              f"{row.overhead_s:11.3f}")
    share = sum(r.overhead_s for r in rows) / sum(r.wall_s for r in rows)
    print(f"\niterations: {len(rows)}   median iteration: "
          f"{statistics.median(r.wall_s for r in rows):.2f} s")
    print(f"median overhead per iteration: {statistics.median(r.overhead_s for r in rows):.3f} s"
          f" (the first iteration also starts the first worker: {rows[0].overhead_s:.2f} s)")
    verdict = "target met" if share <= TARGET_SHARE else "target missed"
    print(f"loop overhead share: {100 * share:.2f}% of iteration wall time "
          f"(target <= {100 * TARGET_SHARE:.0f}%): {verdict}")


if __name__ == "__main__":
    main()
