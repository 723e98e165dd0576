"""Trials per hour: a default ``recipelab run`` of baseline proxy trials, this tree against an
older release, in one alternating run.

What it measures
    ``recipelab run --preset cpu --iterations N --noise-seeds N`` trains the campaign's
    unedited baseline N times (the noise-floor seeds, which count toward ``--iterations``),
    with every other option at its default except ``--promote 0 --rung-size 0`` (no stress
    runs or rung: they are not proxy trials) and ``--skip-preflight`` (a fixed cost per
    campaign, not per trial). Each campaign is a fresh ``python -m recipelab`` process in a
    fresh directory; its wall time, process start to exit, gives trials per hour.

    The two trees alternate, A B, B A, ... for ``--rounds`` rounds, so a shared machine's
    load falls on both alike; the ratio per round and of the medians is printed with the
    CPU's model, its bf16 flags and the load averages. A warm-up campaign of each tree
    first builds its tokenized corpus cache.

Run it with::

    git worktree add --detach /work/old-7cded92 7cded92
    .venv/bin/python bench/trials_per_hour.py --old /work/old-7cded92 [--trials 8] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from recipelab.guardrails.hardware import BF16_CPU_FLAGS, CPUINFO, cpu_flags, cpu_model_name
from thread_policy import load_average

HERE = Path(__file__).resolve().parent.parent


def run_campaign(src: Path, directory: Path, trials: int) -> tuple[float, dict[str, object]]:
    """Run one default campaign of ``trials`` baseline trials with the sources in ``src``;
    returns its wall seconds and what its settings say it ran with."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTHONPATH")}
    env["PYTHONPATH"] = str(src)
    command = [sys.executable, "-m", "recipelab", "run", "--name", "bench", "--dir",
               str(directory), "--preset", "cpu", "--iterations", str(trials),
               "--noise-seeds", str(trials), "--promote", "0", "--rung-size", "0",
               "--proposer", "classical", "--skip-preflight"]
    begin = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - begin
    if done.returncode != 0:
        raise SystemExit(f"campaign with {src} failed ({done.returncode}):\n{done.stdout}\n"
                         f"{done.stderr}")
    settings = json.loads((directory / "settings.json").read_text())
    records = [json.loads(line) for line in (directory / "trajectory.jsonl").read_text().splitlines()
               if line.strip()]
    complete = [r for r in records if r.get("kind") == "proxy" and r.get("status") == "complete"]
    if len(complete) != trials:
        raise SystemExit(f"campaign with {src} completed {len(complete)} of {trials} trials: "
                         f"see {directory}/events.jsonl")
    precisions = sorted({str(r.get("recipe", {}).get("precision")) for r in complete})
    # a tree from before the settings had components saves parallel at the top level
    parallel = settings["executor"]["parallel"] if "executor" in settings and isinstance(
        settings["executor"], dict) else settings.get("parallel")
    return wall, {"parallel": parallel, "precision": ",".join(precisions)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="trials per hour: this tree against an old one")
    parser.add_argument("--old", type=Path, required=True, help="checkout of the old release")
    parser.add_argument("--trials", type=int, default=8, help="baseline trials per campaign")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    cpuinfo = CPUINFO.read_text() if CPUINFO.exists() else ""
    flags = sorted(cpu_flags(cpuinfo) & (BF16_CPU_FLAGS | {"avx512f", "amx_tile"}))
    print(f"CPU: {cpu_model_name(cpuinfo)}, {os.cpu_count()} logical CPUs, flags: "
          f"{' '.join(flags) or 'none of avx512f/avx512_bf16/amx'}")
    print(f"{args.trials} baseline proxy trials (cpu preset) per campaign, {args.rounds} "
          f"round(s), alternating; new = {HERE}, old = {args.old}")
    trees = {"new": HERE / "src", "old": args.old / "src"}
    rates: dict[str, list[float]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="recipelab-tph-") as tmp:
        for name, src in trees.items():  # warm-up: the corpus cache, page cache, imports
            run_campaign(src, Path(tmp) / f"warm-{name}", 1)
        print(f"load average before: {load_average()}", flush=True)
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for name in order:
                wall, ran = run_campaign(trees[name], Path(tmp) / f"r{r}-{name}", args.trials)
                rates[name].append(args.trials * 3600 / wall)
                print(f"  round {r + 1} {name}: {args.trials} trials in {wall:.1f} s = "
                      f"{rates[name][-1]:.0f} trials/h (parallel {ran['parallel']}, "
                      f"{ran['precision']})", flush=True)
            print(f"  round {r + 1} ratio new/old: {rates['new'][-1] / rates['old'][-1]:.2f}x "
                  f"(load {load_average()})", flush=True)
    print(f"load average after: {load_average()}")
    new, old = statistics.median(rates["new"]), statistics.median(rates["old"])
    print(f"median: new {new:.0f} trials/h, old {old:.0f} trials/h, ratio {new / old:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
