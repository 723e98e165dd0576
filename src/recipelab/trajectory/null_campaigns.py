"""Null campaigns: the top rung's verdict run where the truth is known, so the confidence it
prints is a measured one.

:func:`top_rung_campaign` builds one campaign's top rung from real :class:`TrialRecord` objects
(the seeds of :func:`~recipelab.trajectory.ladder.top_rung_seeds`, each recipe's learning-rate
family at each, followed beyond its edge as the campaign follows it) and runs the campaign's
own decisions on them: the close call of
:func:`~recipelab.trajectory.verdict.close_call_target` and the verdict of
:meth:`~recipelab.trajectory.ledger.Ledger.verdict`. Only the val_bpb of each run comes
from elsewhere: a :data:`Draw`. :func:`noise_model` draws from a model with the truth set by
hand; ``bench/null_campaigns.py`` also draws from real runs of the baseline. Where every
finalist equals the control, a named winner is a false one: the **false-winner rate**; where
one is better, naming it is the verdict's **power**.

A named winner then meets the width rung's check
(:func:`~recipelab.trajectory.width_check.width_check`): the winner and the baseline at twice
the width, at :data:`~recipelab.trajectory.width_check.WIDTH_SEEDS` seeds, drawn with the
proxy's truth and noise (the gain holds one size up). Where the baseline beats the winner
there beyond the noise floor the campaign keeps the baseline: for a winner that is truly
better, that is power the check costs, **overruled**.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from recipelab.recipe import BASELINE_PROPOSER, Shape
from recipelab.trajectory.ladder import LR_FAMILY, top_rung_seeds
from recipelab.trajectory.ledger import LR_FAMILY_PROPOSER, Ledger
from recipelab.trajectory.noise import SEED_RERUN_PROPOSER
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.verdict import close_call_target
from recipelab.trajectory.width_check import CONTROL_ARM, WIDTH_KIND, WIDTH_MULTIPLE, WIDTH_SEEDS

CAMPAIGN_SEED = 0
"""The null campaign's seed: its proxy trials train at it; the top rung never does."""
BASELINE_ID = "p0000"
TWICE_THE_WIDTH = Shape(n_layer=2, d_model=64 * WIDTH_MULTIPLE, n_head=4, n_kv_head=4,
                        head_dim=16 * WIDTH_MULTIPLE, ffn_ratio=4.0)
"""The width rung's shape (the check compares its two arms at one shape; any shape does)."""
NOISE_SEEDS = 2
"""The baseline's seeds beside its first (``--noise-seeds`` 3), and a close call's seed
re-runs of a finalist at the proxy (``RERUN_SEEDS``): the floor the check one size up reads."""
RATE_GAP = 10.0
"""How much worse (in σ) every recipe's other rates are by default: far enough that choosing
the best rate gives no recipe luck of its own."""

Draw = Callable[[str, int, float], float]
"""One run's val_bpb from who trains it (``"base"`` or a finalist's id, ``f0`` first), its
seed and its multiple of its own rate (the top rung trains every recipe's family)."""


@dataclass(frozen=True)
class TopRung:
    """What decides the verdict: ``promote`` finalists at ``top_seeds`` seeds, and a close
    call's ``close_call_seeds`` more."""

    promote: int
    top_seeds: int
    close_call_seeds: int

    def describe(self) -> str:
        return (f"{self.promote} finalist{'s' if self.promote > 1 else ''}, "
                f"{self.top_seeds} top seeds, close call +{self.close_call_seeds}")

    def ledger(self, records: list[TrialRecord]) -> Ledger:
        return Ledger(records, promote=self.promote, looks=2 if self.close_call_seeds else 1)


@dataclass(frozen=True)
class Outcome:
    """What one null campaign decided: whether its top rung ``named`` a winner, and whether
    the check one size up then ``overruled`` it (the campaign keeps the baseline)."""

    named: bool
    overruled: bool = False

    @property
    def handed_off(self) -> bool:
        """Whether the night hands off a winner: named, and not overruled."""
        return self.named and not self.overruled


def run_record(trial_id: str, kind: str, proposer: str, value: float, *, parent: str | None,
               steps: int, seed: int, family: float | None = None,
               edit: dict[str, object] | None = None, of: str | None = None) -> TrialRecord:
    """A complete, stable run as the campaign records it (what the verdict reads); ``of``
    names a recipe of its own, whose seeds the noise floor pairs with the baseline's."""
    recipe: dict[str, object] = {"seed": seed, "steps": steps}
    if of is not None:
        recipe["of"] = of
    if kind == WIDTH_KIND:
        recipe["shape"] = TWICE_THE_WIDTH.model_dump(mode="json")
    return TrialRecord(campaign="null", trial_id=trial_id, kind=kind, status="complete",
                       proposer=proposer, parent=parent, budget=steps, val_bpb=value,
                       recipe=recipe, edit=edit or ({"lr_family": family} if family else {}),
                       verdict="stable")


def top_rung_campaign(rung: TopRung, draw: Draw, *, proxy_steps: int = 20,
                      top_steps: int = 200, one_size_up: bool = True) -> Outcome:
    """One campaign's top rung, close call and verdict, then (``one_size_up``) the check one
    size up of the winner it named."""
    finalists = [f"f{i}" for i in range(rung.promote)]
    records = [run_record(BASELINE_ID, "proxy", BASELINE_PROPOSER,
                          draw("base", CAMPAIGN_SEED, 1.0), parent=None, steps=proxy_steps,
                          seed=CAMPAIGN_SEED)]
    records += [run_record(f, "proxy", "tpe", draw(f, CAMPAIGN_SEED, 1.0), parent=None,
                           steps=proxy_steps, seed=CAMPAIGN_SEED) for f in finalists]
    ids = iter(range(10**6))

    def top_run(parent: str, seed: int, family: float | None = None) -> TrialRecord:
        who = "base" if parent == BASELINE_ID else parent
        kind, proposer = ("rung", LR_FAMILY_PROPOSER) if family else ("stress", "tpe")
        return run_record(f"s{next(ids):04d}", kind, proposer, draw(who, seed, family or 1.0),
                          parent=parent, steps=top_steps, seed=seed, family=family)

    seeds = top_rung_seeds(CAMPAIGN_SEED, (CAMPAIGN_SEED,), rung.top_seeds)
    for seed in seeds:
        for parent in (BASELINE_ID, *finalists):
            records += [top_run(parent, seed), *(top_run(parent, seed, m) for m in LR_FAMILY)]
    proxies = records[:1 + rung.promote]
    while wanted := [(p.trial_id, m) for p in proxies
                     if (m := rung.ledger(records).tuned(p, top_steps).next_rate()) is not None]:
        records += [top_run(parent, seed, m) for parent, m in wanted for seed in seeds]
    bought: set[str] = set()
    while (target := close_call_target(rung.ledger(records), bought,
                                       rung.close_call_seeds)) is not None:
        best, multiple, control = target
        bought.add(best.trial_id)
        seeds = top_rung_seeds(CAMPAIGN_SEED, (CAMPAIGN_SEED,),
                               rung.top_seeds + rung.close_call_seeds)[rung.top_seeds:]
        for seed in seeds:
            records += [top_run(best.trial_id, seed, multiple if multiple != 1.0 else None),
                        top_run(BASELINE_ID, seed, control if control != 1.0 else None)]
    verdict = rung.ledger(records).verdict()
    if verdict is None or verdict.primary is None:
        return Outcome(named=False)
    if not one_size_up:
        return Outcome(named=True)
    records += proxy_noise_runs(draw, finalists, proxy_steps)
    winner = verdict.primary.trial_id
    for seed in range(CAMPAIGN_SEED, CAMPAIGN_SEED + WIDTH_SEEDS):
        for parent, arm in ((winner, {}), (BASELINE_ID, CONTROL_ARM)):
            who = "base" if parent == BASELINE_ID else parent
            records.append(run_record(
                f"w{next(ids):04d}", WIDTH_KIND, "width-rung", draw(who, seed, 1.0),
                parent=parent, steps=top_steps, seed=seed,
                edit={"width_multiple": WIDTH_MULTIPLE, **arm}))
    return Outcome(named=True, overruled=rung.ledger(records).lost_one_size_up is not None)


def proxy_noise_runs(draw: Draw, finalists: list[str], steps: int) -> list[TrialRecord]:
    """The proxy's noise floor as a campaign measures it, which the check one size up reads:
    the baseline at its other noise seeds and each finalist's seed re-runs at the same seeds
    (the re-runs of a close call, which finalists equal to the baseline are)."""
    seeds = range(CAMPAIGN_SEED + 1, CAMPAIGN_SEED + 1 + NOISE_SEEDS)
    runs = [run_record(f"{BASELINE_ID}s{seed}", "proxy", BASELINE_PROPOSER,
                       draw("base", seed, 1.0), parent=BASELINE_ID, steps=steps, seed=seed)
            for seed in seeds]
    runs += [run_record(f"{finalist}s{seed}", "proxy", SEED_RERUN_PROPOSER,
                        draw(finalist, seed, 1.0), parent=finalist, steps=steps, seed=seed,
                        of=finalist)
             for finalist in finalists for seed in seeds]
    return runs


def noise_model(rng: random.Random, gain: float = 0.0, rate_gap: float = RATE_GAP) -> Draw:
    """Runs whose paired difference at one seed has σ 1: a per-seed draw every recipe at that
    seed shares (the same initialisation and batches) and one of each run's own, variance ½
    each. Every finalist has the truth of the baseline, except ``f0``, ``gain`` σ better;
    every recipe's other rates are ``rate_gap`` σ worse (at 0 each is the best of three equal
    rates, the control and the finalists alike, chosen on the seeds it is judged on; far
    apart, none is)."""
    shared: dict[int, float] = {}
    own = math.sqrt(0.5)

    def draw(who: str, seed: int, factor: float) -> float:
        if seed not in shared:
            shared[seed] = rng.gauss(0.0, own)
        truth = (rate_gap if factor != 1.0 else 0.0) - (gain if who == "f0" else 0.0)
        return truth + shared[seed] + rng.gauss(0.0, own)
    return draw


def simulated(rung: TopRung, campaigns: int, *, gain: float = 0.0, seed: int = 0,
              rate_gap: float = RATE_GAP) -> list[Outcome]:
    """``campaigns`` simulated campaigns (:func:`noise_model`), each one's outcome."""
    rng = random.Random(seed)
    return [top_rung_campaign(rung, noise_model(rng, gain, rate_gap)) for _ in range(campaigns)]


def winner_rate(rung: TopRung, campaigns: int, *, gain: float = 0.0, seed: int = 0,
                rate_gap: float = RATE_GAP) -> float:
    """The share of ``campaigns`` simulated campaigns that name a winner: the false-winner
    rate at ``gain`` 0, the power above it."""
    found = simulated(rung, campaigns, gain=gain, seed=seed, rate_gap=rate_gap)
    return sum(o.named for o in found) / campaigns


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a rate of ``hits`` in ``n``."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
