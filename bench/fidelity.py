"""Proxy fidelity: does the 60-step proxy rank recipes the way a long run does?

The product's premise is that a 60-step proxy culls candidate recipes before a long run, so
its ranking must agree with the long run's. This bench trains a fixed set of recipes spread
across the space (learning rate a decade either way of the baseline's, the three schedules,
weight decay, beta2, warm-up, and a few combinations) on the ``cpu`` preset, each twice:
for ``--short-steps`` (60) and for ``--long-steps`` (1,000), every trial with the same seed,
so all of them see the same batches in the same order from the same initialisation (common
random numbers) and a difference between two recipes is the recipe's.

It prints, per recipe, both val_bpb and both ranks, then:

- Spearman's rank correlation between the short and the long ranking;
- top-3 overlap: how many of the short ranking's best three are among the long ranking's;
- regret: the long-horizon val_bpb of the short ranking's pick minus the best long-horizon
  val_bpb of the set (0 when the proxy picks the long-run winner).

With ``--correct-lr`` it also prints the same figures for a "horizon-corrected" ranking:
each recipe is scored at the short horizon with its learning rate scaled by
``(long / short) ** alpha``: the optimal learning rate falls with the tokens trained
(roughly as ``steps ** -alpha``; Bjorck et al. 2024, arXiv 2409.19913), so a recipe's
learning rate relative to the long run's optimum is what that scaled rate is relative to the
short run's; the corrected short score stands for the recipe's long run. That costs one more
short trial per recipe.

Trials are real trainer subprocesses, one at a time (``--parallel 1``), with ``--threads``
intra-op threads. Results are cached in ``--out`` (a trial whose ``result.json`` exists is
not run again), so an interrupted run resumes, and the table is printed again after every
long trial, over the recipes that have both figures so far. Long trials run in the order
best, worst, second best, second worst, ... of the short ranking, so a run stopped early has
measured the proxy's picks (what regret and top-3 overlap need) and a spread of the rest.

    python bench/fidelity.py [--long-steps 1000] [--short-steps 60] [--threads 1]
                             [--out DIR] [--correct-lr --alpha 0.3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trial_process
from recipelab.recipe import Recipe, proxy_recipe
from recipelab.trainer.spec import TrialResult, TrialSpec

SEED = 0
TOP = 3


def recipes(base: Recipe) -> dict[str, Recipe]:
    """Sixteen recipes spread across the space, named by their edit of the baseline."""
    lr = base.optimizer.lr
    edits: dict[str, dict[str, object]] = {
        "baseline": {},
        "lr/10": {"optimizer.lr": lr / 10},
        "lr/3": {"optimizer.lr": lr / 3},
        "lr*2": {"optimizer.lr": lr * 2},
        "lr*3": {"optimizer.lr": lr * 3},
        "lr*10": {"optimizer.lr": lr * 10},
        "linear": {"schedule.kind": "linear"},
        "wsd": {"schedule.kind": "constant-cooldown"},
        "wd=0": {"optimizer.weight_decay": 0.0},
        "wd=0.3": {"optimizer.weight_decay": 0.3},
        "beta2=0.99": {"optimizer.beta2": 0.99},
        "beta2=0.9": {"optimizer.beta2": 0.9},
        "warmup=0": {"schedule.warmup_steps": 0},
        "warmup=20": {"schedule.warmup_steps": 20},
        "lr/3+wsd": {"optimizer.lr": lr / 3, "schedule.kind": "constant-cooldown"},
        "lr*3+wd=0.3": {"optimizer.lr": lr * 3, "optimizer.weight_decay": 0.3},
    }
    return {name: base.apply({**edit, "seed": SEED}) for name, edit in edits.items()}


def ranks(values: list[float]) -> np.ndarray:
    """Ranks from 1 (lowest value), ties given their mean rank."""
    array = np.asarray(values, dtype=float)
    order = array.argsort(kind="stable")
    result = np.empty(len(array), dtype=float)
    result[order] = np.arange(1, len(array) + 1, dtype=float)
    for value in np.unique(array):
        tied = array == value
        result[tied] = result[tied].mean()
    return result


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rho: the Pearson correlation of the two rankings."""
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


@dataclass(frozen=True)
class Fidelity:
    spearman: float
    top_overlap: int
    regret: float
    pick: str
    best: str


def fidelity(names: list[str], short: list[float], long: list[float]) -> Fidelity:
    """How well the ``short`` scores rank ``names`` by their ``long`` scores."""
    by_short = sorted(range(len(names)), key=lambda i: (short[i], names[i]))
    by_long = sorted(range(len(names)), key=lambda i: (long[i], names[i]))
    top = min(TOP, len(names))
    overlap = len(set(by_short[:top]) & set(by_long[:top]))
    pick, best = by_short[0], by_long[0]
    return Fidelity(spearman=spearman(short, long), top_overlap=overlap,
                    regret=long[pick] - long[best], pick=names[pick], best=names[best])


def trial(recipe: Recipe, steps: int, out: Path, trial_id: str,
          threads: int) -> TrialResult | None:
    """The cached result of ``recipe`` trained for ``steps``, or a fresh trainer run; None
    when the trial did not complete (it then scores ``inf``)."""
    recipe = recipe.model_copy(update={"steps": steps})
    path, spec = out / trial_id / "result.json", out / trial_id / "spec.json"
    if path.is_file() and spec.is_file():
        cached = TrialResult.model_validate_json(path.read_text())
        ran = TrialSpec.model_validate_json(spec.read_text()).recipe
        if cached.status == "complete" and ran == recipe:
            return cached
    try:
        result, wall = trial_process.run(recipe, out, trial_id, threads=threads)
    except RuntimeError as error:  # a diverged or crashed recipe ranks last
        print(f"  {trial_id}: {error}", flush=True)
        return None
    print(f"  {trial_id}: val_bpb {result.val_bpb:.4f} ({wall:.0f} s)", flush=True)
    return result


def from_both_ends(ranked: list[str]) -> list[str]:
    """Best, worst, second best, second worst, ...: the order long trials run in, so that a
    run stopped early has measured the proxy's picks and a spread of the rest."""
    order: list[str] = []
    low, high = 0, len(ranked) - 1
    while low <= high:
        order.append(ranked[low])
        if high != low:
            order.append(ranked[high])
        low, high = low + 1, high - 1
    return order


def score(result: TrialResult | None) -> float:
    return float("inf") if result is None or result.val_bpb is None else result.val_bpb


def slug(name: str) -> str:
    """A trial id for a recipe name: ``lr/3`` and ``lr*3`` must not share a cache entry."""
    name = name.replace("/", "-div").replace("*", "-x").replace("+", "-and-").replace("=", "")
    return "".join(c if c.isalnum() or c == "-" else "_" for c in name)


def print_table(names: list[str], short: dict[str, float], long: dict[str, float],
                corrected: dict[str, float], long_steps: int, short_steps: int) -> None:
    done = [n for n in names if n in short and n in long]
    if len(done) < 2:
        return
    s, lg = [short[n] for n in done], [long[n] for n in done]
    rs, rl = ranks(s), ranks(lg)
    print(f"\n{'recipe':<14} {'@' + str(short_steps):>9} {'rank':>5} "
          f"{'@' + str(long_steps):>9} {'rank':>5}")
    for i, name in enumerate(done):
        print(f"{name:<14} {s[i]:>9.4f} {rs[i]:>5.1f} {lg[i]:>9.4f} {rl[i]:>5.1f}")
    rows = [("plain " + str(short_steps) + "-step", fidelity(done, s, lg))]
    if all(n in corrected for n in done):
        rows.append(("horizon-corrected lr",
                     fidelity(done, [corrected[n] for n in done], lg)))
    print(f"\n{len(done)} recipes, {short_steps} vs {long_steps} steps, seed {SEED} for all")
    print(f"{'ranking':<24} {'spearman':>8} {'top-3':>6} {'regret':>8}  pick -> long best")
    for label, f in rows:
        print(f"{label:<24} {f.spearman:>8.3f} {f.top_overlap:>4}/{min(TOP, len(done))} "
              f"{f.regret:>8.4f}  {f.pick} -> {f.best}")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--short-steps", type=int, default=60)
    parser.add_argument("--long-steps", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--parallel", type=int, default=1, choices=[1],
                        help="trials at a time (one: trials share no core)")
    parser.add_argument("--out", type=Path,
                        default=Path(tempfile.gettempdir()) / "recipelab-fidelity",
                        help="where trials run and their results are cached")
    parser.add_argument("--correct-lr", action="store_true",
                        help="also rank by short trials at a horizon-corrected learning rate")
    parser.add_argument("--alpha", type=float, default=0.3,
                        help="exponent of the horizon rule lr ~ steps ** -alpha")
    args = parser.parse_args()

    base = proxy_recipe(args.preset)
    space = recipes(base)
    names = list(space)
    short: dict[str, float] = {}
    long: dict[str, float] = {}
    corrected: dict[str, float] = {}
    factor = (args.long_steps / args.short_steps) ** args.alpha
    print(f"{len(names)} recipes on the {args.preset} preset; short {args.short_steps} steps, "
          f"long {args.long_steps} steps, {args.threads} thread(s)", flush=True)
    for name in names:
        result = trial(space[name], args.short_steps, args.out, f"s{args.short_steps}-{slug(name)}",
                       args.threads)
        short[name] = score(result)
    if args.correct_lr:
        for name in names:
            recipe = space[name]
            scaled = recipe.apply({"optimizer.lr": recipe.optimizer.lr * factor})
            result = trial(scaled, args.short_steps, args.out,
                           f"c{args.short_steps}-{args.long_steps}-{slug(name)}", args.threads)
            corrected[name] = score(result)
    for name in from_both_ends(sorted(names, key=lambda n: (short[n], n))):
        result = trial(space[name], args.long_steps, args.out, f"l{args.long_steps}-{slug(name)}",
                       args.threads)
        long[name] = score(result)
        print_table(names, short, long, corrected, args.long_steps, args.short_steps)


if __name__ == "__main__":
    main()
