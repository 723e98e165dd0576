"""torch.compile: what it costs and what it saves per trial, cold and warm cache.

What it measures
    Real trainer processes of the ``--preset`` recipe (default ``cpu``) for ``--steps``
    steps: eager, then compiled with an empty compile cache (cold), then compiled again with
    the cache the cold run left (warm), alternating eager / cold / warm for ``--rounds``.
    Each run reports its steady step time (the trainer's own, warm-up steps excluded) and its
    training wall time (compilation included). From those: the compile overhead of each
    cache state, the time a compiled step saves, and the break-even run length in steps.
    Load averages are printed: only ratios from one run mean anything on a shared machine.

Run it with ``.venv/bin/python bench/compile_cost.py [--preset cpu] [--steps 60]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trial_process
from recipelab.targets import PROXY_PRESETS, proxy_recipe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="torch.compile cost, cold and warm cache")
    parser.add_argument("--preset", default="cpu", choices=sorted(PROXY_PRESETS))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    recipe = proxy_recipe(args.preset).apply({"steps": args.steps})
    print(f"preset {args.preset}, {args.steps} steps; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows: dict[str, list[tuple[float, float, float]]] = {"eager": [], "cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="recipelab-compile-") as tmp:
        out = Path(tmp)
        for r in range(args.rounds):
            cache = out / f"cache{r}"
            for name in rows:
                if name == "cold":
                    shutil.rmtree(cache, ignore_errors=True)
                result, wall = trial_process.run(
                    recipe, out / f"r{r}", f"{name}", threads=args.threads,
                    compile_model=name != "eager", env={"RECIPELAB_CACHE": str(cache)})
                assert result.step_ms is not None and result.train_s is not None
                rows[name].append((result.step_ms, result.train_s, wall))
                print(f"  round {r + 1} {name:<5}: step {result.step_ms:7.1f} ms, train "
                      f"{result.train_s:6.1f} s, process {wall:6.1f} s, val_bpb "
                      f"{result.val_bpb:.4f}", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    med = {name: tuple(statistics.median(v[i] for v in runs) for i in range(3))
           for name, runs in rows.items()}
    eager_step, eager_train, _ = med["eager"]
    saved_ms = eager_step - med["warm"][0]
    print(f"steady step: eager {eager_step:.1f} ms, compiled {med['warm'][0]:.1f} ms "
          f"({eager_step / med['warm'][0]:.2f}x)")
    for name in ("cold", "warm"):
        step, train, wall = med[name]
        overhead = (train - args.steps * step / 1000) - (eager_train - args.steps * eager_step
                                                          / 1000)
        even = (f"{1000 * overhead / saved_ms:,.0f} steps" if saved_ms > 0 else "never")
        print(f"{name} cache: compile overhead {overhead:.1f} s, trial train time "
              f"{train:.1f} s vs eager {eager_train:.1f} s; break-even at {even}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
