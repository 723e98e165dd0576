"""The noise floor measured: unpaired seed spread against the paired one, and the eval slice's
own sampling error beside both.

Trains the preset's baseline and a few edits of it, each with seeds ``0 .. --seeds - 1``
(real trainer subprocesses, one at a time), records them as a campaign would (the baseline's
seeds, the edits' seed re-runs), and prints what :func:`recipelab.trajectory.noise.noise_floor`
makes of them: the baseline's unpaired seed range, the paired floor's 90% interval, every
edit's gain averaged over its seeds with its paired interval (and whether the unpaired floor
would have called it noise), and the evaluation slice's sampling error beside the floor, as
the report's summary gives it: of val_bpb, and of a gain over the baseline on the same blocks.
``--eval-bytes`` sizes the slice (default: the preset's), to try a size before changing it.

    python bench/noise_floor.py [--preset tiny] [--seeds 3] [--threads 1] [--out DIR]
        [--corpus python-docs] [--eval-bytes N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trial_process
from recipelab.recipe import BASELINE_PROPOSER, Recipe
from recipelab.report.sections import eval_error
from recipelab.targets import PROXY_PRESETS, proxy_recipe
from recipelab.trainer.spec import CorpusSpec
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.noise import SEED_RERUN_PROPOSER, noise_floor, paired_gain
from recipelab.trajectory.record import TrialRecord


def edits(base: Recipe) -> dict[str, dict[str, Any]]:
    lr = base.optimizer.lr
    return {"lr*2": {"optimizer.lr": lr * 2}, "lr/2": {"optimizer.lr": lr / 2},
            "wd=0": {"optimizer.weight_decay": 0.0}, "linear": {"schedule.kind": "linear"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=sorted(PROXY_PRESETS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None,
                        help="where the trials run (default: a temporary directory)")
    parser.add_argument("--corpus", default=CorpusSpec().source,
                        help="a built-in corpus name or a path (default: %(default)s)")
    parser.add_argument("--eval-bytes", type=int, default=None,
                        help="the evaluation slice's size (default: the preset's)")
    args = parser.parse_args()

    base = proxy_recipe(args.preset)
    if args.eval_bytes:
        base = base.model_copy(update={"eval_bytes": args.eval_bytes})
    corpus = CorpusSpec(source=args.corpus)
    recipes = {"baseline": base} | {name: base.apply(e) for name, e in edits(base).items()}
    records: list[TrialRecord] = []
    values: dict[str, list[float]] = {name: [] for name in recipes}
    with tempfile.TemporaryDirectory(prefix="recipelab-noise-") as tmp:
        out = args.out or Path(tmp)
        for index, (name, recipe) in enumerate(recipes.items()):
            for seed in range(args.seeds):
                trial_id = f"p{index:02d}{seed:02d}"
                result, _ = trial_process.run(recipe.apply({"seed": seed}), out, trial_id,
                                              threads=args.threads, corpus=corpus)
                proposer = (BASELINE_PROPOSER if name == "baseline"
                            else SEED_RERUN_PROPOSER if seed else name)
                records.append(TrialRecord(
                    campaign="bench", trial_id=trial_id, status="complete", kind="proxy",
                    proposer=proposer, val_bpb=result.val_bpb,
                    recipe=recipe.apply({"seed": seed}).model_dump(mode="json"),
                    metrics={"val_bpb_stderr": result.val_bpb_stderr,
                             "eval_blocks": result.eval_blocks and result.eval_blocks.model_dump()}))
                values[name].append(float(result.val_bpb or 0.0))
                print(f"  {name} seed {seed}: val_bpb {result.val_bpb:.4f} "
                      f"(slice error ±{result.val_bpb_stderr or 0:.4f})", flush=True)

    floor = noise_floor(records)
    assert floor is not None and floor.paired_spread is not None
    print(f"\n{args.preset} preset on {args.corpus}, {args.seeds} seeds per recipe, "
          f"{base.steps} steps, eval_bytes {base.eval_bytes:,}")
    print(f"unpaired floor (range of the baseline's seeds): {floor.spread:.4f}")
    low, high = floor.noise_quantiles()
    print(f"paired floor, single seed, 90%: [{low:+.4f}, {high:+.4f}] "
          f"from {floor.pairs} paired differences over {floor.recipes} recipes")
    print(eval_error(Ledger(records), floor))
    print(f"\n{'edit':<8} {'gain (mean over seeds) [90%]':<34} {'paired':<10} {'unpaired'}")
    firsts = {r.proposer: r for r in records if r.proposer not in (BASELINE_PROPOSER,
                                                                    SEED_RERUN_PROPOSER)}
    for name in recipes:
        if name == "baseline":
            continue
        gain = paired_gain(firsts[name], records, floor)
        assert gain is not None
        unpaired = "noise" if floor.is_noise(statistics.fmean(values[name])) else "real"
        print(f"{name:<8} {gain.interval_text():<34} {'noise' if gain.is_noise else 'real':<10} "
              f"{unpaired}")


if __name__ == "__main__":
    main()
