"""How much calibration from an earlier campaign speeds up the next one.

Runs an earlier campaign on the ``tiny`` preset (classical TPE proposer), takes its best
val_bpb as the mark, then runs new campaigns with other seeds, with and without
``--calibrate-from`` the earlier one, and counts the trained proxy trials each needs to reach
that mark (the baseline included). A campaign that has not reached it after ``--cap`` trials
counts as ``cap`` (and is flagged: the true figure is higher, so the ratio is then flattering
to the uncalibrated side). Means are over ``--seeds`` seeds. Target: calibrated campaigns need
at most 40% of the trials uncalibrated ones need.

The noise floor is off (``noise_seeds=1``) so both sides spend their trials on the search;
with it on, both would start with the same extra baseline seeds.

What a "seed" varies matters on the ``tiny`` preset, where the training seed moves val_bpb
more than most recipe edits do. ``--vary sampler`` (the default) keeps the earlier campaign's
training seed and varies only the proposer's sampler seed, so the comparison measures the
search; ``--vary campaign`` gives each new campaign its own seed (training and sampler), so
its baseline lands elsewhere and reaching the earlier campaign's exact number is largely seed
luck.

    python bench/calibration.py [--prior-iterations 20] [--cap 60] [--seeds 3] [--vary sampler]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import (
    CampaignSettings,
    LadderSettings,
    ProposerSettings,
    SearchSettings,
    WindowSettings,
)
from recipelab.proposer import ClassicalProposer, Observation, Proposal, Proposer
from recipelab.trainer.spec import CorpusSpec
from recipelab.trajectory import TrajectoryStore

TARGET_RATIO = 0.40
PRIOR_SEED = 1000


class UntilReached(Proposer):
    """Proposes like ``inner`` until a complete trial reaches ``mark``, then nothing, which
    ends the campaign's search (so a campaign costs only the trials it needs)."""

    name = "until-reached"

    def __init__(self, inner: Proposer, mark: float) -> None:
        self.inner = inner
        self.mark = mark

    def propose(self, history: list[Observation], n: int) -> list[Proposal]:
        if any(o.status == "complete" and o.val_bpb is not None and o.val_bpb <= self.mark
               for o in history):
            return []
        return self.inner.propose(history, n)


@dataclass(frozen=True)
class Run:
    trials: int
    reached: bool
    best: float


def settings(name: str, seed: int, iterations: int, corpus: CorpusSpec,
             calibrate_from: tuple[str, ...] = ()) -> CampaignSettings:
    return CampaignSettings(name=name, preset="tiny", seed=seed, corpus=corpus,
                            window=WindowSettings(iterations=iterations), ladder=LadderSettings(promote=0),
                            search=SearchSettings(noise_seeds=1, calibrate_from=calibrate_from),
                            proposer=ProposerSettings(kind="classical"))


def quiet() -> Console:
    return Console(stderr=True, quiet=True)


def records(directory: Path, name: str) -> list[tuple[int, float | None, str]]:
    with TrajectoryStore(directory, name, readonly=True) as store:
        return [(r.iteration, r.val_bpb, r.status) for r in store.records()
                if r.kind == "proxy" and r.trained]


def run_until(directory: Path, config: CampaignSettings, mark: float,
              sampler_seed: int | None = None) -> Run:
    campaign = Campaign(config, directory, console=quiet())
    proposer = campaign.proposer
    if sampler_seed is not None:  # the campaign's training seed, another sampler seed
        proposer = ClassicalProposer(campaign.baseline, None, campaign.space, seed=sampler_seed,
                                     priors=campaign.priors.observations)
    campaign.proposer = UntilReached(proposer, mark)
    campaign.run()
    trained = sorted(records(directory, config.name))
    scores = [v for _, v, status in trained if status == "complete" and v is not None]
    for count, (_, value, status) in enumerate(trained, start=1):
        if status == "complete" and value is not None and value <= mark:
            return Run(count, True, min(scores))
    return Run(len(trained), False, min(scores, default=float("inf")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prior-iterations", type=int, default=20)
    parser.add_argument("--cap", type=int, default=60, help="trials before giving up")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--vary", choices=("sampler", "campaign"), default="sampler",
                        help="what each seed changes (see above)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # trials take one core of a shared machine

    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        corpus = CorpusSpec(cache_dir=str(root / "cache"))
        prior_dir = root / "prior"
        Campaign(settings("prior", PRIOR_SEED, args.prior_iterations, corpus), prior_dir,
                 console=quiet()).run()
        prior = records(prior_dir, "prior")
        mark = min(v for _, v, status in prior if status == "complete" and v is not None)
        print(f"earlier campaign: {len(prior)} trials, best val_bpb {mark:.4f} (the mark); "
              f"each seed varies the {args.vary}")
        print(f"\n{'seed':>4} {'uncalibrated':>13} {'calibrated':>11}   best val_bpb (unc. / cal.)")
        plain_runs, calibrated_runs = [], []
        for seed in range(1, args.seeds + 1):
            training_seed = seed if args.vary == "campaign" else PRIOR_SEED
            sampler_seed = None if args.vary == "campaign" else seed
            plain = run_until(root / f"plain-{seed}", settings(
                f"plain-{seed}", training_seed, args.cap, corpus), mark, sampler_seed)
            calibrated = run_until(root / f"cal-{seed}", settings(
                f"cal-{seed}", training_seed, args.cap, corpus, (str(prior_dir),)), mark,
                sampler_seed)
            plain_runs.append(plain)
            calibrated_runs.append(calibrated)

            def shown(run: Run) -> str:
                return f"{run.trials}{'' if run.reached else '+'}"

            print(f"{seed:4d} {shown(plain):>13} {shown(calibrated):>11}   "
                  f"{plain.best:.4f} / {calibrated.best:.4f}", flush=True)

    plain_mean = statistics.fmean(r.trials for r in plain_runs)
    calibrated_mean = statistics.fmean(r.trials for r in calibrated_runs)
    ratio = calibrated_mean / plain_mean
    censored = sum(not r.reached for r in plain_runs + calibrated_runs)
    print(f"\nmean trials to reach {mark:.4f}: uncalibrated {plain_mean:.1f}, "
          f"calibrated {calibrated_mean:.1f}")
    if censored:
        print(f"('+': {censored} campaign(s) had not reached the mark after {args.cap} trials "
              "and count as the cap)")
    verdict = "target met" if ratio <= TARGET_RATIO else "target missed"
    print(f"calibrated / uncalibrated: {100 * ratio:.0f}% (target <= {100 * TARGET_RATIO:.0f}%): "
          f"{verdict}")
    print(f"wall time {(time.monotonic() - started) / 60:.1f} min on this machine")


if __name__ == "__main__":
    main()
