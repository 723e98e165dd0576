"""How the best learning rate falls with the model's size, at fixed tokens and batch.

The export carries the campaign's rate from the proxy to the target by Step Law's ratio
(``N^-0.713 · D^0.307``, ``recipelab.transfer.steplaw``). ``bench/transfer.py`` found the exported
rate below the target's best. This bench isolates the ``N`` part of that ratio: the preset's
baseline in the target's family at the proxy's width, twice it and the target
(``recipelab.transfer.width.width_targets``, depth-to-width kept), all at the transfer bench's
tokens, batch (Step Law's at those tokens), context and warm-up fraction, trained at rates × 2
apart from an eighth to four times Step Law's own rate at each size.

Each size's best rate is the minimum of a quadratic in log rate through its best measured rate
and the two beside it: the loss rises slowly below the best and falls off a cliff above it,
so a quadratic through the whole sweep would be pulled toward the cliff. It prints each size's
sweep, its best rate, the exponent those bests give against ``N`` beside Step Law's, and, for
the larger sizes, the rate Step Law's exponent carries from the proxy's width's best over the
measured best. It also checks the export's rule (``recipelab.transfer.size_exponent``): Step
Law's exponent pooled with the one the two smaller sizes' bests give, as the width rung measures
it, carries the proxy's width's best to the target's, against the target's measured best. Runs
are cached in ``--out``, the figures in its ``summary-s<seed>.json``.

    python bench/rate_scaling.py [--tokens 512000] [--seed 0] [--parallel 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recipelab.recipe import Recipe, non_embedding_params
from recipelab.targets import Target, load_target_file, proxy_recipe
from recipelab.trajectory.horizon import best_log_lr
from recipelab.transfer.size_exponent import BestRate, MeasuredExponent, updated
from recipelab.transfer.steplaw import LR_PARAMS_EXPONENT, law_learning_rate
from recipelab.transfer.width import width_targets
from transfer import CORPUS, EVAL_BYTES, PRESET, TARGET, Arm, at_law_batch, final, pretrain

GRID_BASE = 2.5e-4
"""Every size's rates lie on one ladder, ``GRID_BASE × 2^k``, so neighbouring sizes share rates."""
GRID_BELOW, GRID_ABOVE = 8.0, 4.0
"""A size's sweep: the ladder's rates from Step Law's own rate / 8 to × 4."""


def sizes(proxy: Recipe, target: Target) -> list[Target]:
    """The proxy's width, twice it and the target, all in the target's family."""
    narrow, wide = width_targets(proxy.shape, target)
    return [narrow, wide, target]


def baseline_at(proxy: Recipe, size: Target, context: int, tokens: int, out: Path
                ) -> tuple[Path, int]:
    """The preset's baseline at ``size`` as a recipe file, and its batch in sequences: the
    target's context, Step Law's batch at ``tokens``, the preset's warm-up fraction."""
    recipe = at_law_batch(proxy.model_copy(update={
        "shape": size.shape, "seq_len": context, "eval_bytes": EVAL_BYTES}), tokens)
    path = out / f"base-{size.shape.d_model}-{tokens}-{recipe.batch_size}.json"
    path.write_text(json.dumps(Recipe.model_validate(recipe.model_dump()).model_dump(mode="json"),
                               indent=2))
    return path, recipe.batch_size


def grid(law_rate: float) -> list[float]:
    """The ladder's rates within [law_rate / GRID_BELOW, law_rate × GRID_ABOVE]."""
    low = math.ceil(math.log2(law_rate / GRID_BELOW / GRID_BASE) - 1e-9)
    high = math.floor(math.log2(law_rate * GRID_ABOVE / GRID_BASE) + 1e-9)
    return [GRID_BASE * 2.0 ** k for k in range(max(0, low), high + 1)]


def best_rate(sweep: list[tuple[float, float]]) -> tuple[float, bool]:
    """The quadratic's minimum through the best measured rate and its neighbours, and whether
    it is the best measured rate itself, at the sweep's edge."""
    ordered = sorted(sweep)
    i = min(range(len(ordered)), key=lambda k: ordered[k][1])
    if i in (0, len(ordered) - 1):
        return ordered[i][0], True
    placed = best_log_lr(ordered[i - 1:i + 2])
    return (math.exp(placed) if placed is not None else ordered[i][0]), False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=512_000,
                        help="tokens per run (bench/transfer.py's: 5 × its top rung)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parallel", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--out", type=Path, default=Path("bench-rate-scaling"))
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    proxy, target = proxy_recipe(PRESET, str(TARGET)), load_target_file(TARGET)
    plan: list[tuple[Target, list[Arm]]] = []
    for size in sizes(proxy, target):
        recipe, batch = baseline_at(proxy, size, target.context, args.tokens, out)
        law = law_learning_rate(non_embedding_params(size.shape), args.tokens)
        plan.append((size, [Arm(f"w{size.shape.d_model}-d{args.tokens}-b{batch}-lr{lr:g}", recipe,
                                args.seed, lr / proxy.optimizer.lr) for lr in grid(law)]))

    jobs = [arm for _, arms in reversed(plan) for arm in arms]
    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(lambda job: pretrain(job, out / "runs", CORPUS), jobs))

    print(f"the preset's baseline at {args.tokens:,} tokens, seed {args.seed}; val_bpb by rate")
    measured: list[tuple[int, float]] = []
    edges: list[bool] = []
    for size, arms in plan:
        sweep = [(proxy.optimizer.lr * arm.lr_factor, final(out / "runs" / arm.run_name))
                 for arm in arms]
        params = non_embedding_params(size.shape)
        best, edge = best_rate(sweep)
        measured.append((params, best))
        edges.append(edge)
        print(f"  d_model {size.shape.d_model}, {size.shape.n_layer} layers, N {params:,}: "
              + ", ".join(f"{lr:.3g} → {value:.4f}" for lr, value in sweep)
              + f"; best {best:.3g}" + (" (at the sweep's edge)" if edge else ""))
    slope = float(np.polyfit([math.log(n) for n, _ in measured],
                             [math.log(b) for _, b in measured], 1)[0])
    print(f"best rate ∝ N^{slope:.2f} (Step Law: N^{LR_PARAMS_EXPONENT})")
    (n0, b0), *larger = measured
    for n, best in larger:
        carried = b0 * (n / n0) ** LR_PARAMS_EXPONENT
        print(f"  N {n:,} ({n / n0:.0f}× the proxy's width's): Step Law carries the best "
              f"{b0:.3g} to {carried:.3g} = {carried / best:.2f}× the measured best {best:.3g}; "
              f"the measured exponent carries it to {b0 * (n / n0) ** slope / best:.2f}×")
    (n1, b1), (n_target, b_target) = larger[0], larger[-1]
    rule = updated(MeasuredExponent(BestRate(n0, b0, edges[0], 1), BestRate(n1, b1, edges[1], 1)))
    carried = b0 * (n_target / n0) ** rule.value
    print(f"the export's rule: {rule.describe()}; it carries the best {b0:.3g} to {carried:.3g} "
          f"= {carried / b_target:.2f}× the target's measured best {b_target:.3g}")
    (out / f"summary-s{args.seed}.json").write_text(json.dumps(
        {"tokens": args.tokens, "seed": args.seed, "best": measured, "exponent": slope,
         "law_exponent": LR_PARAMS_EXPONENT, "rule": rule.to_json(),
         "rule_over_best": carried / b_target}, indent=2) + "\n")


if __name__ == "__main__":
    main()
