"""How far each rung's learning rate sits from the baseline's best there.

The ladder trains each rung at the horizon rule's rate, ``(steps / proxy steps)^-alpha`` times
the proxy's (alpha's prior 0.32, bounded to [0.1, 0.6]; ``recipelab.trajectory.horizon``), and
the top rung's family at × ½ and × 2 of it. This bench trains the preset's baseline at each
rung of a ladder at the proxy's rate × 1, ½, ¼, ⅛ and 1/16, at ``--seeds`` seeds, on each
corpus, and prints each rung's mean val_bpb by rate, the best, and the rule's prior factor
beside it: a rung whose best sits below the family's reach ranks its candidates at a rate too
hot for all of them. Runs are cached in ``--out``.

    python bench/rate_by_rung.py [--preset tiny] [--rungs 60,180,400] [--seeds 2]
        [--corpus python-docs,python-source] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fidelity
from recipelab.targets import PROXY_PRESETS, proxy_recipe
from recipelab.trainer.spec import CorpusSpec
from recipelab.trajectory.horizon import ALPHA_BOUNDS, PRIOR_ALPHA

MULTIPLES = (1.0, 1 / 2, 1 / 4, 1 / 8, 1 / 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=sorted(PROXY_PRESETS))
    parser.add_argument("--rungs", default="60,180,400", help="the rungs' steps, comma-separated")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--corpus", default="python-docs,python-source")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench-out/rate-by-rung"))
    args = parser.parse_args()
    base = proxy_recipe(args.preset)
    rungs = [int(s) for s in args.rungs.split(",")]

    def run(corpus: str, steps: int, multiple: float, seed: int) -> float:
        recipe = base.apply({"seed": 2000 + seed, "optimizer.lr": base.optimizer.lr * multiple})
        return fidelity.score(fidelity.trial(
            recipe, steps, args.out / corpus, f"{steps}-x{multiple:g}-s{seed}", threads=1,
            corpus=CorpusSpec(source=corpus), tokens_per_step=base.tokens_per_step))

    print(f"{args.preset}: proxy {base.steps} steps at lr {base.optimizer.lr:g}; the rule's "
          f"prior factor (steps / {base.steps})^-{PRIOR_ALPHA} (alpha bounded to {ALPHA_BOUNDS}); "
          f"mean val_bpb of {args.seeds} seeds")
    for corpus in args.corpus.split(","):
        with ThreadPoolExecutor(args.workers) as pool:
            jobs = {(s, m, k): pool.submit(run, corpus, s, m, k)
                    for s in rungs for m in MULTIPLES for k in range(args.seeds)}
            for steps in rungs:
                means = {m: statistics.fmean(jobs[steps, m, k].result()
                                             for k in range(args.seeds)) for m in MULTIPLES}
                best = min(means, key=lambda m: means[m])
                print(f"{corpus} {steps:5d} steps: rule × {(steps / base.steps) ** -PRIOR_ALPHA:.2f};"
                      + "".join(f"  × {m:g} {v:.3f}" for m, v in means.items())
                      + f"  -> best × {best:g}", flush=True)


if __name__ == "__main__":
    main()
