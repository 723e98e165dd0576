"""Thread policy: trials per hour with one trial on all cores against one trial per core.

What it measures
    ``--trials`` real trials of the ``cpu`` preset (each a ``python -m recipelab.trainer``
    process, setup and evaluation included) run two ways on this machine's cores:

    * ``parallel 1``: one trial at a time with ``threads = cores``;
    * ``parallel P``: ``P = cores`` trials at a time with one thread each (the campaign's
      default, ``threads = max(1, cores // parallel)``).

    The two ways alternate for ``--rounds`` rounds, and the output is trials per hour
    (median over rounds) and the ratio. Load averages are printed: on a shared machine only
    the ratio from one interleaved run means anything.

Trials train in ``--precision`` (default ``auto``: what a campaign on this machine trains in,
bf16 on a CPU with native bf16, else fp32).

Run it with ``.venv/bin/python bench/thread_policy.py [--trials 4] [--rounds 1] [--steps 60]
[--precision auto|fp32|bf16]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trial_process
from recipelab.guardrails.hardware import campaign_precision, detect_device
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import TrialSpec


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_way(parallel: int, threads: int, trials: int, steps: int, out: Path,
            precision: str = "fp32") -> float:
    """Run ``trials`` trials, ``parallel`` in flight at once; returns trials per hour."""
    recipe = proxy_recipe("cpu").apply({"steps": steps, "precision": precision})
    begin = time.perf_counter()
    queue = list(range(trials))
    running: list[tuple[subprocess.Popen[bytes], TrialSpec]] = []
    while queue or running:
        while queue and len(running) < parallel:
            n = queue.pop(0)
            recipe_n = recipe.apply({"seed": n})
            running.append(trial_process.start(recipe_n, out, f"p{parallel}-{n}",
                                               threads=threads))
        process, spec = running.pop(0)
        trial_process.finish(process, spec)
    return trials * 3600 / (time.perf_counter() - begin)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="trials per hour: parallel 1 vs one per core")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    args = parser.parse_args(argv)
    cores = os.cpu_count() or 1
    precision = campaign_precision(args.precision, detect_device())
    print(f"{cores} logical CPUs; {args.trials} cpu-preset trials of {args.steps} steps in "
          f"{precision} per way, {args.rounds} round(s), alternating")
    print(f"load average before: {load_average()}")
    ways = [(1, cores), (cores, 1)]
    rates: dict[tuple[int, int], list[float]] = {way: [] for way in ways}
    with tempfile.TemporaryDirectory(prefix="recipelab-threads-") as tmp:
        for r in range(args.rounds):
            for parallel, threads in ways if r % 2 == 0 else ways[::-1]:
                out = Path(tmp) / f"r{r}"
                rate = run_way(parallel, threads, args.trials, args.steps, out, precision)
                rates[(parallel, threads)].append(rate)
                print(f"  round {r + 1}: parallel {parallel} x {threads} thread(s): "
                      f"{rate:.0f} trials/h", flush=True)
    print(f"load average after: {load_average()}")
    one, spread = (statistics.median(rates[w]) for w in ways)
    print(f"parallel 1 x {cores} threads: {one:.0f} trials/h; parallel {cores} x 1 thread: "
          f"{spread:.0f} trials/h; ratio {spread / one:.2f}x")
    best = "one thread per trial, cores // parallel" if spread >= one else "all cores per trial"
    print(f"faster here: {best}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
