"""Host memory: a CPU trial that keeps the memory its steps free against glibc's defaults.

What it measures
    Real ``cpu``-preset trials (each a ``python -m recipelab.trainer`` process, one thread)
    run two ways, alternating for ``--rounds`` rounds:

    * ``kept``: as every trial runs, with ``keep_freed_memory`` (glibc serves blocks up to
      32 MiB from its heap and never trims it);
    * ``default``: ``RECIPELAB_KEEP_FREED_MEMORY=0``, glibc's adaptive defaults.

    Per trial it prints the timed step (the trainer's own figure, warm-up excluded), the
    training time, the process's minor page faults and kernel CPU time, and its peak resident
    memory; then the median step ratio. Pin it to one core (``taskset -c 1``) on a shared
    machine; only the ratio from one interleaved run means anything.

Run it with ``.venv/bin/python bench/host_memory.py [--rounds 3] [--steps 60]``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trial_process
from recipelab import environment
from recipelab.targets import proxy_recipe
from thread_policy import load_average

WAYS = {"kept": {}, "default": {environment.KEEP_FREED_MEMORY: "0"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args(argv)
    recipe = proxy_recipe("cpu").apply({"steps": args.steps})
    print(f"{args.rounds} rounds of one cpu-preset trial ({args.steps} steps, 1 thread) per way, "
          f"alternating; load average before: {load_average()}")
    steps: dict[str, list[float]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="recipelab-host-memory-") as tmp:
        for r in range(args.rounds):
            for way, env in WAYS.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                result, wall = trial_process.run(recipe, Path(tmp), f"{way}-{r}", threads=1,
                                                 env=env)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                assert result.step_ms is not None and result.peak_memory_bytes is not None
                steps[way].append(result.step_ms)
                print(f"  {way:<8} step {result.step_ms:6.1f} ms  train {result.train_s:5.1f} s  "
                      f"process {wall:5.1f} s  minor faults "
                      f"{after.ru_minflt - before.ru_minflt:>9,}  kernel CPU "
                      f"{after.ru_stime - before.ru_stime:4.1f} s  peak memory "
                      f"{result.peak_memory_bytes / 2**20:5.0f} MiB", flush=True)
    kept, default = (statistics.median(steps[way]) for way in WAYS)
    print(f"median step: kept {kept:.1f} ms, default {default:.1f} ms: "
          f"{default / kept:.3f}x the steps per second with freed memory kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
