"""Null campaigns: how often the top rung names a winner among finalists no better than the
tuned baseline (the false-winner rate), and how often it names a better one (power).

Each campaign runs the campaign's own verdict code on real records
(:mod:`recipelab.trajectory.null_campaigns`: the top rung's fresh seeds, the close call, the
Bonferroni verdict over the tuned control). Only each run's val_bpb comes from elsewhere:

- **(a) simulated** (``--simulate N`` campaigns per cell): a noise model with the truth set by
  hand (:func:`~recipelab.trajectory.null_campaigns.noise_model`): every finalist equal to the
  control, or one better by 1 or 2 σ of a paired gain (power).
- **(b) from real runs** (``--pool N``): the preset's baseline trained at ``N`` seeds at the
  proxy's steps and at the top rung at × ¼ to × 4 its rate (real trainer subprocesses,
  cached in ``--out``). Each campaign gives every (recipe, seed) its own pool seed, drawn
  without replacement, so real tails and the real spread of seeds go through the same code;
  finalists draw from the rate with the best mean, so they equal the tuned control.

Each row prints its false-winner rate with a 95% Wilson interval, beside the bar of 10%.

    python bench/null_campaigns.py [--simulate 2000] [--pool 40] [--campaigns 2000] [--out DIR]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fidelity
from recipelab.agent.setup.settings_components import LadderSettings
from recipelab.targets import PROXY_PRESETS, proxy_recipe
from recipelab.trainer.spec import CorpusSpec
from recipelab.trajectory.ladder import LR_FAMILY
from recipelab.trajectory.null_campaigns import (
    CAMPAIGN_SEED,
    Draw,
    Outcome,
    TopRung,
    simulated,
    top_rung_campaign,
    wilson,
    winner_rate,
)

BAR = 0.10
"""The false-winner rate the verdict must stay under."""


def named(found: Sequence[Outcome]) -> float:
    return sum(o.named for o in found) / len(found)


def kept(found: Sequence[Outcome]) -> float:
    """The share handed off: named, and not overruled one size up."""
    return sum(o.handed_off for o in found) / len(found)


def simulate(rungs: Sequence[TopRung], n: int) -> None:
    print(f"\n(a) simulated campaigns, {n} per cell; σ is one seed's paired gain. False winners "
          "where every recipe's other rates are far worse (no luck in choosing a best rate) "
          "and where all three tie; 'handed off': named, and not overruled by the check one "
          "size up (the gain holds there, with the proxy's noise)")
    print(f"{'setting':<42} {'false winners [95%]':<26} {'handed off':>10} {'rates tied':>10} "
          f"{'power 1σ':>9} {'handed off':>10} {'power 2σ':>9} {'handed off':>10}")
    for rung in rungs:
        null = simulated(rung, n)
        tied = winner_rate(rung, n, rate_gap=0.0)
        one, two = (simulated(rung, n, gain=g) for g in (1.0, 2.0))
        hits = sum(o.named for o in null)
        low, high = wilson(hits, n)
        flag = "" if hits / n <= BAR else "  ABOVE THE BAR"
        print(f"{rung.describe():<42} {hits / n:6.1%} [{low:.1%}, {high:.1%}]{flag:<10} "
              f"{kept(null):10.1%} {tied:10.1%} {named(one):9.1%} {kept(one):10.1%} "
              f"{named(two):9.1%} {kept(two):10.1%}")


# --- (b): null campaigns from real runs --------------------------------------------------


@dataclass(frozen=True)
class Pool:
    """The baseline's real runs: ``proxy[i]`` at the proxy's steps, ``top[m][i]`` at the top
    rung at ``m`` × its rate, for pool seed ``i``."""

    proxy: list[float]
    top: dict[float, list[float]]
    proxy_steps: int
    top_steps: int


def train_pool(preset: str, corpus: str, seeds: int, top_steps: int, out: Path,
               workers: int) -> Pool:
    base = proxy_recipe(preset)
    spec = CorpusSpec(source=corpus)
    factors = (1.0, *LR_FAMILY, *(m * m for m in LR_FAMILY))  # one step beyond each edge

    def run(steps: int, factor: float, seed: int) -> float:
        recipe = base.apply({"seed": 1000 + seed,
                                     "optimizer.lr": base.optimizer.lr * factor})
        return fidelity.score(fidelity.trial(recipe, steps, out, f"{steps}-x{factor:g}-s{seed}",
                                             threads=1, corpus=spec,
                                             tokens_per_step=base.tokens_per_step))

    with ThreadPoolExecutor(workers) as pool:
        proxy = [pool.submit(run, base.steps, 1.0, s) for s in range(seeds)]
        top = {m: [pool.submit(run, top_steps, m, s) for s in range(seeds)] for m in factors}
        return Pool([f.result() for f in proxy], {m: [f.result() for f in fs]
                                                  for m, fs in top.items()},
                    base.steps, top_steps)


def pool_draw(pool: Pool, rng: random.Random) -> Draw:
    """Each (recipe, seed) of one campaign gets its own pool seed, none used twice; every run
    draws from the rate it trains at (a finalist's: the one the campaign's control chose;
    beyond the pool's rates, none). A
    finalist's proxy run and its top-rung run at the proxy's seed share a pool seed, so real
    luck carries across rungs as it does in a campaign."""
    order = list(range(len(pool.proxy)))
    rng.shuffle(order)
    assigned: dict[tuple[str, int], int] = {}

    def draw(who: str, seed: int, factor: float) -> float:
        key = (who, seed)
        if key not in assigned:
            if not order:
                raise RuntimeError("the pool ran out of seeds: train it at more (--pool)")
            assigned[key] = order.pop()
        index = assigned[key]
        if seed == CAMPAIGN_SEED and factor == 1.0 and (who, -1) not in assigned:
            assigned[(who, -1)] = index
            return pool.proxy[index]
        # a rate the pool did not train counts as failed: the family follows no further
        return pool.top[factor][index] if factor in pool.top else math.nan
    return draw


def from_pool(rungs: Sequence[TopRung], pool: Pool, n: int, seed: int = 0) -> None:
    means = {m: statistics.fmean(v) for m, v in pool.top.items()}
    print(f"\n(b) null campaigns from {len(pool.proxy)} real seeds of the baseline, {n} per cell "
          f"(top rung {pool.top_steps} steps; mean val_bpb by rate: "
          + ", ".join(f"× {m:g} {v:.4f}" for m, v in sorted(means.items()))
          + "; finalists drawn at the rate each campaign's control chose)")
    print(f"{'setting':<42} {'false winners [95%]':<26}")
    for rung in rungs:
        need = (rung.promote + 1) * (rung.top_seeds + rung.close_call_seeds + 1)
        if need > len(pool.proxy):
            print(f"{rung.describe():<42} needs {need} pool seeds (--pool {need})")
            continue
        rng = random.Random(seed)
        hits = sum(top_rung_campaign(rung, pool_draw(pool, rng), proxy_steps=pool.proxy_steps,
                                     top_steps=pool.top_steps, one_size_up=False).named
                   for _ in range(n))
        low, high = wilson(hits, n)
        flag = "" if hits / n <= BAR else "  ABOVE THE BAR"
        print(f"{rung.describe():<42} {hits / n:6.1%} [{low:.1%}, {high:.1%}]{flag}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulate", type=int, default=2000, help="campaigns per cell in (a)")
    parser.add_argument("--pool", type=int, default=0,
                        help="(b): train the baseline at this many seeds (0: skip (b))")
    parser.add_argument("--campaigns", type=int, default=2000, help="campaigns per cell in (b)")
    parser.add_argument("--preset", default="tiny", choices=sorted(PROXY_PRESETS))
    parser.add_argument("--corpus", default="python-source")
    parser.add_argument("--stress-steps", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench-out/null-campaigns"))
    args = parser.parse_args()

    default = LadderSettings()
    rungs = [TopRung(p, default.top_seeds, c) for c in (default.close_call_seeds, 0)
             for p in sorted({1, default.promote, 3})]
    rungs.append(TopRung(3, 3, default.close_call_seeds))  # the defaults before 2 finalists at 4 seeds
    print(f"defaults: --top-seeds {default.top_seeds}, --close-call-seeds "
          f"{default.close_call_seeds}; the bar: at most {BAR:.0%} false winners")
    started = time.perf_counter()
    simulate(rungs, args.simulate)
    print(f"({time.perf_counter() - started:.0f} s)")
    if args.pool:
        args.out.mkdir(parents=True, exist_ok=True)
        pool = train_pool(args.preset, args.corpus, args.pool, args.stress_steps, args.out,
                          args.workers)
        from_pool(rungs, pool, args.campaigns)


if __name__ == "__main__":
    main()
