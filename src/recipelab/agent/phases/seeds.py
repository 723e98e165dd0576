"""Seeds as evidence: baseline seeds measure the noise floor, finalist seeds settle close calls.

The campaign's first ``noise_seeds`` trained proxy trials are the baseline with seeds
``seed, seed+1, ...``; their val_bpb spread is the noise floor (see
:mod:`recipelab.trajectory.noise`). They are proxy trials like any other and count toward
``--iterations``, because they cost the same time as any other trial.

After the search, finalists whose lead over the next finalist is within the noise floor are
trained again with ``RERUN_SEEDS`` more seeds each (proposer ``seed-rerun``, ``parent`` the
finalist), before stress runs; these re-runs are part of promotion and are not limited by
``--iterations``, like the stress runs. Which trials count where, and which finalist wins,
is defined once in :mod:`recipelab.trajectory.ledger`.

Everything here is a pure function of the records, so a resumed campaign makes the same
decisions.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from recipelab.proposer import Proposal
from recipelab.recipe import BASELINE_PROPOSER, Recipe
from recipelab.trajectory.noise import SEED_RERUN_PROPOSER, NoiseFloor, seed_family
from recipelab.trajectory.record import TrialRecord

RERUN_SEEDS = 2  # extra seeds per finalist in a close call


def _free_seed(start: int, used: set[int]) -> int:
    seed = start
    while seed in used:
        seed += 1
    return seed


def baseline_proposals(baseline: Recipe, records: Sequence[TrialRecord], noise_seeds: int,
                       n: int = 1) -> list[Proposal]:
    """Up to ``n`` baseline trials still to start (empty once ``noise_seeds`` of them are
    trained or running).

    The first is the unedited baseline; each later one the baseline with an unused seed.
    """
    proxies = [r for r in records if r.kind == "proxy" and r.proposer == BASELINE_PROPOSER]
    started = [r for r in proxies if r.trained or r.status == "running"]
    used = {int(r.recipe.get("seed", 0)) for r in proxies if r.recipe}
    first = next((r.trial_id for r in started if not r.edit and r.status == "complete"), None)
    proposals: list[Proposal] = []
    if not started:
        proposals.append(Proposal.from_edit(baseline, None, {},
                                            "baseline: the unedited proxy of the target",
                                            BASELINE_PROPOSER))
    for count in range(len(started) + len(proposals), min(noise_seeds, len(started) + n)):
        seed = _free_seed(baseline.seed + 1, used | {baseline.seed})
        used.add(seed)
        proposals.append(Proposal.from_edit(
            baseline, first, {"seed": seed},
            f"baseline seed {seed}: the same recipe with another seed measures the noise floor "
            f"({count + 1}/{noise_seeds})", BASELINE_PROPOSER))
    return proposals[:n]


def close_finalists(finalists: Sequence[TrialRecord], floor: NoiseFloor | None
                    ) -> list[tuple[TrialRecord, TrialRecord]]:
    """Neighbouring finalists (by val_bpb) whose difference is within the noise floor."""
    if floor is None:
        return []
    ranked = sorted((f for f in finalists if f.val_bpb is not None),
                    key=lambda r: (r.val_bpb, r.trial_id))
    return [(a, b) for a, b in itertools.pairwise(ranked)
            if b.val_bpb is not None and a.val_bpb is not None
            and b.val_bpb - a.val_bpb <= floor.spread]


def rerun_proposals(finalists: Sequence[TrialRecord], records: Sequence[TrialRecord],
                    floor: NoiseFloor | None, extra: int = RERUN_SEEDS) -> list[Proposal]:
    """The seed re-runs still owed to finalists in a close call (``extra`` each)."""
    owed: list[Proposal] = []
    pairs = close_finalists(finalists, floor)
    close = {r.trial_id: r for pair in pairs for r in pair}
    rivals = {a.trial_id: b.trial_id for a, b in pairs} | {b.trial_id: a.trial_id for a, b in pairs}
    for finalist in sorted(close.values(), key=lambda r: (r.val_bpb, r.trial_id)):
        reruns = [r for r in records if r.proposer == SEED_RERUN_PROPOSER
                  and r.parent == finalist.trial_id]
        tried = [r for r in reruns if r.trained or r.status == "rejected"]
        family = seed_family(finalist, records)  # e.g. the baseline's noise-floor seeds
        used = {int(r.recipe.get("seed", 0)) for r in [*family, *reruns] if r.recipe}
        recipe = Recipe.model_validate(finalist.recipe)
        have = max(len(tried), len(family) - 1)
        for _ in range(extra - have):
            seed = _free_seed(recipe.seed + 1, used)
            used.add(seed)
            lead = abs((finalist.val_bpb or 0.0) - (close[rivals[finalist.trial_id]].val_bpb or 0.0))
            owed.append(Proposal.from_edit(
                recipe, finalist.trial_id, {"seed": seed},
                f"seed re-run of {finalist.trial_id} (seed {seed}): its difference of {lead:.4f} "
                f"from {rivals[finalist.trial_id]} is within the noise floor ({floor.spread:.4f})"
                if floor else "seed re-run", SEED_RERUN_PROPOSER))
    return owed


def noise_marks(val_bpb: float | None, floor: NoiseFloor | None, seed: int | None = None
                ) -> dict[str, Any]:
    """The metrics that mark a trial's gain over the baseline as real or as noise: the gain
    (against the baseline at the same ``seed`` once the floor is paired) and its 90% interval."""
    if floor is None or val_bpb is None:
        return {}
    gain = floor.interval(val_bpb, seed)
    return {"gain_vs_baseline": round(gain.value, 6), "gain_low": round(gain.low, 6),
            "gain_high": round(gain.high, 6), "within_noise": gain.is_noise}
