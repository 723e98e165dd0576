"""Proxy substitution, verified: the exported winner trained at a target four times wider.

The product's claim is that a recipe that wins on the proxy still wins on the target and that
the target's val_bpb lands near the prediction. This bench measures both, end to end, through
the user's commands. For each of ``--campaigns`` campaign seeds (from ``--from-seed``, so
``--from-seed 1 --campaigns 2`` runs campaign 1 alone) it runs

1. ``recipelab run`` on the ``tiny`` proxy of ``bench/transfer-target/config.json`` (a Llama
   config 4× the proxy's ``d_model`` at the proxy's depth-to-width ratio: 8 layers × 256, 5.87M
   parameters, 63× the proxy's non-embedding parameters), on ``python-source``;
2. ``recipelab export --device cpu --gpus 1`` of the recommendation and of the baseline
   (``--trial p0000``, the same rules), at ``--horizon`` × the campaign's top-rung tokens;
3. ``recipelab pretrain`` of each arm at the target, all at the same tokens:

   - ``recommended``: the exported recommendation, ``--seeds`` seeds;
   - ``baseline``: the exported baseline, ``--seeds`` seeds;
   - ``law``: no campaign at all: the preset's baseline with Step Law's rate and batch at the
     target's scale, unanchored (one arm for every campaign, ``--seeds`` seeds);
   - ``lr×f``: the recommendation at its exported rate × ``f`` for each ``--sweep`` factor,
     seed 0, to find where the target's best rate is (the quadratic's minimum in log rate);
     the same sweep at twice the proxy's width, a second size at which the exported rate can
     be compared with the best;
   - ``baseline-lr×f`` and ``lr×f`` at every seed, for each ``--both-at`` factor: the
     recommendation and the baseline both moved toward the target's best rate, to see whether
     the recommendation's gain is its recipe's or only its rate's;
   - ``width-64``, ``width-128``: the recommendation exported to the proxy's width and to
     twice it, at the target's tokens and at the top rung's (``-top``), for the size gap;

4. the recommendation's and the baseline's last evaluation against their exported
   prediction (``recipelab verify`` reads the same ``prediction.json``).
5. the winner's and the baseline's best rates in their top-rung families (read from the
   campaign, nothing trained): what the export anchored at the winner's best would give, and
   the size exponent that would carry that best to the target's.

It prints each arm's mean val_bpb and seed spread, the recommendation's gain over the baseline
and the law with the paired per-seed gains, the prediction error |predicted − measured| /
measured, the factor between the exported rate and the sweep's best, and how many arms were
already in the order they end in at each evaluation against their rate × each ``--both-at``
factor (whether an early comparison could choose the rate). A campaign that kept the baseline
(the check one size up, or the top rung, named no pick: ``kept_baseline`` in the manifest)
exports the baseline as its recommendation; the rank bar counts the campaigns that named a
winner. Every campaign and run is cached
in ``--out`` (a run whose recipe is unchanged is not trained again), so an interrupted bench
resumes, and an export rule changed since is re-measured.

``--ship`` writes the distance every campaign reached, with these bars, to the package's
``transfer/verified_transfer.json``: every export prints it beside its own distance, and warns
beyond it.

``--target`` and ``--corpus`` run the same bench on another shape and text (each in its own
``--out``), so that a rule is not judged only on the case it was written against.

    python bench/transfer.py [--target CONFIG] [--corpus NAME] [--campaigns 3] [--seeds 2]
                             [--from-seed 0] [--horizon 5] [--stress-steps 200] [--iterations 8]
                             [--both-at 2] [--parallel 2] [--device cpu|cuda]
                             [--out DIR] [--ship]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from recipelab.errors import RecipelabError
from recipelab.recipe import Recipe, non_embedding_params
from recipelab.targets import load_target_file, proxy_recipe
from recipelab.trainer.data import read_corpus_text
from recipelab.trainer.spec import CorpusSpec
from recipelab.trajectory.horizon import best_log_lr, best_rate, families
from recipelab.trajectory.record import TrialRecord
from recipelab.transfer.distance import PREDICTION_BAR, VERIFIED_PATH, Distance, Verified
from recipelab.transfer.prediction import Prediction, bytes_per_token
from recipelab.transfer.steplaw import (
    LR_PARAMS_EXPONENT,
    LR_TOKENS_EXPONENT,
    law_batch_tokens,
    law_learning_rate,
)
from recipelab.transfer.verify import read_evaluations, verify
from recipelab.transfer.width import WIDTH_ALPHA, width_targets

HERE = Path(__file__).resolve().parent
TARGET = HERE / "transfer-target" / "config.json"
PRESET = "tiny"
CORPUS = "python-source"
EVALUATIONS = 8
EVAL_BYTES = 65_536
RATE_BAR = 2.0
"""The exported rate should lie within this factor of the target's best."""


@dataclass(frozen=True)
class Arm:
    """One pretrain at the target: a recipe file, its overrides and its seed."""

    name: str
    recipe: Path
    seed: int
    lr_factor: float = 1.0

    @property
    def run_name(self) -> str:
        return f"{self.name}-s{self.seed}"


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "recipelab", *args]


def call(command: Sequence[str], log: Path) -> None:
    """Run ``command`` with its output in ``log``; a failure stops the bench with the log."""
    with log.open("w") as handle:
        done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}); see {log}")


def campaign(out: Path, seed: int, args: argparse.Namespace) -> Path:
    """The finished campaign of ``seed``, run unless a finished one is cached."""
    where = out / f"campaign-{seed}"
    events = where / "events.jsonl"
    if events.exists() and "campaign_finished" in events.read_text():
        return where
    if where.exists():
        for path in sorted(where.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        where.rmdir()
    print(f"campaign {seed}: running", flush=True)
    call(cli("run", "--dir", str(where), "--preset", PRESET, "--target", str(args.target),
             "--corpus", args.corpus, "--iterations", str(args.iterations), "--stress-steps",
             str(args.stress_steps), "--seed", str(seed)), out / f"campaign-{seed}.log")
    return where


def export(where: Path, tokens: int, campaign_target: Path, trial: str | None = None,
           target: Path | None = None, name: str = "") -> Path:
    """The campaign (run for ``campaign_target``) exported to ``target`` (the campaign's own
    when None) at ``tokens`` (always redone: it is cheap and an export rule may have changed
    since the cache was written)."""
    name = name or ("export-baseline" if trial else "export-recommended")
    target = target or campaign_target
    recipe = proxy_recipe(PRESET, str(campaign_target))
    shape = load_target_file(target)
    params = recipe.model_copy(update={"shape": shape.shape, "seq_len": shape.context}).param_count()
    command = cli("export", str(where), "--out", str(where / name), "--device", "cpu", "--gpus",
                  "1", "--tokens-per-param", repr(tokens / params), "--eval-bytes", str(EVAL_BYTES),
                  "--target", str(target))
    call([*command, *(("--trial", trial) if trial else ())], where / f"{name}.log")
    return where / name


def width_target(out: Path, multiple: int, target: Path) -> Path:
    """The width rung's model at ``multiple`` (1 or 2) × the proxy's width and depth
    (:func:`~recipelab.transfer.width.width_targets`), as a target file."""
    narrow, wide = width_targets(proxy_recipe(PRESET, str(target)).shape, load_target_file(target))
    size = narrow if multiple == 1 else wide
    path = out / f"width-{size.shape.d_model}.json"
    path.write_text(json.dumps({"name": path.stem, "context": size.context,
                                "shape": size.shape.model_dump(mode="json")}, indent=2) + "\n")
    return path


def at_law_batch(recipe: Recipe, tokens: int) -> Recipe:
    """``recipe`` trained on ``tokens`` at Step Law's global batch there (whole sequences of
    its context, no accumulation), its warm-up the same fraction of the run."""
    batch = max(1, round(law_batch_tokens(tokens) / recipe.seq_len))
    steps = math.ceil(tokens / (batch * recipe.seq_len))
    warmup = max(1, round(recipe.schedule.warmup_steps * steps / recipe.steps))
    return recipe.model_copy(update={
        "batch_size": batch, "grad_accum": 1, "steps": steps,
        "schedule": recipe.schedule.model_copy(update={"warmup_steps": warmup})})


def law_recipe(out: Path, baseline: Path, tokens: int) -> Path:
    """The exported baseline (the preset's knobs through the export's rules) with Step Law's
    own rate and batch at the target, unanchored: what a user without a campaign would run."""
    recipe = at_law_batch(Recipe.model_validate_json(baseline.read_text()), tokens)
    lr = law_learning_rate(non_embedding_params(recipe.shape), tokens)
    recipe = recipe.model_copy(update={"optimizer": recipe.optimizer.model_copy(update={"lr": lr})})
    path = out / "law-recipe.json"
    path.write_text(json.dumps(Recipe.model_validate(recipe.model_dump()).model_dump(mode="json"),
                               indent=2) + "\n")
    return path


def pretrain(arm: Arm, runs: Path, corpus: str, device: str = "cpu") -> Path:
    """``arm`` trained at the target on ``device``; cached while its recipe and overrides are
    unchanged. On ``cpu`` each arm has one thread, so ``--parallel`` arms share the cores."""
    where = runs / arm.run_name
    recipe = json.loads(arm.recipe.read_text())
    lr = recipe["optimizer"]["lr"] * arm.lr_factor
    spec = {"recipe": recipe, "seed": arm.seed, "lr": lr}
    marker = where / "bench-spec.json"
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return where
    every = max(1, math.ceil(recipe["steps"] / EVALUATIONS))
    shutil.rmtree(where, ignore_errors=True)  # an interrupted run's checkpoints start afresh
    where.mkdir(parents=True)
    call(cli("pretrain", "--recipe", str(arm.recipe), "--out", str(where), "--corpus", corpus,
             "--device", device, *(("--threads", "1") if device == "cpu" else ()),
             "--no-compile", "--checkpoint-every", "0",
             "--eval-every", str(every), "--set", f"seed={arm.seed}",
             "--set", f"optimizer.lr={lr!r}"), where / "pretrain.log")
    marker.write_text(json.dumps(spec) + "\n")
    print(f"  trained {runs.parent.name}/{arm.run_name}: {final(where):.4f}", flush=True)
    return where


def final(run: Path) -> float:
    return read_evaluations(run / "metrics.csv")[-1][2]


def spread(values: Sequence[float]) -> float:
    return max(values) - min(values) if len(values) > 1 else float("nan")


def beyond_spread(gain: Sequence[float], *arms: Sequence[float]) -> bool:
    """The bench's bar: every per-seed gain exceeds every arm's seed spread."""
    return min(gain) > max(spread(arm) for arm in arms)


def prediction_error(export_dir: Path, run: Path) -> tuple[float, float, str]:
    """(predicted, measured, verdict) at the run's last evaluation."""
    prediction = Prediction.from_json(json.loads((export_dir / "prediction.json").read_text()))
    checked = verify(prediction, read_evaluations(run / "metrics.csv"))
    last = checked.points[-1]
    return last.predicted, last.measured, checked.verdict


def rate_sweep(runs: Path, base: str, prefix: str, factors: Sequence[float]
               ) -> tuple[list[tuple[float, float]], float, float]:
    """(rate, val_bpb) of ``base`` at seed 0 and at its rate × each factor, the exported
    rate, and the best rate: the minimum of a quadratic in log rate, else the best measured."""
    swept = [runs / f"{base}-s0", *(runs / f"{prefix}lr×{f:g}-s0" for f in factors)]
    sweep = [(json.loads((run / "bench-spec.json").read_text())["lr"], final(run))
             for run in swept]
    best = best_log_lr(sweep)
    best_lr = math.exp(best) if best is not None else min(sweep, key=lambda p: p[1])[0]
    return sweep, sweep[0][0], best_lr


def proxy_best_anchor(campaign_dir: Path, manifest: dict[str, Any], best_lr: float
                      ) -> dict[str, Any]:
    """What anchoring the export at the proxy's best rate would give, read from the
    campaign's own top-rung families (no run is trained for it): the winner's and the
    baseline's best there (the quadratic's vertex in log rate, ``edge`` when the best is the
    family's lowest or highest rate), the winner's exported rate moved by its best ÷ the rate
    it was measured at, that rate ÷ the target's best, and the size exponent that would
    carry the winner's best to the target's exactly (with Step Law's token exponent)."""
    records = [TrialRecord.model_validate_json(line) for line in
               (campaign_dir / "trajectory.jsonl").read_text().splitlines() if line.strip()]
    law = manifest["law"]
    top = max(r.budget_steps for r in records if r.kind == "stress")
    found = families(records)
    best: dict[str, dict[str, Any]] = {}
    for who in (manifest["winner"], "p0000"):
        placed = best_rate(found.get(who, {}).get(top, []))
        if placed is not None:
            best[who] = {"lr": placed[0], "edge": placed[1]}
    row: dict[str, Any] = {"top_steps": top, "best": best}
    winner = best.get(manifest["winner"])
    if winner is not None:
        moved = law["target"]["lr"] * winner["lr"] / law["proxy"]["measured_lr"]
        n = law["target"]["params"] / law["proxy"]["params"]
        d = law["target"]["tokens"] / law["proxy"]["tokens"]
        row.update(anchored_lr=moved, anchored_factor=moved / best_lr, implied_exponent=(
            math.log(best_lr / winner["lr"]) - LR_TOKENS_EXPONENT * math.log(d)) / math.log(n))
    return row


def anchor_text(row: dict[str, Any], winner: str) -> str:
    best = "; ".join(f"{who} {b['lr']:.3g}{' (the family edge)' if b['edge'] else ''}"
                     for who, b in row["best"].items())
    text = f"the proxy's best rates at its top rung ({row['top_steps']} steps): {best or 'none'}"
    if "anchored_lr" not in row:
        return text + f"; {winner} has no family there, so no anchor at its best"
    return (text + f"; anchored at {winner}'s best the export would be {row['anchored_lr']:.3g} "
            f"= {row['anchored_factor']:.2f}× the target's best; the size exponent that "
            f"carries it to the target's best: {row['implied_exponent']:.3f} "
            f"(Step Law {LR_PARAMS_EXPONENT})")


def both_moved(runs: Path, factor: float, seeds: int) -> dict[str, Any]:
    """The recommendation and the baseline, both at their exported rate × ``factor``, per seed:
    their scores, the paired gains, and whether every gain exceeds both seed spreads."""
    rec = [final(runs / f"lr×{factor:g}-s{s}") for s in range(seeds)]
    base = [final(runs / f"baseline-lr×{factor:g}-s{s}") for s in range(seeds)]
    gain = [b - r for r, b in zip(rec, base, strict=True)]
    return {"recommended": rec, "baseline": base, "gain": gain,
            "beats": beyond_spread(gain, rec, base)}


def early_order(runs: Path, factor: float, seeds: int) -> list[list[bool]]:
    """For each pair of one arm and seed at the exported rate and at the rate × ``factor``
    (the recommendation and the baseline, every seed), whether each evaluation put the two in
    the order they end in. It says how early a cloud run could choose its rate between two
    arms."""
    pairs = [(runs / f"{name}-s{s}", runs / f"{moved}lr×{factor:g}-s{s}")
             for name, moved in (("recommended", ""), ("baseline", "baseline-"))
             for s in range(seeds)]
    agree = []
    for at, moved in pairs:
        base = [v for _, _, v in read_evaluations(at / "metrics.csv")]
        other = [v for _, _, v in read_evaluations(moved / "metrics.csv")]
        ends_lower = other[-1] < base[-1]
        agree.append([(o < b) == ends_lower for b, o in zip(base, other, strict=True)])
    return agree


def size_gap(runs: Path, widths: Sequence[Path], seeds: int, suffix: str = ""
             ) -> tuple[list[tuple[int, float]], float, float]:
    """The recommendation's mean val_bpb at each width, and ``A`` and ``E`` of
    ``L = E + A·N^-α`` (α from the literature) through the two widths."""
    measured = []
    for width in widths:
        shape = load_target_file(width).shape
        values = [final(runs / f"{width.stem}{suffix}-s{s}") for s in range(seeds)]
        measured.append((non_embedding_params(shape), statistics.mean(values)))
    (n1, l1), (n2, l2) = measured
    slope = (l1 - l2) / (n1 ** -WIDTH_ALPHA - n2 ** -WIDTH_ALPHA)
    return measured, slope, l1 - slope * n1 ** -WIDTH_ALPHA


def width_ladder(runs: Path, widths: Sequence[Path], seeds: int, target_value: float,
                 recommended: Path, target: Path) -> dict[str, Any]:
    """What a ladder of proxy widths would predict for the target.

    - ``predicted``: the recommendation at the proxy's width and at twice it, trained at the
      target's tokens, through ``L = E + A·N^-α`` (α from the literature) read at the target;
    - ``predicted_from_top``: what a campaign could do, the same two widths at the top rung's
      tokens: their gap sets ``A``, which Chinchilla's form keeps at every token count, so
      the target is the proxy's curve at the target's tokens less ``A·(N_p^-α - N_t^-α)``;
    - ``proxy_curve``: the proxy's own curve extrapolated to the target's tokens, against the
      proxy trained there (``measured[0]``)."""
    measured, slope, floor = size_gap(runs, widths, seeds)
    top, top_slope, _ = size_gap(runs, widths, seeds, "-top")
    n_proxy = measured[0][0]
    n_target = non_embedding_params(load_target_file(target).shape)
    predicted = floor + slope * n_target ** -WIDTH_ALPHA
    prediction = Prediction.from_json(json.loads((recommended / "prediction.json").read_text()))
    end = read_evaluations(runs / "recommended-s0" / "metrics.csv")[-1][1]
    curve = prediction.proxy_center(end)
    from_top = curve - top_slope * (n_proxy ** -WIDTH_ALPHA - n_target ** -WIDTH_ALPHA)
    return {"measured": [*measured, (n_target, target_value)], "predicted": predicted,
            "error": abs(predicted - target_value) / target_value,
            "at_top": top, "predicted_from_top": from_top,
            "error_from_top": abs(from_top - target_value) / target_value,
            "proxy_curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=Path, default=TARGET,
                        help="the target's config.json (another shape than the bench's own)")
    parser.add_argument("--corpus", default=CORPUS,
                        help="what every campaign and arm trains on, as 'recipelab run' takes it")
    parser.add_argument("--campaigns", type=int, default=3)
    parser.add_argument("--from-seed", type=int, default=0,
                        help="the first campaign seed to run (seeds --from-seed to --campaigns - 1)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--horizon", type=float, default=5.0,
                        help="target tokens as a multiple of the campaign's top-rung tokens")
    parser.add_argument("--stress-steps", type=int, default=200)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--sweep", type=float, nargs="+", default=[0.25, 0.5, 2.0, 4.0])
    parser.add_argument("--both-at", type=float, nargs="*", default=[2.0],
                        help="rate factors at which the recommendation and the baseline both "
                             "train every seed")
    parser.add_argument("--parallel", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the arms train; the campaigns run where 'recipelab run' "
                             "picks")
    parser.add_argument("--out", type=Path, default=Path("bench-transfer"))
    parser.add_argument("--ship", action="store_true",
                        help="write the distance every campaign reached, with the bars, to the "
                             "package's verified_transfer.json: every export prints it")
    args = parser.parse_args()
    try:  # a wrong --target or --corpus is one line and exit 2, before anything is written
        preset = proxy_recipe(PRESET, str(args.target))
        target = load_target_file(args.target)
        label, _, train_bytes = read_corpus_text(CorpusSpec(source=args.corpus))
    except RecipelabError as error:
        parser.error(str(error))
    if args.parallel < 1:
        parser.error(f"--parallel {args.parallel} trains nothing: it must be at least 1")
    if not 0 <= args.from_seed < args.campaigns:
        parser.error(f"--from-seed {args.from_seed} runs no campaign: it must be at least 0 and "
                     f"below --campaigns ({args.campaigns})")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    params = preset.model_copy(update={"shape": target.shape, "seq_len": target.context}
                               ).param_count()
    top = args.stress_steps * preset.tokens_per_step
    tokens = round(args.horizon * top)
    print(f"target {target.name}: {params:,} parameters ({non_embedding_params(target.shape):,} "
          f"non-embedding, {non_embedding_params(target.shape) / non_embedding_params(preset.shape):.0f}× "
          f"the proxy's); {tokens:,} tokens = {tokens / params:.3f} per parameter, "
          f"{args.horizon:g}× the top rung's {args.stress_steps * preset.tokens_per_step:,}",
          flush=True)

    passes = tokens * bytes_per_token(preset) / train_bytes
    print(f"corpus {label}: {train_bytes:,} bytes of training text; the longest arm reads "
          f"{passes:.2f} of it" + (", more than once: its later passes score memorised text"
                                   if passes > 1 else ", once"), flush=True)

    campaigns = [campaign(out, seed, args)
                 for seed in range(args.from_seed, args.campaigns)]
    exports = {c: (export(c, tokens, args.target), export(c, tokens, args.target, "p0000"))
               for c in campaigns}
    widths = [width_target(out, 1, args.target), width_target(out, 2, args.target)]  # the proxy's, then 2× it
    law = law_recipe(out, exports[campaigns[0]][1] / "recipe.json", tokens)
    jobs: list[tuple[Arm, Path]] = [(Arm("law", law, s), out / "runs") for s in range(args.seeds)]
    for c, (recommended, baseline) in exports.items():
        runs = c / "runs"
        jobs += [(Arm("recommended", recommended / "recipe.json", 0), runs),
                 (Arm("baseline", baseline / "recipe.json", 0), runs)]
        jobs += [(Arm(f"lr×{f:g}", recommended / "recipe.json", 0, f), runs) for f in args.sweep]
        middle = export(c, tokens, args.target, target=widths[1], name=f"export-{widths[1].stem}")
        jobs += [(Arm(f"{widths[1].stem}-lr×{f:g}", middle / "recipe.json", 0, f), runs)
                 for f in args.sweep]
        jobs += [(Arm(name, where / "recipe.json", s), runs) for s in range(1, args.seeds)
                 for name, where in (("recommended", recommended), ("baseline", baseline))]
        jobs += [(Arm(name, where / "recipe.json", s, f), runs) for f in args.both_at
                 for s in range(args.seeds)
                 for name, where in ((f"lr×{f:g}", recommended), (f"baseline-lr×{f:g}", baseline))
                 if not (s == 0 and name == f"lr×{f:g}" and f in args.sweep)]
        for width in widths:
            exported = export(c, tokens, args.target, target=width, name=f"export-{width.stem}")
            jobs += [(Arm(width.stem, exported / "recipe.json", s), runs) for s in range(args.seeds)]
            at_top = export(c, top, args.target, target=width, name=f"export-{width.stem}-top")
            jobs += [(Arm(f"{width.stem}-top", at_top / "recipe.json", s), runs)
                     for s in range(args.seeds)]
    jobs.sort(key=lambda job: job[0].seed)  # every campaign's seed 0 first
    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(lambda job: pretrain(job[0], job[1], args.corpus, args.device), jobs))

    law_runs = [final(out / "runs" / f"law-s{s}") for s in range(args.seeds)]
    summary = {"target": target.name, "corpus": args.corpus, "corpus_passes": passes,
               "params": params, "tokens": tokens,
               "law": {"val_bpb": law_runs}, "campaigns": []}
    early: dict[float, list[list[bool]]] = {}
    print(f"\nlaw's default (no campaign): {statistics.mean(law_runs):.4f} "
          f"(spread {spread(law_runs):.4f})")
    for c, (recommended, baseline) in exports.items():
        runs = c / "runs"
        rec = [final(runs / f"recommended-s{s}") for s in range(args.seeds)]
        base = [final(runs / f"baseline-s{s}") for s in range(args.seeds)]
        over_base = [b - r for r, b in zip(rec, base, strict=True)]
        over_law = [w - r for r, w in zip(rec, law_runs, strict=True)]
        sweep, exported_lr, best_lr = rate_sweep(runs, "recommended", "", args.sweep)
        middle_sweep, middle_lr, middle_best = rate_sweep(runs, widths[1].stem,
                                                          f"{widths[1].stem}-", args.sweep)
        predicted, _, verdict = prediction_error(recommended, runs / "recommended-s0")
        measured = statistics.mean(rec)
        ladder = width_ladder(runs, widths, args.seeds, measured, recommended, args.target)
        b_predicted, b_measured, b_verdict = prediction_error(baseline, runs / "baseline-s0")
        both_at = {f: both_moved(runs, f, args.seeds) for f in args.both_at}
        for f in args.both_at:
            early.setdefault(f, []).extend(early_order(runs, f, args.seeds))
        manifest = json.loads((recommended / "manifest.json").read_text())
        row = {"campaign": c.name, "winner": manifest["winner"],
               "kept_baseline": bool(manifest.get("kept_baseline")),
               "recommended": rec, "baseline": base,
               "gain_over_baseline": over_base, "gain_over_law": over_law,
               "beats_baseline": beyond_spread(over_base, rec, base),
               "beats_law": beyond_spread(over_law, rec, law_runs),
               "exported_lr": exported_lr, "sweep": sweep, "best_lr": best_lr,
               "lr_factor": best_lr / exported_lr,
               "twice_the_proxy_width": {"sweep": middle_sweep, "exported_lr": middle_lr,
                                         "best_lr": middle_best,
                                         "lr_factor": middle_best / middle_lr},
               "predicted": predicted, "measured": measured, "verdict": verdict,
               "prediction_error": abs(predicted - measured) / measured,
               "baseline_predicted": b_predicted, "baseline_measured": b_measured,
               "baseline_verdict": b_verdict,
               "baseline_prediction_error": abs(b_predicted - b_measured) / b_measured,
               "width_ladder": ladder, "both_at": both_at,
               "size_exponent": manifest.get("size_exponent"),
               "proxy_best": proxy_best_anchor(c, manifest, best_lr),
               "distance": manifest["distance"], "code_version": manifest["code_version"]}
        summary["campaigns"].append(row)
        print(f"\n{c.name} (" + (f"kept the baseline: {manifest['chosen_because']}"
                                 if row["kept_baseline"] else
                                 f"winner {manifest['winner']}, {manifest['recommended']}") + "):")
        print(f"  recommended {statistics.mean(rec):.4f} (spread {spread(rec):.4f}), "
              f"baseline {statistics.mean(base):.4f} (spread {spread(base):.4f})")
        print(f"  gain over the baseline per seed {', '.join(f'{g:+.4f}' for g in over_base)}; "
              f"over the law's default {', '.join(f'{g:+.4f}' for g in over_law)}")
        print("  rate sweep (seed 0): " + ", ".join(f"{lr:.3g} → {v:.4f}" for lr, v in sweep)
              + f"; best {best_lr:.3g} = {best_lr / exported_lr:.2f}× the exported {exported_lr:.3g}")
        exponent = manifest.get("size_exponent") or {}
        from_rung = exponent.get("measured")
        if from_rung:
            print(f"  the rate's size exponent: N^{exponent['exponent']:.3f} ± {exponent['sd']:.3f}"
                  f" (the width rung's families: N^{from_rung['exponent']:.3f} ± "
                  f"{from_rung['se']:.3f}; Step Law: N^{LR_PARAMS_EXPONENT})")
        for f, both in both_at.items():
            print(f"  both at their exported rate × {f:g}: recommended "
                  f"{statistics.mean(both['recommended']):.4f}, baseline "
                  f"{statistics.mean(both['baseline']):.4f}; gain per seed "
                  + ", ".join(f"{g:+.4f}" for g in both["gain"])
                  + (" (beyond the seed spread)" if both["beats"] else " (within the seed spread)"))
        print("  " + anchor_text(row["proxy_best"], manifest["winner"]))
        print(f"  at twice the proxy's width ({widths[1].stem}): best {middle_best:.3g} = "
              f"{middle_best / middle_lr:.2f}× the exported {middle_lr:.3g}")
        print(f"  prediction: recommended {predicted:.4f} vs {measured:.4f} measured "
              f"({row['prediction_error']:.1%}, {verdict}); baseline {b_predicted:.4f} vs "
              f"{b_measured:.4f} ({row['baseline_prediction_error']:.1%}, {b_verdict})")
        print("  widths at the target's tokens: " + ", ".join(
            f"N {n:,} → {v:.4f}" for n, v in ladder["measured"]) + f"; the proxy's curve "
              f"extrapolated to them {ladder['proxy_curve']:.4f} (measured at the proxy's width "
              f"{ladder['measured'][0][1]:.4f}); the two smallest widths with α {WIDTH_ALPHA} "
              f"predict {ladder['predicted']:.4f} ({ladder['error']:.1%})")
        print("  the same two widths at the top rung's tokens: " + ", ".join(
            f"N {n:,} → {v:.4f}" for n, v in ladder["at_top"]) + "; their gap on the proxy's "
              f"curve predicts {ladder['predicted_from_top']:.4f} "
              f"({ladder['error_from_top']:.1%})")
    rows = summary["campaigns"]
    named = [r for r in rows if not r["kept_baseline"]]
    held = sum(r["beats_baseline"] and r["beats_law"] for r in named)
    print(f"\nrank held at the target (beats the baseline and the law's default by more than "
          f"the seed spread): {held} of the {len(named)} campaigns that named a winner "
          f"({len(rows) - len(named)} kept the baseline)")
    print("prediction error: " + ", ".join(f"{r['prediction_error']:.1%}" for r in rows)
          + "; exported rate / best rate: " + ", ".join(f"{1 / r['lr_factor']:.2f}" for r in rows))
    met = sum(r["beats_baseline"] and r["beats_law"] and r["prediction_error"] <= PREDICTION_BAR
              and 1 / RATE_BAR <= r["lr_factor"] <= RATE_BAR for r in named)
    print(f"all four (beats both, prediction within {PREDICTION_BAR:.0%}, exported rate within "
          f"{RATE_BAR:g}× the best): {met} of {len(named)} campaigns that named a winner")
    for f, pairs in early.items():
        counts = [sum(column) for column in zip(*pairs, strict=True)]
        print(f"exported rate × {f:g} against × 1, pairs in the order they end at each of the "
              f"{EVALUATIONS} evaluations: {', '.join(map(str, counts))} of {len(pairs)}")
        summary.setdefault("early_order", {})[f] = counts
    summary["held"] = held
    summary["all_four"] = met
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if args.ship:
        verified = verified_of(rows, args.seeds, label)
        VERIFIED_PATH.write_text(json.dumps(verified.to_json(), indent=2) + "\n")
        print(f"wrote {VERIFIED_PATH}: {verified.text()}")


def verified_of(rows: Sequence[dict[str, Any]], seeds: int, corpus: str) -> Verified:
    """What the package ships from a bench run on ``corpus``: the distance every campaign
    reached (the least on each axis) and each campaign's bars."""
    return Verified(
        distance=Distance(*(min(r["distance"][axis] for r in rows)
                            for axis in ("params", "tokens", "context"))),
        campaigns=len(rows), seeds=seeds,
        held=sum(bool(r["beats_baseline"]) for r in rows if not r["kept_baseline"]),
        kept=sum(bool(r["kept_baseline"]) for r in rows),
        prediction_errors=[r["prediction_error"] for r in rows],
        baseline_prediction_errors=[r["baseline_prediction_error"] for r in rows],
        rate_factors=[1 / r["lr_factor"] for r in rows],
        code_version=str(rows[0]["code_version"]), date=date.today().isoformat(), corpus=corpus)


if __name__ == "__main__":
    main()
