"""Search quality: the best val_bpb each proposer reaches after N trained trials.

TPE, CMA-ES, random search, the hybrid (a classical sampler, ``--steer``, with an LLM
steering a share of its turns: the sampler draws four candidates with its state, the LLM
picks one and may change up to three knobs) and ``llm`` (the LLM steering every turn) search
the default space of a preset at equal trials, each with ``--seeds`` sampler seeds. Every
trial trains with the same training seed, so a difference between two trials is the recipe's
(common random numbers).
Each search starts from the baseline's own result; guardrail rejections cost no trial, up to
``--max-rejections`` in a row. Prints, per proposer, the mean best val_bpb after N trials with
a 95 % bootstrap interval over the seeds, and each seed's figure.

The hybrid needs an OpenAI-compatible endpoint: ``--llm-base-url`` (or
``$RECIPELAB_LLM_BASE_URL``), for example llama-cpp-python serving SmolLM2-135M-Instruct
(``python -m llama_cpp.server --model smollm2-135m-instruct-q4_1.gguf``); without one it is
left out and the table says so. Trials run in this process, one thread, one after another.

**The campaign-level row** (``--campaigns N``) asks the question a user asks in the morning:
is the recipe the campaign named worth training? It runs N whole campaigns (campaign seeds
0 to N-1: each seeds its sampler and its baseline) with ``--trials`` iterations and the
default ladder up to ``--long-steps``, then trains every candidate each one measured at
``--long-steps`` of the baseline's tokens (its recipe and seed, in as many of its own steps
as its batch allows) at its proxy learning rate × 1, × 1/3 and × 1/9, and keeps the best: a
truth that owes nothing to the campaign's own horizon rule. It prints, per campaign, the
named pick's truth against the best candidate's (the regret) and against the **tuned
baseline**'s (the baseline at the best of those rates: what a user gets for free by lowering
the rate),
beside the regret's paired noise floor (the pick and the best candidate again at a second
seed: how much the regret moves with the seed alone; none when the pick is the best). The
regret is the mean of the two seeds': the best candidate is chosen at the first, so the first
alone would credit it with its luck. Where no winner is named the pick is the baseline. The
long trials train ``--truth-workers`` at a time, one thread each. Campaigns and long trials
are cached in ``--out``, so an interrupted run resumes. ``--from-seed S`` runs campaign seeds
S to N-1 only: one seed of a row, finished on a machine that lacks the others' cache.

    python bench/search_quality.py [--preset cpu] [--trials 16] [--seeds 3]
        [--proposers tpe,cmaes,random,hybrid,llm] [--llm-base-url URL]
        [--llm-structured-output json_object] [--steer cmaes] [--searchable shape.norm]
    python bench/search_quality.py --campaigns 3 [--preset tiny] [--trials 16]
        [--long-steps 1000] [--campaign-proposer classical] [--truth-workers 2] [--out DIR]
        [--from-seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import math
import os
import random
import statistics
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import get_args

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fidelity
from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings, save
from recipelab.agent.setup.settings_components import ProposerSettings
from recipelab.cli.watch import read_campaign
from recipelab.guardrails import GuardContext, detect_device, judge
from recipelab.proposer import ClassicalProposer, Observation, Proposer, default_space
from recipelab.proposer.classical import SamplerName
from recipelab.proposer.hybrid import HybridProposer
from recipelab.proposer.llm import LLMProposer
from recipelab.proposer.llm_endpoint import LLMConfig, StructuredOutput
from recipelab.proposer.space import SearchSpace
from recipelab.recipe import BASELINE_PROPOSER, Recipe, flatten
from recipelab.targets import PROXY_PRESETS, get_target, proxy_recipe
from recipelab.trainer.data import BUILTIN_CORPORA
from recipelab.trainer.loop import run_trial
from recipelab.trainer.spec import CorpusSpec, TrialSpec
from recipelab.trajectory.record import TrialRecord

CHECKS = ("ranges", "stability", "divisibility", "shape_invariants", "param_budget",
          "duplicate", "hardware")
BOOTSTRAP_SAMPLES = 2_000
LLM_PROPOSERS = ("hybrid", "llm")


def train(recipe: Recipe, corpus: CorpusSpec, trial_id: str) -> Observation:
    with tempfile.TemporaryDirectory() as out_dir:
        spec = TrialSpec(trial_id=trial_id, recipe=recipe, corpus=corpus, out_dir=out_dir,
                         device="cpu")
        result = run_trial(spec, log=io.StringIO())
    return Observation(trial_id=trial_id, status=result.status, knobs=recipe.knobs(),
                       val_bpb=result.val_bpb, reason=result.reason)


@dataclasses.dataclass(frozen=True)
class SearchResult:
    best: float
    llm_trials: int  # trained trials the LLM proposed (not a classical fallback)


def search(proposer: Proposer, baseline: Recipe, first: Observation, ctx: GuardContext,
           corpus: CorpusSpec, trials: int, max_rejections: int) -> SearchResult:
    """The best val_bpb after ``trials`` trained trials (the baseline's included)."""
    history = [first]
    seen = {baseline.fingerprint()}
    trained, rejections, llm_trials = 1, 0, 0
    while trained < trials and rejections < max_rejections:
        proposals = proposer.propose(history, 1)
        if not proposals:
            break
        trial_id = f"p{len(history):04d}"
        verdict = judge(proposals[0].candidate, dataclasses.replace(ctx, seen=frozenset(seen)),
                        checks=CHECKS)
        if not verdict.accepted or verdict.recipe is None:
            rejections += 1
            history.append(Observation(trial_id=trial_id, status="rejected",
                                       knobs=flatten(proposals[0].candidate),
                                       reasons=verdict.reasons,
                                       proposer=proposals[0].proposer))
            continue
        rejections = 0
        seen.add(verdict.recipe.fingerprint())
        history.append(train(verdict.recipe, corpus, trial_id))
        trained += 1
        llm_trials += proposals[0].proposer.startswith("llm") and proposals[0].fallback is None
    scores = [obs.val_bpb for obs in history if obs.val_bpb is not None
              and math.isfinite(obs.val_bpb)]
    return SearchResult(min(scores) if scores else math.inf, llm_trials)


def interval(values: Sequence[float], seed: int = 0) -> tuple[float, float]:
    """A 95 % bootstrap interval of the mean of ``values``."""
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values)))
                   for _ in range(BOOTSTRAP_SAMPLES))
    return means[int(0.025 * BOOTSTRAP_SAMPLES)], means[int(0.975 * BOOTSTRAP_SAMPLES) - 1]


def make_proposer(name: str, baseline: Recipe, space: SearchSpace, seed: int,
                  target_description: str, llm_base_url: str | None,
                  structured_output: StructuredOutput = "auto", steer: SamplerName = "tpe") -> Proposer:
    classical = ClassicalProposer(baseline, BASELINE_PROPOSER, space,
                                  sampler=steer if name in LLM_PROPOSERS else name,  # type: ignore[arg-type]
                                  seed=seed)
    if name not in LLM_PROPOSERS:
        return classical
    assert llm_base_url is not None
    llm = LLMProposer(LLMConfig(base_url=llm_base_url, structured_output=structured_output),
                      baseline, BASELINE_PROPOSER, space,
                      target_description, sampler=classical)
    if name == "llm":  # as the campaign's --proposer llm: every turn steered, no pause
        return HybridProposer(classical, llm, llm_share=1.0, retry_after=0)
    return HybridProposer(classical, llm, llm_share=0.3)


TRUTH_RATES = (1.0, 1 / 3, 1 / 9)
"""The learning-rate multiples each candidate trains at the long horizon; its truth is the
best of them, measured independently of the campaign's own horizon rule. Two (× 1, × 1/3)
were too few: on python-docs the campaign's own top rung found the baseline 0.3 val_bpb
better at 0.18× its proxy rate than the truth's best of the two, so the truth's "tuned
baseline" was not tuned and every candidate looked better than it."""


@dataclasses.dataclass(frozen=True)
class CampaignOutcome:
    """One campaign judged at the long horizon: every figure is a candidate's truth, the
    better of its runs at :data:`TRUTH_RATES` times its proxy rate."""

    seed: int
    pick: str  # the named winner's trial id, or the baseline's when none was named
    named: bool
    pick_long: float
    best: str  # the candidate with the best truth
    best_long: float
    baseline_long: float  # the tuned baseline: the baseline at the better rate
    candidates: int
    floor: float  # the regret's paired floor: |(pick - best) at one seed - at another|
    regret: float  # (pick - best), the mean of the two seeds: half the luck of choosing best

    @property
    def gain(self) -> float:
        """The pick's gain over the tuned baseline: what a night adds to lowering the rate."""
        return self.baseline_long - self.pick_long


def run_campaign(args: argparse.Namespace, seed: int, out: Path) -> CampaignOutcome:
    """A whole campaign at ``seed`` (resumed when ``out`` holds one), then every candidate it
    measured trained at ``--long-steps`` of the baseline's tokens at each of
    :data:`TRUTH_RATES`, and the pick and the baseline again at a second seed."""
    directory = out / f"campaign-seed{seed}"
    settings = CampaignSettings.model_validate({  # flat keys, as a settings file may hold them
        "name": f"search-quality-{seed}", "preset": args.preset, "seed": seed,
        "precision": "fp32", "iterations": args.trials, "stress_steps": args.long_steps,
        "attribution": False, "width_rung": False, "parallel": 1, "proposer": args.campaign_proposer,
        "sampler": args.steer, "llm_base_url": args.llm_base_url,
        "llm_structured_output": args.llm_structured_output,
        "corpus": {"source": args.corpus}})
    directory.mkdir(parents=True, exist_ok=True)
    save(settings, directory)
    summary = Campaign(settings, directory).run()
    if summary.stopped_early or summary.failing:  # a stopped campaign names no finished pick
        sys.exit(f"campaign seed {seed} did not finish ({summary.failing or 'stopped'}); "
                 f"run the same command again to resume it from {directory}")
    _, records = read_campaign(str(directory))
    ledger = settings.ladder.ledger(records)
    baseline = ledger.baseline
    assert baseline is not None, f"campaign {directory} trained no baseline"

    def long_run(candidate: TrialRecord, rate: float, extra_seed: int = 0) -> float:
        recipe = Recipe.model_validate(candidate.recipe)
        recipe = recipe.apply({"optimizer.lr": recipe.optimizer.lr * rate,
                               "seed": recipe.seed + extra_seed})
        return fidelity.score(fidelity.trial(
            recipe, args.long_steps, directory / "long",
            f"l{args.long_steps}-{candidate.trial_id}-x{rate:.3g}-s{recipe.seed}",
            threads=1, corpus=settings.corpus, tokens_per_step=baseline.tokens_per_step))

    # One trainer thread per long run and as many runs at once as --truth-workers: a small
    # model scales poorly over threads, so two runs side by side finish sooner than two in turn.
    with ThreadPoolExecutor(args.truth_workers) as pool:
        runs = {(c.trial_id, rate): pool.submit(long_run, c, rate)
                for c in ledger.ranked_at_proxy for rate in TRUTH_RATES}
        truth: dict[str, float] = {}
        rate_of: dict[str, float] = {}
        for candidate in ledger.ranked_at_proxy:
            at = {rate: runs[candidate.trial_id, rate].result() for rate in TRUTH_RATES}
            rate_of[candidate.trial_id] = min(at, key=lambda r: at[r])
            truth[candidate.trial_id] = at[rate_of[candidate.trial_id]]
        winner = ledger.winner
        pick = winner.record.trial_id if winner is not None else baseline.trial_id
        best = min(truth, key=lambda i: (truth[i], i))
        by_id = {r.trial_id: r for r in ledger.ranked_at_proxy}
        seconds = {i: pool.submit(long_run, by_id[i], rate_of[i], 1) for i in {pick, best}}
        second = {i: run.result() for i, run in seconds.items()}
    first_gap, second_gap = truth[pick] - truth[best], second[pick] - second[best]
    return CampaignOutcome(seed, pick, winner is not None, truth[pick], best, truth[best],
                           truth[baseline.trial_id], len(truth), abs(first_gap - second_gap),
                           (first_gap + second_gap) / 2)


def campaign_table(args: argparse.Namespace, console: Console) -> None:
    """The campaign-level row: see the module's docstring."""
    out = (args.out / f"{args.preset}-{args.campaign_proposer}-{args.steer}-{args.trials}-"
           f"{args.corpus}")
    outcomes = []
    for seed in range(args.from_seed, args.campaigns):
        outcome = run_campaign(args, seed, out)
        outcomes.append(outcome)
        console.print(f"campaign seed {seed}: pick {outcome.pick} {outcome.pick_long:.4f}, best "
                      f"{outcome.best} {outcome.best_long:.4f}, tuned baseline "
                      f"{outcome.baseline_long:.4f} at {args.long_steps} steps' tokens")
    table = Table(title=f"the named pick at {args.long_steps} steps' tokens, {args.preset} "
                        f"preset, {args.corpus}, {args.trials} iterations per campaign; each "
                        f"val_bpb the best of lr x {', '.join(f'{r:.3g}' for r in TRUTH_RATES)} "
                        "(lower is better)")
    for column in ("campaign seed", "pick", "its val_bpb", "best candidate", "regret",
                   "tuned baseline", "gain", "regret's floor", "regret within it"):
        table.add_column(column)
    for o in outcomes:
        table.add_row(str(o.seed), o.pick if o.named else f"{o.pick} (no winner named)",
                      f"{o.pick_long:.4f}", f"{o.best} {o.best_long:.4f} of {o.candidates}",
                      f"{o.regret:+.4f}", f"{o.baseline_long:.4f}", f"{o.gain:+.4f}",
                      f"{o.floor:.4f}", "yes" if o.regret <= o.floor else "no")
    gains = [o.gain for o in outcomes]
    low, high = interval(gains) if len(gains) > 1 else (gains[0], gains[0])
    table.add_row("mean", "", f"{statistics.fmean(o.pick_long for o in outcomes):.4f}",
                  f"{statistics.fmean(o.best_long for o in outcomes):.4f}",
                  f"{statistics.fmean(o.regret for o in outcomes):+.4f}",
                  f"{statistics.fmean(o.baseline_long for o in outcomes):.4f}",
                  f"{statistics.fmean(gains):+.4f} [{low:+.4f}, {high:+.4f}]",
                  f"{statistics.fmean(o.floor for o in outcomes):.4f}",
                  f"{sum(o.regret <= o.floor for o in outcomes)} of {len(outcomes)}")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu", choices=list(PROXY_PRESETS))
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--proposers", default="tpe,cmaes,random,hybrid")
    parser.add_argument("--llm-base-url", default=os.environ.get("RECIPELAB_LLM_BASE_URL"))
    parser.add_argument("--llm-structured-output", default="auto",
                        choices=get_args(StructuredOutput),
                        help="how the LLM's reply is constrained (llama.cpp: json_object)")
    parser.add_argument("--steer", default=ProposerSettings.model_fields["sampler"].default,
                        choices=get_args(SamplerName),
                        help="the sampler the hybrid and llm steer (default: the campaign's)")
    parser.add_argument("--searchable", action="append", default=[])
    parser.add_argument("--max-rejections", type=int, default=25)
    parser.add_argument("--campaigns", type=int, default=0,
                        help="the campaign-level row instead: this many whole campaigns")
    parser.add_argument("--from-seed", type=int, default=0,
                        help="the first campaign seed to run (seeds --from-seed to --campaigns - 1)")
    parser.add_argument("--campaign-proposer", default="classical",
                        choices=("classical", "llm", "hybrid"),
                        help="the campaigns' proposer (an LLM one needs --llm-base-url)")
    parser.add_argument("--long-steps", type=int, default=1000,
                        help="the campaigns' stress horizon, where their picks are judged")
    parser.add_argument("--corpus", default="python-docs",
                        help="the campaigns' corpus (python-source: the longest run reads it once)")
    parser.add_argument("--truth-workers", type=int, default=os.cpu_count() or 1,
                        help="long runs trained at once, one thread each (default: one per core)")
    parser.add_argument("--out", type=Path,
                        default=Path(tempfile.gettempdir()) / "recipelab-search-quality",
                        help="where the campaigns and their long trials run and are cached")
    args = parser.parse_args()
    if args.campaigns < 0:
        parser.error(f"--campaigns must be 0 (off) or a number of campaigns, not {args.campaigns}")
    if args.campaigns and not 0 <= args.from_seed < args.campaigns:
        parser.error(f"--from-seed must be a campaign seed from 0 to {args.campaigns - 1} "
                     f"(--campaigns {args.campaigns}), not {args.from_seed}")
    if args.truth_workers < 1:
        parser.error(f"--truth-workers must be at least 1, not {args.truth_workers}")
    if args.corpus not in BUILTIN_CORPORA and not Path(args.corpus).exists():
        parser.error(f"--corpus {args.corpus!r} is neither a built-in corpus "
                     f"({', '.join(BUILTIN_CORPORA)}) nor an existing path")
    torch.set_num_threads(1)
    console = Console(width=200)  # the row is one wide table, read from a log as often as a terminal
    if args.campaigns:
        campaign_table(args, console)
        return

    baseline = proxy_recipe(args.preset)
    preset = PROXY_PRESETS[args.preset]
    target = get_target(preset.default_target)
    space = default_space(baseline, args.searchable)
    ctx = GuardContext(target=target, baseline=baseline, device=detect_device(),
                       param_budget=preset.budget, searchable=space.searchable_shape_knobs())
    corpus = CorpusSpec()
    console.print(f"{args.preset} proxy of {target.name}: {len(space.knobs)} knobs, "
                  f"{args.trials} trials x {args.seeds} seeds per proposer")
    first = train(baseline, corpus, "p0000")
    console.print(f"baseline val_bpb {first.val_bpb:.4f}")

    table = Table(title=f"best val_bpb after {args.trials} trials (lower is better)")
    for column in ("proposer", "mean", "95% interval", "per seed", "LLM's trials"):
        table.add_column(column)
    for name in args.proposers.split(","):
        label = f"{name} ({args.steer})" if name in LLM_PROPOSERS else name
        if name in LLM_PROPOSERS and not args.llm_base_url:
            table.add_row(label, "-", "-", "no LLM endpoint (--llm-base-url)", "-")
            continue
        bests, llm_trials = [], 0
        for seed in range(args.seeds):
            proposer = make_proposer(name, baseline, space, seed, target.description,
                                     args.llm_base_url, args.llm_structured_output,
                                     args.steer)
            try:
                found = search(proposer, baseline, first, ctx, corpus, args.trials,
                               args.max_rejections)
                bests.append(found.best)
                llm_trials += found.llm_trials
            finally:
                proposer.close()
            console.print(f"{name} seed {seed}: {bests[-1]:.4f}")
        low, high = interval(bests)
        table.add_row(label, f"{statistics.fmean(bests):.4f}", f"[{low:.4f}, {high:.4f}]",
                      ", ".join(f"{b:.4f}" for b in bests),
                      f"{llm_trials} of {args.seeds * (args.trials - 1)}" if name in LLM_PROPOSERS
                      else "-")
    console.print(table)


if __name__ == "__main__":
    main()
