"""Calibration for a campaign: prior trials for the proposers, and the events that report them.

Prior trials are read once, when the campaign is built, and handed to the proposers (the
classical one as Optuna trials, the LLM as a summary). They never go through the store, so
they are never counted as, or written as, trials of the new campaign.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from recipelab.proposer import Observation, SearchSpace
from recipelab.trajectory.calibration import (
    Calibration,
    PriorTrial,
    calibration_summary,
    load_calibration,
)

PROBLEMS_LOGGED = 20  # one warning each; the rest are counted in one more


@dataclass(frozen=True)
class Priors:
    calibration: Calibration
    observations: tuple[Observation, ...]
    summary: str | None


def as_prior_observation(trial: PriorTrial) -> Observation:
    """A prior trial as a proposer sees it; its ``val_bpb`` is relative to its own baseline."""
    return Observation(trial_id=f"{trial.campaign}/{trial.trial_id}", status=trial.status,
                       knobs=dict(trial.knobs), val_bpb=trial.relative, reason=trial.reason,
                       reasons=trial.reasons, hypothesis=trial.hypothesis)


def load_priors(paths: Sequence[str], space: SearchSpace) -> Priors:
    """The calibration behind ``paths`` (empty when there are none)."""
    if not paths:
        return Priors(Calibration(), (), None)
    calibration = load_calibration(paths)
    return Priors(calibration, tuple(as_prior_observation(t) for t in calibration.trials),
                  calibration_summary(calibration, space.names()))


def precision_mismatch(calibration: Calibration, precision: str) -> str | None:
    """Why calibrating from trials of another precision misleads, or None when all prior
    trials trained in ``precision``.

    bf16 and fp32 runs of one recipe reach different losses, and the learning rates and
    stability settings that win in one are not those that win in the other: priors from
    the other precision steer the proposers toward the other numerics' optimum.
    """
    other: dict[str, int] = {}
    for trial in calibration.trials:
        theirs = str(trial.knobs.get("precision", precision))
        if theirs != precision:
            other[theirs] = other.get(theirs, 0) + 1
    if not other:
        return None
    counts = ", ".join(f"{n} in {p}" for p, n in sorted(other.items()))
    return (f"--calibrate-from holds trials of another precision than this campaign's "
            f"{precision} ({counts} of {len(calibration.trials)}): their losses and winning "
            "learning rates belong to other numerics and steer the proposers toward them; "
            f"calibrate from a campaign that trained in {precision}, or run this one with "
            "the same --precision as the one calibrated from")


def log_priors(log: Any, priors: Priors, precision: str | None = None) -> None:
    """One ``calibration_loaded`` event with counts, and a warning per problem (bounded)."""
    calibration = priors.calibration
    if not calibration.trials and not calibration.problems:
        return
    log.info("calibration_loaded", **calibration.counts(), campaigns_read=list(calibration.campaigns))
    mismatch = precision_mismatch(calibration, precision) if precision else None
    if mismatch:
        log.warning("calibration_precision", precision=precision, hint=mismatch)
    for problem in calibration.problems[:PROBLEMS_LOGGED]:
        log.warning("calibration_skipped", path=problem.path, line=problem.line, why=problem.why)
    hidden = len(calibration.problems) - PROBLEMS_LOGGED
    if hidden > 0:
        log.warning("calibration_skipped_more", count=hidden,
                    hint="fix or remove the files named above and the rest will follow")
