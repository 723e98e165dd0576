"""The check one size up: the campaign's answer and the baseline at twice the proxy's width.

After the ladder names a winner, the width rung (:mod:`recipelab.agent.phases.width_phase`)
trains it and the baseline, both moved onto the target's family by the export's rules, at
:data:`WIDTH_MULTIPLE` × the proxy's width and the top rung's tokens. That is the nearest
larger size at which the night's answer is measured, so the ledger reads it as evidence: a
winner the baseline beats there by more than the campaign's noise floor is not what a larger
run should train, and the campaign keeps the baseline (:attr:`WidthCheck.lost`).

On ``bench/transfer.py``'s three campaigns (63× the proxy's parameters, 5× the top rung's
tokens) the gains at twice the width were −0.167 / +0.209 / +0.033 against floors of 0.162 /
0.111 / 0.225, where the target's, over two seeds, were −0.61 / +0.15 / +0.12: the one winner
the baseline beat beyond the floor was the one that lost at the target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from recipelab.recipe import Recipe, non_embedding_params
from recipelab.trajectory.noise import noise_floor
from recipelab.trajectory.record import TrialRecord, has_score

WIDTH_KIND = "width"
CONTROL_ARM = {"arm": "baseline"}
"""The edit entry that marks a width run as the baseline's (the control at twice the width)."""
WIDTH_MULTIPLE = 2


def is_control(record: TrialRecord) -> bool:
    """Whether a width run is the baseline's, trained to check the recommendation's gain."""
    return record.edit.get("arm") == CONTROL_ARM["arm"]


def scored_width_runs(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """The width rung's complete runs with a finite val_bpb, in record order."""
    return [r for r in records if r.kind == WIDTH_KIND and has_score(r)]


@dataclass(frozen=True)
class WidthCheck:
    """The recommendation and the baseline, both exported by the same rules, at twice the
    proxy's width and the top rung's tokens, at one seed: whether the campaign's answer still
    holds one size up. ``floor`` is the campaign's noise floor for a one-seed gain (its paired
    spread, else the baseline seeds' range): a smaller gain, either way, says nothing."""

    params: int  # non-embedding, of the wider model
    recommended_val_bpb: float
    baseline_val_bpb: float
    runs: tuple[str, str]  # the recommendation's trial id, then the baseline's
    floor: float | None = None

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
        return (f"at twice the proxy's width ({self.params:,} non-embedding parameters, the top "
                f"rung's tokens, one seed) the recommendation scored "
                f"{self.recommended_val_bpb:.4f} ({self.runs[0]}) and the baseline "
                f"{self.baseline_val_bpb:.4f} ({self.runs[1]}): gain {self.gain:+.4f}, {verdict}")

    def to_json(self) -> dict[str, object]:
        return {"params": self.params, "gain": self.gain, "floor": self.floor,
                "held": self.held, "within_noise": self.within_noise, "lost": self.lost,
                "recommended": {"val_bpb": self.recommended_val_bpb, "trial": self.runs[0]},
                "baseline": {"val_bpb": self.baseline_val_bpb, "trial": self.runs[1]}}


def width_check(records: Sequence[TrialRecord], parent: str | None = None) -> WidthCheck | None:
    """The last scored control at twice the width beside the recommendation's run of that
    size, budget and seed (the run of ``parent``'s when given), judged by the campaign's noise
    floor; None before the rung has both."""
    scored = scored_width_runs(records)
    for control in reversed([r for r in scored if is_control(r)
                             and r.edit.get("width_multiple") == WIDTH_MULTIPLE]):
        recipe = Recipe.model_validate(control.recipe)
        for run in reversed([r for r in scored if not is_control(r)
                             and parent in (None, r.parent)]):
            other = Recipe.model_validate(run.recipe)
            if (run.budget_steps == control.budget_steps and other.seed == recipe.seed
                    and other.shape.d_model == recipe.shape.d_model):
                assert run.val_bpb is not None and control.val_bpb is not None
                noise = noise_floor(records)
                floor = None if noise is None else (
                    noise.paired_spread if noise.paired_spread is not None else noise.spread)
                return WidthCheck(non_embedding_params(recipe.shape), run.val_bpb,
                                  control.val_bpb, (run.trial_id, control.trial_id), floor)
    return None
