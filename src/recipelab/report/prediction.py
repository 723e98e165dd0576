"""The predicted validation curve of the cloud run, in val_bpb against bytes of text trained on.

A proxy cannot predict the absolute loss of a model a thousand times its size, and its
training loss is in nats per *proxy* token: a BPE target's loss per token is several times
larger, so reading a proxy's loss curve at the cloud run's step count compares unlike units.
Two choices make the prediction comparable with what the cloud run measures:

- the y-axis is val_bpb, which compares across tokenizers and vocabularies: the winner's
  stress-run training loss is converted by the ratio of its measured val_bpb to its last
  training loss (which also folds in the train/validation gap of that run);
- the x-axis is bytes of training text seen (tokens × bytes per token), not steps, since
  the cloud run's batch and tokenizer differ from the proxy's.

The claim is then one a larger model should meet: *at the same bytes of training text, the
target's val_bpb is at or below the proxy's*. The band around the curve is the larger of
the noise floor (seed-to-seed spread of the baseline) and the fit's residual, widened by one
band per decade read beyond the fitted range, with a floor of :data:`MIN_BAND_FRACTION` of the
value so that a run of three trials never claims more certainty than it has.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from recipelab.recipe import Recipe
from recipelab.report.powerlaw import PowerLaw, fit_power_law
from recipelab.trajectory.analysis import scored_proxies, spearman
from recipelab.trajectory.noise import noise_floor
from recipelab.trajectory.record import TrialRecord

MIN_BAND_FRACTION = 0.02
BYTE_TOKEN_BYTES = 1.0
ASSUMED_BPE_BYTES_PER_TOKEN = 4.0  # English web text under a 32k-128k BPE vocabulary


@dataclass(frozen=True)
class Prediction:
    """val_bpb(bytes of training text seen) with its band and what it rests on."""

    source_trial: str
    fit: PowerLaw | None
    last_bytes: float  # the end of the fitted range
    last_val_bpb: float  # the measured val_bpb at its end
    band_base: float
    noise_spread: float | None
    fit_rmse_bpb: float | None
    rank_agreement: float | None
    rank_pairs: int

    def center(self, bytes_seen: float) -> float:
        """The predicted val_bpb; flat at the last measurement when no curve could be fitted,
        and never above it beyond the fitted range (more training does not raise the loss)."""
        if self.fit is None or bytes_seen <= 0:
            return self.last_val_bpb
        if bytes_seen >= self.last_bytes:
            return min(self.fit(bytes_seen), self.last_val_bpb)
        return self.fit(bytes_seen)

    def half_width(self, bytes_seen: float) -> float:
        """The band: ``band_base`` widened by one band per decade beyond the fitted range."""
        beyond = max(0.0, math.log10(bytes_seen / self.last_bytes)) if bytes_seen > 0 else 0.0
        floor = MIN_BAND_FRACTION * self.center(bytes_seen)
        return max(self.band_base, floor) * (1.0 + beyond)

    def assumptions(self) -> list[str]:
        """What the prediction rests on, in words shown beside it."""
        items = [
            f"curve: the stress run {self.source_trial}'s training loss in val_bpb units "
            f"(scaled to its measured val_bpb {self.last_val_bpb:.4f}), against bytes of training text",
            "fit: " + (self.fit.describe().replace("t^", "bytes^") if self.fit else
                       "too few points to fit; the prediction is flat at the last measurement"),
            f"claim: at equal bytes of training text the larger target's val_bpb is at or below "
            f"the proxy's; measured beyond {self.last_bytes:,.0f} bytes is extrapolation",
            "noise floor: " + (f"{self.noise_spread:.4f} val_bpb (baseline seed spread)"
                               if self.noise_spread is not None else "not measured (one baseline seed)"),
            "rank agreement: " + (f"Spearman {self.rank_agreement:+.3f} over {self.rank_pairs} "
                                  "proxy/stress pairs" if self.rank_agreement is not None
                                  else f"unknown ({self.rank_pairs} proxy/stress pair(s), needs 3)"),
            f"band: ±max(noise floor, fit rmse {self.fit_rmse_bpb or 0:.4f}, "
            f"{MIN_BAND_FRACTION:.0%} of the value), +1 band per decade beyond the fitted range",
        ]
        return items

    def to_json(self) -> dict[str, object]:
        return {
            "units": "val_bpb against bytes of training text seen",
            "source_trial": self.source_trial,
            "fit": None if self.fit is None else {"a": self.fit.a, "b": self.fit.b, "c": self.fit.c,
                                                  "rmse": self.fit.rmse, "points": self.fit.points},
            "last_bytes": self.last_bytes, "last_val_bpb": self.last_val_bpb,
            "band_base": self.band_base, "noise_spread": self.noise_spread,
            "fit_rmse_bpb": self.fit_rmse_bpb, "rank_agreement": self.rank_agreement,
            "rank_pairs": self.rank_pairs, "assumptions": self.assumptions(),
        }


def bytes_per_token(recipe: Recipe) -> float:
    """Bytes of text per token of ``recipe``'s tokenizer: exactly 1 for bytes; for BPE it is
    measured on the corpus by ``pretrain`` (``bytes_seen`` in its metrics), so a plan made
    before the run assumes :data:`ASSUMED_BPE_BYTES_PER_TOKEN`."""
    return BYTE_TOKEN_BYTES if recipe.tokenizer == "byte" else ASSUMED_BPE_BYTES_PER_TOKEN


def _stress_of(records: Sequence[TrialRecord], trial_id: str) -> TrialRecord | None:
    found = None
    for record in records:
        if record.kind == "stress" and record.parent == trial_id and record.trained and record.curve:
            found = record
    return found


def rank_agreement(records: Sequence[TrialRecord]) -> tuple[float | None, int]:
    """Spearman between proxy val_bpb and stress final val_bpb (as the report computes it)."""
    proxies = {r.trial_id: r for r in scored_proxies(records)}
    pairs = []
    for record in records:
        if record.kind != "stress" or not record.trained or record.parent not in proxies:
            continue
        final = record.val_bpb if record.val_bpb is not None else (
            float(record.curve[-1]["loss"]) if record.curve else None)
        proxy_bpb = proxies[record.parent].val_bpb
        if final is not None and math.isfinite(final) and proxy_bpb is not None:
            pairs.append((proxy_bpb, final))
    return spearman([p[0] for p in pairs], [p[1] for p in pairs]), len(pairs)


def predict(records: Sequence[TrialRecord], winner: TrialRecord) -> Prediction:
    """The prediction from the winner's stress run, or from its own proxy curve without one."""
    run = _stress_of(records, winner.trial_id) or winner
    recipe = Recipe.model_validate(run.recipe)
    points = [p for p in run.curve if "step" in p and "loss" in p and math.isfinite(float(p["loss"]))]
    per_step = recipe.tokens_per_step * bytes_per_token(recipe)
    last_loss = float(points[-1]["loss"]) if points else None
    measured = run.val_bpb if run.val_bpb is not None else winner.val_bpb
    if measured is None or not math.isfinite(measured):
        raise ValueError(f"trial {run.trial_id} has no val_bpb to anchor a prediction on")
    # nats per token -> val_bpb: the run's own ratio (tokenizer and train/validation gap in one)
    scale = measured / last_loss if last_loss and last_loss > 0 else 1 / math.log(2)
    xs = [float(p["step"]) * per_step for p in points]
    ys = [float(p["loss"]) * scale for p in points]
    fit = fit_power_law(xs, ys)
    noise = noise_floor(records)
    rho, pairs = rank_agreement(records)
    rmse = fit.rmse if fit is not None else None
    band = max(noise.spread if noise else 0.0, rmse or 0.0)
    last_bytes = xs[-1] if xs else float(recipe.steps * per_step)
    return Prediction(source_trial=run.trial_id, fit=fit, last_bytes=last_bytes,
                      last_val_bpb=float(measured), band_base=band,
                      noise_spread=noise.spread if noise else None, fit_rmse_bpb=rmse,
                      rank_agreement=rho, rank_pairs=pairs)
