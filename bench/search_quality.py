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

    python bench/search_quality.py [--preset cpu] [--trials 16] [--seeds 3]
        [--proposers tpe,cmaes,random,hybrid,llm] [--llm-base-url URL]
        [--llm-structured-output json_object] [--steer cmaes] [--searchable shape.norm]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import math
import os
import random
import statistics
import tempfile
from collections.abc import Sequence
from typing import get_args

import torch
from rich.console import Console
from rich.table import Table

from recipelab.agent.settings_components import ProposerSettings
from recipelab.guardrails import GuardContext, detect_device, judge
from recipelab.proposer import ClassicalProposer, Observation, Proposer, default_space
from recipelab.proposer.classical import SamplerName
from recipelab.proposer.hybrid import HybridProposer
from recipelab.proposer.llm import LLMConfig, LLMProposer, StructuredOutput
from recipelab.proposer.space import SearchSpace
from recipelab.recipe import (
    BASELINE_PROPOSER,
    PROXY_PRESETS,
    Recipe,
    flatten,
    get_target,
    proxy_recipe,
)
from recipelab.trainer.loop import run_trial
from recipelab.trainer.spec import CorpusSpec, TrialSpec

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
    args = parser.parse_args()
    torch.set_num_threads(1)
    console = Console()

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
