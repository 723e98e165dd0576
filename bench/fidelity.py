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

Two corrections the campaign could make are measured against the plain short ranking, in the
same run:

- **the middle rung**: the short ranking's top ``--rung-size`` recipes train for
  ``--rung-steps`` (default: the geometric mean of short and long) and are re-ranked by the
  rung, either by its last point or by its curve (a power law ``a + b·t^-c`` fitted to the
  second half of its per-step losses, read at the long horizon); the rest keep their short
  order below them;
- **the horizon rule**: the optimal learning rate falls with the tokens trained (roughly as
  ``steps ** -alpha``; Bjorck et al. 2024, arXiv 2409.19913). ``alpha`` is fitted from the
  learning-rate family's short and rung results (the minimum of a quadratic in log lr at
  each horizon), the way a campaign would fit it from its own proxy and rung trials; the
  rung ranking's top three then also train at the long horizon with their learning rate
  scaled by ``(long / short) ** -alpha``, and the regret of the best of three is compared
  with and without the scaling.

**The ladder** (``recipelab.trajectory.ladder``, successive halving with ``--eta``, default
3) is measured beside them at equal compute: every recipe at the short horizon, the best
``1/eta`` (never fewer than 3) at ``short × eta``, the best of those at ``short × eta²``, ...
up to the long horizon, where the top 3 train; the baseline climbs every rung. Its final
ordering is the top rung's by its long val_bpb, then each lower rung's. The old rung is given
the same compute (its size chosen so its rung steps match the ladder's middle rungs) and also
sends its top 3 to the long horizon. The **paired noise floor at the long horizon** comes from
the baseline and the ladder's top 3 trained again at ``--seed + 1``: the 90% single-seed
spread of their paired differences' pooled deviations. A pick's regret within it is noise.

Trials are real trainer subprocesses, one at a time (``--parallel 1``), with ``--threads``
intra-op threads. Results are cached in ``--out`` (a trial whose ``result.json`` exists is
not run again), so an interrupted run resumes, and the table is printed again after every
long trial, over the recipes that have both figures so far. Long trials run in the order
best, worst, second best, second worst, ... of the short ranking, so a run stopped early has
measured the proxy's picks (what regret and top-3 overlap need) and a spread of the rest.

    python bench/fidelity.py [--preset tiny] [--long-steps 1000] [--short-steps 60]
                             [--rung-steps N] [--rung-size 10] [--eta 3]
                             [--corpus python-docs|python-source] [--threads 1] [--out DIR]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trial_process
from recipelab.recipe import Recipe
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import CorpusSpec, TrialResult, TrialSpec
from recipelab.trajectory.horizon import best_log_lr
from recipelab.trajectory.ladder import climbers
from recipelab.trajectory.ladder import rung_steps as ladder_rungs
from recipelab.trajectory.noise import CONFIDENCE, bootstrap_quantiles, pooled_deviations
from recipelab.trajectory.rung import curve_score

TOP = 3


def recipes(base: Recipe, seed: int) -> dict[str, Recipe]:
    """Eighteen recipes spread across the space, named by their edit of the baseline."""
    lr = base.optimizer.lr
    edits: dict[str, dict[str, object]] = {
        "baseline": {},
        "lr/10": {"optimizer.lr": lr / 10},
        "lr/3": {"optimizer.lr": lr / 3},
        "lr*2": {"optimizer.lr": lr * 2},
        "lr*3": {"optimizer.lr": lr * 3},
        "lr*10": {"optimizer.lr": lr * 10},
        "linear": {"schedule.kind": "linear"},
        "wsd": {"schedule.kind": "wsd"},
        "wd=0": {"optimizer.weight_decay": 0.0},
        "wd=0.3": {"optimizer.weight_decay": 0.3},
        "beta2=0.99": {"optimizer.beta2": 0.99},
        "beta2=0.9": {"optimizer.beta2": 0.9},
        "warmup=0": {"schedule.warmup_steps": 0},
        "warmup=20": {"schedule.warmup_steps": 20},
        "lr/3+wsd": {"optimizer.lr": lr / 3, "schedule.kind": "wsd"},
        "lr*3+wd=0.3": {"optimizer.lr": lr * 3, "optimizer.weight_decay": 0.3},
        "z-loss": {"stability.z_loss": 1e-3},
        "init/2": {"stability.init_std": base.stability.init_std / 2},
    }
    return {name: base.apply({**edit, "seed": seed}) for name, edit in edits.items()}


LR_FAMILY = ("lr/10", "lr/3", "baseline", "lr*2", "lr*3", "lr*10")
"""The recipes that differ from the baseline only in learning rate: the horizon rule's data."""


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


def trial(recipe: Recipe, steps: int, out: Path, trial_id: str, threads: int,
          corpus: CorpusSpec | None = None, tokens_per_step: int | None = None) -> TrialResult | None:
    """The cached result of ``recipe`` trained for ``steps`` of the baseline's tokens (whose
    tokens per step are ``tokens_per_step``, by default the recipe's own), or a fresh trainer
    run; None when the trial did not complete (it then scores ``inf``)."""
    recipe = recipe.at_tokens(steps * (tokens_per_step or recipe.tokens_per_step))
    path, spec = out / trial_id / "result.json", out / trial_id / "spec.json"
    if path.is_file() and spec.is_file():
        cached = TrialResult.model_validate_json(path.read_text())
        ran = TrialSpec.model_validate_json(spec.read_text()).recipe
        if cached.status == "complete" and ran == recipe:
            return cached
    try:
        result, wall = trial_process.run(recipe, out, trial_id, threads=threads, corpus=corpus)
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


def rung_order(names: list[str], short: dict[str, float], rung: dict[str, float],
               size: int) -> list[str]:
    """The campaign's order with a middle rung: the short ranking's top ``size`` re-ranked by
    their ``rung`` score, then the rest in their short order."""
    by_short = sorted(names, key=lambda n: (short[n], n))
    top = sorted(by_short[:size], key=lambda n: (rung.get(n, math.inf), n))
    return top + by_short[size:]


@dataclass(frozen=True)
class LadderRun:
    """The ladder's final ordering, the steps it spent, and its rungs' sizes."""

    order: list[str]
    steps: int
    sizes: list[tuple[int, int]]  # (steps, climbing recipes)


def ladder(names: list[str], short: dict[str, float], run_at: dict[int, dict[str, float]],
           short_steps: int, eta: int, top: int = TOP) -> LadderRun:
    """Successive halving over ``names`` as a campaign climbs it: each rung of ``run_at``
    (steps -> scores, the long horizon last) takes the best :func:`climbers` of the one below
    (``top`` at the last), the baseline always beside them; the order is the highest rung's,
    then each lower rung's, then the short ranking's."""
    levels: list[list[str]] = [sorted((n for n in names if n != "baseline"),
                                      key=lambda n: (short[n], n))]
    spent = short_steps * len(names)
    sizes = [(short_steps, len(levels[0]))]
    rungs = sorted(run_at)
    for i, steps in enumerate(rungs):
        below = [m for m in levels[-1] if m != "baseline"]
        n = min(top, len(below)) if i == len(rungs) - 1 else climbers(len(below), eta, top)
        scores = run_at[steps]
        levels.append(sorted([*below[:n], "baseline"], key=lambda m: (scores.get(m, math.inf), m)))
        spent += steps * (n + 1)
        sizes.append((steps, n))
    if len(levels) == 1:
        levels[0] = sorted(names, key=lambda n: (short[n], n))
    order: list[str] = []
    for level in reversed(levels):
        order += [n for n in level if n not in order]
    return LadderRun(order, spent, sizes)


def noise_floor_at(long: dict[str, float], second: dict[str, float]) -> float | None:
    """The 90% single-seed spread of paired gains at the long horizon, from recipes trained
    at two seeds (``long`` and ``second``, the baseline among them)."""
    if "baseline" not in long or "baseline" not in second:
        return None
    gains = {n: {0: long["baseline"] - long[n], 1: second["baseline"] - second[n]}
             for n in second if n != "baseline" and n in long
             and math.isfinite(long[n]) and math.isfinite(second[n])}
    deviations, _, _ = pooled_deviations(gains)
    if not deviations:
        return None
    low, high = bootstrap_quantiles(deviations, 1, (1 - CONFIDENCE) / 2)
    return max(abs(low), abs(high))


def position_scores(order: list[str]) -> dict[str, float]:
    """Scores that rank ``order`` as given (its position), for :func:`fidelity`."""
    return {name: float(i) for i, name in enumerate(order)}


def fit_alpha(lrs: dict[str, float], short: dict[str, float], rung: dict[str, float],
              short_steps: int, rung_steps: int) -> float | None:
    """The horizon rule's exponent: how fast the best learning rate falls from the short to
    the rung horizon, ``ln(lr*_short / lr*_rung) / ln(rung / short)``, clamped to [0, 1]."""
    at_short = best_log_lr([(lrs[n], short[n]) for n in LR_FAMILY if n in short])
    at_rung = best_log_lr([(lrs[n], rung[n]) for n in LR_FAMILY if n in rung])
    if at_short is None or at_rung is None:
        return None
    return min(1.0, max(0.0, (at_short - at_rung) / math.log(rung_steps / short_steps)))


def print_rankings(names: list[str], rows: list[tuple[str, dict[str, float]]],
                   long: dict[str, float], long_steps: int, seed: int) -> None:
    done = [n for n in names if n in long]
    print(f"\n{len(done)} recipes against their {long_steps}-step ranking, seed {seed} for all")
    print(f"{'ranking':<28} {'spearman':>8} {'top-3':>6} {'regret':>8}  pick -> long best")
    for label, scores in rows:
        f = fidelity(done, [scores[n] for n in done], [long[n] for n in done])
        print(f"{label:<28} {f.spearman:>8.3f} {f.top_overlap:>4}/{min(TOP, len(done))} "
              f"{f.regret:>8.4f}  {f.pick} -> {f.best}")
    sys.stdout.flush()


def print_table(names: list[str], columns: list[tuple[str, dict[str, float]]]) -> None:
    print(f"\n{'recipe':<14}" + "".join(f" {label:>9} {'rank':>5}" for label, _ in columns))
    rank_of = [dict(zip(names, ranks([c.get(n, math.inf) for n in names]), strict=True))
               for _, c in columns]
    for name in names:
        print(f"{name:<14}" + "".join(
            f" {c.get(name, math.inf):>9.4f} {r[name]:>5.1f}"
            for (_, c), r in zip(columns, rank_of, strict=True)))


def compare_ladder(args: argparse.Namespace, names: list[str], short: dict[str, float],
                   run: Callable[[str, int, str], TrialResult | None], old_rung_steps: int,
                   space: dict[str, Recipe], out: Path, corpus: CorpusSpec,
                   long: dict[str, float] | None = None) -> None:
    """The plain short ranking, the old rung and the ladder at equal compute, against the
    long ranking, with the paired noise floor at the long horizon (see the module)."""
    # the ladder at the long horizon, and the old rung at the same compute
    middle = ladder_rungs(args.short_steps, args.long_steps, args.eta)[:-1]
    run_at: dict[int, dict[str, float]] = {}
    climbing = [n for n in sorted(names, key=lambda n: (short[n], n)) if n != "baseline"]
    for steps in middle:
        n = climbers(len(climbing), args.eta, TOP)
        run_at[steps] = {m: score(run(m, steps, "k")) for m in ["baseline", *climbing[:n]]}
        climbing = sorted(climbing[:n], key=lambda m: (run_at[steps][m], m))
    if long is None:  # ground truth: every recipe at the long horizon, picks first
        long = {n: score(run(n, args.long_steps, "l"))
                for n in from_both_ends(sorted(names, key=lambda n: (short[n], n)))}
    run_at[args.long_steps] = long
    climbed = ladder(names, short, run_at, args.short_steps, args.eta)
    middle_steps = climbed.steps - args.short_steps * len(names) - args.long_steps * (TOP + 1)
    equal = max(TOP, min(len(names), round(middle_steps / old_rung_steps)))
    by_short = sorted(names, key=lambda n: (short[n], n))
    rung = {n: score(run(n, old_rung_steps, "r")) for n in by_short[:equal]}
    old = rung_order(names, short, rung, equal)
    old = sorted(old[:TOP], key=lambda n: (long[n], n)) + old[TOP:]
    old_steps = args.short_steps * len(names) + old_rung_steps * equal + args.long_steps * TOP
    second_seed = {n: score(trial(space[n].apply({"seed": args.seed + 1}), args.long_steps, out,
                                  f"l{args.long_steps}-{slug(n)}-seed{args.seed + 1}",
                                  args.threads, corpus))
                   for n in ["baseline", *[m for m in climbed.order[:TOP + 1] if m != "baseline"][:TOP]]}
    floor = noise_floor_at(long, second_seed)
    print(f"\nat equal compute, against the {args.long_steps}-step ranking "
          f"({args.preset} preset, corpus {args.corpus}, seed {args.seed}); paired noise floor at "
          f"{args.long_steps} steps: " + ("unmeasured" if floor is None else f"{floor:.4f}"))
    print("  ladder rungs (steps x climbers): "
          + " -> ".join(f"{s} x{n}" for s, n in climbed.sizes) + " (+ the baseline)")
    print(f"{'ranking':<30} {'steps':>7} {'spearman':>8} {'top-3':>6} {'regret':>8} "
          f"{'in noise':>8}  pick -> long best")
    for label, order, spent in (
            (f"plain {args.short_steps}-step", sorted(names, key=lambda n: (short[n], n)),
             args.short_steps * len(names)),
            (f"old rung top-{equal} @{old_rung_steps}", old, old_steps),
            (f"ladder eta {args.eta}", climbed.order, climbed.steps)):
        f = fidelity(names, [position_scores(order)[n] for n in names], [long[n] for n in names])
        within = "-" if floor is None else ("yes" if f.regret <= floor else "no")
        print(f"{label:<30} {spent:>7} {f.spearman:>8.3f} {f.top_overlap:>4}/{TOP} "
              f"{f.regret:>8.4f} {within:>8}  {f.pick} -> {f.best}")
    sys.stdout.flush()



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--short-steps", type=int, default=60)
    parser.add_argument("--long-steps", type=int, default=1000)
    parser.add_argument("--rung-steps", type=int, default=None,
                        help="the middle rung's steps (default: geometric mean of short, long)")
    parser.add_argument("--rung-size", type=int, default=10)
    parser.add_argument("--eta", type=int, default=3, help="the ladder's halving factor")
    parser.add_argument("--recipes", type=int, default=None,
                        help="only the first N recipes of the set (a smaller, faster run)")
    parser.add_argument("--ladder-only", action="store_true",
                        help="only the plain ranking, the old rung and the ladder at equal "
                        "compute (skips every recipe at the rung's steps and the horizon rule)")
    parser.add_argument("--corpus", default="python-docs",
                        help="python-docs (the built-in text), python-source, or a path")
    parser.add_argument("--eval-bytes", type=int, default=32_768,
                        help="evaluation slice (at least the preset's), the same at every horizon")
    parser.add_argument("--seed", type=int, default=0, help="the training seed of every trial")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path,
                        default=Path(tempfile.gettempdir()) / "recipelab-fidelity",
                        help="where trials run and their results are cached")
    args = parser.parse_args()
    rung_steps = args.rung_steps or round(math.sqrt(args.short_steps * args.long_steps))

    base = proxy_recipe(args.preset)
    base = base.apply({"eval_bytes": max(base.eval_bytes, args.eval_bytes)})
    space = recipes(base, args.seed)
    names = list(space)[:args.recipes]
    corpus = CorpusSpec(source=args.corpus)
    out = args.out / f"{args.preset}-{slug(args.corpus)}-seed{args.seed}"
    print(f"{len(names)} recipes on the {args.preset} preset: {args.short_steps}, {rung_steps} "
          f"and {args.long_steps} steps, {args.threads} thread(s), eval {base.eval_bytes:,} B",
          flush=True)

    def run(name: str, steps: int, prefix: str, recipe: Recipe | None = None) -> TrialResult | None:
        return trial(recipe or space[name], steps, out, f"{prefix}{steps}-{slug(name)}",
                     args.threads, corpus)

    short = {n: score(run(n, args.short_steps, "s")) for n in names}
    if args.ladder_only:
        compare_ladder(args, names, short, run, rung_steps, space, out, corpus)
        return
    rung_results = {n: run(n, rung_steps, "r") for n in names}
    rung = {n: score(r) for n, r in rung_results.items()}
    predicted = {n: None if r is None else curve_score(r.losses, args.long_steps)
                 for n, r in rung_results.items()}
    curve = {n: math.inf if p is None else p for n, p in predicted.items()}
    lrs = {n: space[n].optimizer.lr for n in names}
    alpha = fit_alpha(lrs, short, rung, args.short_steps, rung_steps)
    print(f"\nhorizon rule fitted from the learning-rate family at {args.short_steps} and "
          f"{rung_steps} steps: alpha = {'none (no minimum)' if alpha is None else f'{alpha:.3f}'}")

    with_rung = rung_order(names, short, rung, args.rung_size)
    with_curve = rung_order(names, short, curve, args.rung_size)
    long: dict[str, float] = {}
    for name in from_both_ends(with_rung):
        long[name] = score(run(name, args.long_steps, "l"))
    compare_ladder(args, names, short, run, rung_steps, space, out, corpus, long)
    rows = [(f"plain {args.short_steps}-step", short),
            (f"rung top-{args.rung_size}, last point", position_scores(with_rung)),
            (f"rung top-{args.rung_size}, curve", position_scores(with_curve)),
            (f"all at {rung_steps} steps", rung)]
    print_table(names, [(f"@{args.short_steps}", short), (f"@{rung_steps}", rung),
                        ("curve", curve), (f"@{args.long_steps}", long)])
    print_rankings(names, rows, long, args.long_steps, args.seed)

    best_long = min(long.values())
    factor = (args.long_steps / args.short_steps) ** -(alpha or 0.0)
    print(f"\nstress candidates (the rung's top {TOP}) at {args.long_steps} steps, as found and "
          f"with lr x {factor:.3f}; regret against the best of the {len(names)}:")
    scaled: dict[str, float] = {}
    for name in with_rung[:TOP]:
        recipe = space[name].apply({"optimizer.lr": space[name].optimizer.lr * factor})
        scaled[name] = long[name] if factor == 1.0 else score(run(name, args.long_steps, "h", recipe))
        print(f"  {name:<14} {long[name]:.4f} -> {scaled[name]:.4f}")
    print(f"  best of {TOP}: as found regret {min(long[n] for n in scaled) - best_long:+.4f}, "
          f"horizon-scaled regret {min(scaled.values()) - best_long:+.4f}")


if __name__ == "__main__":
    main()
