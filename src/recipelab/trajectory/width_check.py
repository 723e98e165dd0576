"""The check one size up: the campaign's answer and the baseline at twice the proxy's width.

After the ladder names a winner, the width rung (:mod:`recipelab.agent.phases.width_phase`)
trains it and the baseline, both moved onto the target's family by the export's rules, at
:data:`WIDTH_MULTIPLE` × the proxy's width and the top rung's tokens. That is the nearest
larger size at which the night's answer is measured, so the ledger reads it as evidence: a
winner the baseline beats there by more than the campaign's noise floor is not what a larger
run should train, and the campaign keeps the baseline (:attr:`WidthCheck.lost`).

On ``bench/transfer.py``'s three campaigns (63× the proxy's parameters, 5× the top rung's
tokens) the gains at twice the width, over two seeds, were −0.179 / +0.180 / +0.074 against
floors of 0.162 / 0.111 / 0.225, where the target's were −0.61 / +0.15 / +0.12: the one
winner the baseline beat beyond the floor was the one that lost at the target.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from recipelab.recipe import Recipe, non_embedding_params
from recipelab.trajectory.noise import noise_floor
from recipelab.trajectory.record import TrialRecord, has_score

WIDTH_KIND = "width"
CONTROL_ARM = {"arm": "baseline"}
"""The edit entry that marks a width run as the baseline's, the control beside the
recommendation's."""
WIDTH_MULTIPLE = 2
WIDTH_SEEDS = 2
"""Seeds of each width run, from the campaign's own. One seed's gap was inside the seeds'
spread on ``bench/transfer.py`` (the same run at two seeds differed by up to 0.18), and a
run at the proxy's width and the top rung's tokens costs about one stress run."""
WIDTH_RATES = (0.5, 2.0)
"""The multiples of the export's learning rate the recommendation also trains at, at both
widths and the campaign's seed: with the run at × 1 each width's rate family, which places
the best rate at two sizes (:mod:`recipelab.transfer.size_exponent`)."""


def is_control(record: TrialRecord) -> bool:
    """Whether a width run is the baseline's, trained to check the recommendation's gain."""
    return record.edit.get("arm") == CONTROL_ARM["arm"]


def rate_multiple(record: TrialRecord) -> float:
    """The multiple of the export's learning rate a width run trained at (1 but in the rate
    family, :data:`WIDTH_RATES`)."""
    return float(record.edit.get("lr_family", 1.0))


def scored_width_runs(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """The width rung's complete runs with a finite val_bpb at the export's own rate (not its
    rate families'), in record order."""
    return [r for r in records if r.kind == WIDTH_KIND and has_score(r) and rate_multiple(r) == 1.0]


def seed_of(record: TrialRecord) -> int:
    return int(record.recipe.get("seed", 0))


def trial_ids(records: Sequence[TrialRecord]) -> str:
    """The runs behind a mean over seeds, as one name: ``w0001+w0004``."""
    return "+".join(r.trial_id for r in records)


def mean_val_bpb(records: Sequence[TrialRecord]) -> float:
    values = [r.val_bpb for r in records if r.val_bpb is not None]
    return sum(values) / len(values)


@dataclass(frozen=True)
class WidthCheck:
    """The recommendation and the baseline, both exported by the same rules, at twice the
    proxy's width and the top rung's tokens, each a mean over the ``seeds`` both trained:
    whether the campaign's answer still holds one size up. ``floor`` is the campaign's noise
    floor for a one-seed gain (its paired spread, else the baseline seeds' range), kept for a
    mean over more seeds, which is surer: a smaller gain, either way, says nothing."""

    params: int  # non-embedding, of the wider model
    recommended_val_bpb: float
    baseline_val_bpb: float
    runs: tuple[str, str]  # the recommendation's trial ids, then the baseline's (trial_ids)
    floor: float | None = None
    seeds: int = 1

    @property
    def gain(self) -> float:
        return self.baseline_val_bpb - self.recommended_val_bpb

    @property
    def within_noise(self) -> bool:
        return self.floor is not None and abs(self.gain) <= self.floor

    @property
    def held(self) -> bool:
        return self.gain > 0 and not self.within_noise

    @property
    def lost(self) -> bool:
        """The baseline beat the recommendation by more than the noise floor: the campaign
        keeps the baseline. Without a floor a loss cannot be told from the seeds, so it only
        cautions."""
        return self.floor is not None and -self.gain > self.floor

    def describe(self) -> str:
        if self.held:
            verdict = "the gain held"
        elif self.within_noise:
            verdict = (f"within the noise floor (±{self.floor:.4f}): one size up the "
                       "recommendation is no surer than the baseline; keep the baseline as "
                       "the cloud run's control arm")
        elif self.lost:
            verdict = (f"the baseline won by more than the noise floor (±{self.floor:.4f}): "
                       "the campaign keeps the baseline")
        else:
            verdict = ("the gain did not hold: keep the baseline as the cloud run's control "
                       "arm, or train it instead")
        seeds = "one seed" if self.seeds == 1 else f"mean of {self.seeds} seeds"
        return (f"at twice the proxy's width ({self.params:,} non-embedding parameters, the top "
                f"rung's tokens, {seeds}) the recommendation scored "
                f"{self.recommended_val_bpb:.4f} ({self.runs[0]}) and the baseline "
                f"{self.baseline_val_bpb:.4f} ({self.runs[1]}): gain {self.gain:+.4f}, {verdict}")

    def to_json(self) -> dict[str, object]:
        return {"params": self.params, "gain": self.gain, "floor": self.floor, "seeds": self.seeds,
                "held": self.held, "within_noise": self.within_noise, "lost": self.lost,
                "recommended": {"val_bpb": self.recommended_val_bpb, "trial": self.runs[0]},
                "baseline": {"val_bpb": self.baseline_val_bpb, "trial": self.runs[1]}}


def width_of(record: TrialRecord) -> int:
    return Recipe.model_validate(record.recipe).shape.d_model


def paired_by_seed(outer: Sequence[TrialRecord], inner: Sequence[TrialRecord],
                   matches: Callable[[TrialRecord, TrialRecord], bool]
                   ) -> tuple[tuple[TrialRecord, ...], tuple[TrialRecord, ...]] | None:
    """The width rung's runs in pairs, ``inner``'s beside ``outer``'s: at each seed the latest
    pair of the same budget and seed that ``matches`` (inner, outer), kept to the latest
    pair's inner parent and budget; as (inners, outers) in seed order, None without a pair.
    The size gap and the check one size up both read their seeds' means from it."""
    pairs: dict[int, tuple[TrialRecord, TrialRecord]] = {}
    chosen: tuple[str | None, int] | None = None
    for second in reversed(outer):
        for first in reversed(inner):
            if (first.budget_steps == second.budget_steps and seed_of(first) == seed_of(second)
                    and matches(first, second)):
                chosen = chosen or (first.parent, first.budget_steps)
                if (first.parent, first.budget_steps) == chosen:
                    pairs.setdefault(seed_of(second), (first, second))
    if not pairs:
        return None
    firsts, seconds = zip(*(pairs[seed] for seed in sorted(pairs)), strict=True)
    return firsts, seconds


def width_check(records: Sequence[TrialRecord], parent: str | None = None) -> WidthCheck | None:
    """The recommendation's runs at twice the width (``parent``'s when given) beside the
    control of the same budget and seed, averaged over the seeds both have, for the latest
    recommendation and budget, judged by the campaign's noise floor; None before the rung has
    a pair."""
    scored = scored_width_runs(records)
    controls = [r for r in scored if is_control(r) and r.edit.get("width_multiple") == WIDTH_MULTIPLE]
    runs = [r for r in scored if not is_control(r) and parent in (None, r.parent)]
    paired = paired_by_seed(controls, runs, lambda run, control: width_of(run) == width_of(control))
    if paired is None:
        return None
    ours, theirs = paired
    noise = noise_floor(records)
    floor = None if noise is None else (
        noise.paired_spread if noise.paired_spread is not None else noise.spread)
    return WidthCheck(non_embedding_params(Recipe.model_validate(theirs[0].recipe).shape),
                      mean_val_bpb(ours), mean_val_bpb(theirs), (trial_ids(ours), trial_ids(theirs)), floor,
                      len(ours))
